"""The wheel carries the report templates: build it, install it in a fresh venv, render from there.

`templates/` sits at the top of the checkout and the build maps it to `postmortem.templates`;
a report rendered by the installed command, run outside the checkout, proves the mapping. The
venv gets the package's dependencies from the configured package index; this takes a minute.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from postmortem.demangle import demangle
from tests.conftest import DUMPS, ROOT, truth_of

TEMPLATES = sorted(p.name for p in (ROOT / "templates").glob("*.j2"))
# What the build does not need: history, caches, and the large test data.
NOT_BUILT = (".git", ".venv", "bench", "fixtures", "tests", "build", "dist", "*.egg-info")
NOT_BUILT += ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis")


def run(argv: list[str | Path], cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(
        [str(arg) for arg in argv], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, f"{argv} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def build_wheel(source: Path, out: Path) -> Path:
    """`python -m build --wheel` when `build` is installed, else `pip wheel --no-deps`."""
    if importlib.util.find_spec("build") is not None:
        run([sys.executable, "-m", "build", "--wheel", "--outdir", out, source], cwd=source)
    else:
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, source], cwd=source)
    (wheel,) = out.glob("postmortem-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The `postmortem` command of a fresh venv that has only the wheel and its dependencies."""
    if not TEMPLATES:
        pytest.fail("no templates/*.j2 in the checkout")
    tmp = tmp_path_factory.mktemp("packaging")
    # A copy, so that the build's own build/ and *.egg-info never land in the checkout.
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_BUILT))
    wheel = build_wheel(source, tmp / "wheels")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert {f"postmortem/templates/{name}" for name in TEMPLATES} <= shipped
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", wheel], cwd=tmp)
    where = run([python, "-c", "import postmortem; print(postmortem.__file__)"], cwd=tmp)
    assert Path(where.strip()).is_relative_to(venv), "the venv imports the checkout, not the wheel"
    return venv / "bin" / "postmortem"


@pytest.mark.parametrize("fmt", ["html", "md", "text"])
def test_installed_wheel_renders_every_report_format_outside_the_checkout(installed, tmp_path, fmt):
    # GIVEN the installed command, run from a directory that is not the checkout
    dump = DUMPS / "oob_store.nvcudmp"
    kernel = demangle(truth_of(dump)["fault"]["kernel"])
    out = tmp_path / f"report.{fmt}"
    # WHEN it writes a report of a fixture dump
    run(
        [installed, "analyze", dump, "--format", fmt, "--no-gdb", "--no-disasm", "-o", out],
        cwd=tmp_path,
    )
    # THEN the report exists and names the kernel: the templates came with the wheel
    text = out.read_text(encoding="utf-8")
    assert kernel in text
    if fmt == "html":
        assert text.startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("fmt", ["html", "md", "text"])
def test_installed_wheel_scans_with_its_rules_and_templates(installed, tmp_path, fmt):
    # GIVEN the installed command and a directory with one fixture dump
    (tmp_path / "dumps").mkdir()
    shutil.copy(DUMPS / "oob_store.nvcudmp", tmp_path / "dumps" / "core")
    out = tmp_path / f"index.{fmt}"
    # WHEN it scans it (signature rules and index templates come from the wheel)
    run(
        [installed, "scan", "dumps", "--format", fmt, "--no-disasm", "--no-cache", "-o", out],
        cwd=tmp_path,
    )
    # THEN the index names the normalized kernel and the rules it used
    text = out.read_text(encoding="utf-8")
    assert "oob_kernel" in text and "1 dump" in text
    assert "rules default@" in text or fmt != "html"
