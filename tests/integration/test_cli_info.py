"""`postmortem info` end to end, in a subprocess, as a user runs it."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DUMPS, FIXTURES, truth_of


def run_info(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "postmortem", "info", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_info_reports_the_planted_fault():
    dump = DUMPS / "oob_store.nvcudmp"
    truth = truth_of(dump)
    result = run_info(dump)
    assert result.returncode == 0, result.stderr
    assert "Warp Illegal Address (14)" in result.stdout
    assert "oob_kernel(float*, int, float)" in result.stdout
    assert f"0x{truth['fault']['error_pc']:x}" in result.stdout


def test_info_json_is_parseable_and_names_the_exception():
    result = run_info(DUMPS / "oob_store.nvcudmp", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["faults"][0]["exception_name"] == "Warp Illegal Address"


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    dump = (DUMPS / "oob_store.nvcudmp").read_bytes()
    files = {
        "empty": b"",
        "text": b"hello, not a dump\n",
        "truncated": dump[: len(dump) // 2],
        "header_only": dump[:64],
        "bad_gzip": b"\x1f\x8b\x08\x00" + b"\x00" * 40,
        "gzip_of_text": gzip.compress(b"plain text"),
    }
    paths = {}
    for name, data in files.items():
        paths[name] = tmp / f"{name}.nvcudmp"
        paths[name].write_bytes(data)
    paths["cubin"] = FIXTURES / "cubins" / "oob_store.sm_90.v8.cubin"
    paths["host_elf"] = Path(sys.executable).resolve()
    paths["missing"] = tmp / "no-such-file.nvcudmp"
    return paths


@pytest.mark.parametrize(
    "kind",
    ["empty", "text", "truncated", "header_only", "bad_gzip", "gzip_of_text", "cubin", "host_elf",
     "missing"],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(tmp_path, kind):
    path = _bad_inputs(tmp_path)[kind]
    before = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    result = run_info(path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("hint:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == ""
    if before is not None:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_cubin_is_told_apart_from_a_dump():
    result = run_info(FIXTURES / "cubins" / "oob_store.sm_90.v8.cubin")
    assert "e_type is 2, expected 4" in result.stderr
    assert "hint: this is an executable" in result.stderr


def test_reading_does_not_modify_the_dump():
    dump = DUMPS / "oob_store.nvcudmp"
    before = (hashlib.sha256(dump.read_bytes()).hexdigest(), dump.stat().st_mtime_ns)
    assert run_info(dump).returncode == 0
    assert (hashlib.sha256(dump.read_bytes()).hexdigest(), dump.stat().st_mtime_ns) == before
