"""The wheel carries the report templates: build it, install it in a fresh venv, render from there.

`templates/` sits at the top of the checkout and the build maps it to `postmortem.templates`;
a report rendered by the installed command, run outside the checkout, proves the mapping. The
wheel also carries the license, `py.typed` and every published JSON schema. The venv gets the
package's dependencies from the configured package index; this takes a minute.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from postmortem.demangle import demangle
from tests.conftest import DUMPS, ROOT, truth_of
from tests.tooling import made_once, session_folder

pytestmark = pytest.mark.slow  # a wheel built and installed: run by CI's slow tier

TEMPLATES = sorted(p.name for p in (ROOT / "templates").glob("*.j2"))
SCHEMAS = sorted(
    p.relative_to(ROOT).as_posix() for p in (ROOT / "postmortem").rglob("*.schema.json")
)
# What the build does not need: history, caches, and the large test data.
NOT_BUILT = (".git", ".venv", "bench", "fixtures", "tests", "build", "dist", "*.egg-info")
NOT_BUILT += ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis")


def run(argv: list[str | Path], cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # pip compiles every module it installs, which none of these tests checks; the commands
    # compile what they import.
    env["PIP_NO_COMPILE"] = "1"
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
    (wheel,) = out.glob("cuda_postmortem-*.whl")
    return wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout, once for the session's workers."""
    tmp = session_folder(tmp_path_factory) / "packaging"
    with made_once(tmp) as made:
        if not made:
            # A copy, so that the build's own build/ and *.egg-info never land in the checkout.
            source = tmp / "source"
            shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_BUILT))
            build_wheel(source, tmp / "wheels")
    (built,) = (tmp / "wheels").glob("cuda_postmortem-*.whl")
    return built


def test_wheel_ships_templates_schemas_license_and_type_marker(wheel):
    if not TEMPLATES or len(SCHEMAS) < 4:
        pytest.fail(f"the checkout lacks templates or schemas: {TEMPLATES}, {SCHEMAS}")
    # GIVEN the files of the built wheel
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
        (metadata,) = [name for name in shipped if name.endswith(".dist-info/METADATA")]
        fields = archive.read(metadata).decode("utf-8").partition("\n\n")[0].splitlines()
        license_file = metadata.replace("METADATA", "licenses/LICENSE")
        license_text = archive.read(license_file) if license_file in shipped else None
    # THEN the templates, every schema and the type marker are in the package
    assert {f"postmortem/templates/{name}" for name in TEMPLATES} <= shipped
    assert set(SCHEMAS) <= shipped
    assert "postmortem/py.typed" in shipped
    # AND the license text travels with the metadata, which names it
    assert license_text == (ROOT / "LICENSE").read_bytes()
    assert "License-Expression: Apache-2.0" in fields
    assert "Classifier: Typing :: Typed" in fields


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Path:
    """The `postmortem` command of a fresh venv that has only the wheel and its dependencies
    (made once for the session's workers)."""
    if not TEMPLATES:
        pytest.fail("no templates/*.j2 in the checkout")
    tmp = session_folder(tmp_path_factory) / "venv"
    venv = tmp / "venv"
    python = venv / "bin" / "python"
    with made_once(tmp) as made:
        if not made:
            run([sys.executable, "-m", "venv", venv], cwd=tmp)
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


def test_installed_wheel_offers_the_library_api_and_its_schemas(installed, tmp_path):
    # GIVEN the installed package, imported outside the checkout
    python = installed.parent / "python"
    script = """
import json, sys
from importlib import metadata, resources
from pathlib import Path
import postmortem
light = "postmortem.analysis.analyze" not in sys.modules and "numpy" not in sys.modules
from postmortem import AnalyzeOptions, analyze_dump
analysis = analyze_dump(Path(sys.argv[1]), AnalyzeOptions(cuda_gdb=False))
schemas = [
    json.loads(resources.files(package).joinpath(name).read_text())["$id"]
    for package, name in [("postmortem.report", "info.schema.json"),
                          ("postmortem.scan", "signature.schema.json")]
]
versions = [postmortem.__version__, metadata.version("cuda-postmortem")]
print(json.dumps([light, versions, analysis.verdict.kind.value, schemas]))
"""
    # WHEN it analyzes a fixture dump through the top-level API and reads the schemas
    out = run([python, "-c", script, DUMPS / "oob_store.nvcudmp"], cwd=tmp_path)
    # THEN `import postmortem` stayed light, and the rest came from the wheel
    light, (version, distribution_version), kind, schemas = json.loads(out)
    assert light is True
    assert version == distribution_version
    assert kind == "fault"
    assert schemas == ["postmortem.info/1", "postmortem.signature/1"]


def _install_blocks() -> list[str]:
    """The shell blocks of the README's "Installing" section, as written."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Installing\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


def test_the_readme_has_a_clone_and_a_wheel_install_block():
    blocks = _install_blocks()
    assert len(blocks) == 2
    assert "pip install '.[tools]'" in blocks[0]
    assert "cuda_postmortem-*.whl)[tools]" in blocks[1]


@pytest.mark.parametrize("block", [0, 1], ids=["from-the-clone", "from-a-wheel"])
def test_each_readme_install_block_works_as_written(block, tmp_path):
    # GIVEN a clean copy of the checkout (what a fresh clone holds), fixtures included
    clone = tmp_path / "clone"
    skip = tuple(p for p in NOT_BUILT if p not in ("fixtures",))
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(*skip))
    # WHEN the block runs there, line by line, as a user pastes it
    out = run(["sh", "-eu", "-c", _install_blocks()[block]], cwd=clone, timeout=900)
    # THEN its last line, an analysis of the sample dump, found the fault with nvdisasm's help:
    # the tools extra was installed
    assert "oob_kernel" in out
    assert "STG.E" in out
