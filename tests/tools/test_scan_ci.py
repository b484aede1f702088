"""`scan` in CI: a crash group's lifecycle from the repository's known-crashes file, and what
the CI system is given (the job summary, annotations, the tracker comment, JUnit XML), read
the way their readers read them. No scan cache anywhere: a CI runner keeps none."""

from __future__ import annotations

import json
import re
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

import cmarkgfm
import jsonschema
import xmlschema

from postmortem.errors import ExitStatus
from tests.conftest import ROOT
from tests.tinydump import (
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    cubin,
    write_tiny_dump,
)
from tests.tooling import invoke, require_files

DAY = 86400
T0 = int(datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp())
XSD = Path(sys.prefix) / "share" / "junit-10.xsd"
DOC = ROOT / "docs" / "ci.md"


def _fault_dump(path: Path, abi: str, stamp: int) -> Path:
    """A dump of the `calls` kernel faulting at its planted store, from the build of `abi`
    (v7 and v8: the same source by two compilers, the same signature, two builds)."""
    module = ModuleSpec("calls", abi=abi)
    offset = cubin("calls", abi).fault["offset"]
    lanes = [LaneSpec(offset, 14, lane=n) for n in range(4)]
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec(lanes)])])
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_tiny_dump(path, DumpSpec([device], layout="r590", metadata_timestamp=stamp))


def _artifact(root: Path, run: int, attempt: int, dumps: list[tuple[str, int]]) -> Path:
    """`root` laid out as `actions/download-artifact` leaves it: one folder per artifact."""
    folder = root / f"cuda-coredumps-unit-1-gpu-{run}-{attempt}"
    for n, (abi, stamp) in enumerate(dumps):
        _fault_dump(folder / f"cuda_coredump_runner{n}.{4000 + n}.{stamp}", abi, stamp)
    return root


def _scan(root: Path, *args: object, env: dict[str, str | None] | None = None):
    return invoke("scan", root, "--no-cache", "--no-disasm", "--no-gdb", "-j", "1", *args, env=env)


SCHEMA = json.loads((ROOT / "postmortem/scan/scan-line.schema.json").read_text())


def _groups(jsonl: Path) -> list[dict]:
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    for line in lines:  # every line as the shipped schema says
        jsonschema.validate(line, SCHEMA)
    return [line for line in lines if line["type"] == "group"]


def test_a_fixed_crash_back_in_a_later_build_is_marked_regressed_without_any_cache(tmp_path):
    known = tmp_path / "known-crashes.toml"
    known.write_text("# nothing known yet\n")
    # GIVEN a CI run whose artifact holds a dump of the first build
    first = _artifact(tmp_path / "run1", 1111111111, 1, [("v7", T0)])
    rows = tmp_path / "run1.jsonl"
    scanned = _scan(first, "--known", known, "--fail-on", "new", "--jsonl", rows)
    # THEN its group is new, and the job fails on it
    assert scanned.returncode == ExitStatus.CRASHES, scanned.stderr
    (group,) = _groups(rows)
    assert (group["mark"], group["lifecycle"]["state"]) == ("new", None)
    assert group["runs"] == ["run 1111111111 attempt 1 job unit-1-gpu"]
    # WHEN the crash is resolved in the known-crashes file, from that scan
    fixed_on = datetime.fromtimestamp(T0 + DAY, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    resolved = invoke(
        "triage", "resolve", group["id"][:6], "--by", "#4512", "--on", fixed_on,
        "--scan", rows, "--file", known,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    assert f"{group['id']}: fixed by #4512" in resolved.stdout
    # AND a later run's dumps come back: the old build, still running, and a new build
    later = _artifact(
        tmp_path / "run2", 2222222222, 2, [("v7", T0 + 2 * DAY), ("v8", T0 + 3 * DAY)]
    )
    rows2 = tmp_path / "run2.jsonl"
    again = _scan(later, "--known", known, "--fail-on", "regressed", "--jsonl", rows2)
    # THEN the group is regressed, by the one dump of the new build
    assert again.returncode == ExitStatus.CRASHES, again.stderr
    (back,) = _groups(rows2)
    assert back["id"] == group["id"]
    assert (back["mark"], back["lifecycle"]["after_fix"]) == ("regressed", 1)
    assert back["lifecycle"]["detail"].startswith("fixed by #4512 on ")
    summary = json.loads(rows2.read_text().splitlines()[0])
    assert summary["known"]["marks"] == {"regressed": 1, "new": 0, "known": 0}
    # AND the old build alone, however late, is no regression
    old_only = _artifact(tmp_path / "run3", 3333333333, 1, [("v7", T0 + 5 * DAY)])
    quiet = _scan(old_only, "--known", known, "--fail-on", "regressed")
    assert quiet.returncode == ExitStatus.OK, quiet.stderr


def test_fail_on_decides_the_exit_status(tmp_path):
    root = _artifact(tmp_path / "a", 1234567890, 1, [("v7", T0)])
    assert _scan(root, "--fail-on", "never").returncode == ExitStatus.OK
    assert _scan(root, "--fail-on", "regressed").returncode == ExitStatus.OK
    assert _scan(root, "--fail-on", "any").returncode == ExitStatus.CRASHES
    # an ignored crash fails no job
    known = tmp_path / "known.toml"
    rows = tmp_path / "rows.jsonl"
    _scan(root, "--jsonl", rows)
    (group,) = _groups(rows)
    invoke("triage", "ignore", group["id"], "--reason", "planted", "--file", known)
    assert _scan(root, "--known", known, "--fail-on", "any").returncode == ExitStatus.OK
    assert _scan(root, "--known", known, "--fail-on", "new").returncode == ExitStatus.OK


def _github_env(tmp_path: Path, workspace: Path) -> dict[str, str | None]:
    return {
        "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_WORKSPACE": str(workspace), "GITHUB_REPOSITORY": "acme/kernels",
        "GITHUB_RUN_ID": "1234567890", "GITHUB_RUN_ATTEMPT": "2", "GITHUB_JOB": "gpu-tests",
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
        "GITHUB_EVENT_NAME": "pull_request", "GITHUB_REF": "refs/pull/27859/merge",
    }  # fmt: skip


def test_in_github_actions_the_scan_annotates_the_source_line_and_writes_the_summary(tmp_path):
    # GIVEN a checkout that holds the kernel's source, and a CI artifact of its crash
    workspace = tmp_path / "checkout"
    (workspace / "csrc").mkdir(parents=True)
    (workspace / "csrc" / "calls.cu").write_text(
        (ROOT / "fixtures" / "cu" / "calls.cu").read_text()
    )
    root = _artifact(tmp_path / "artifacts", 1234567890, 2, [("v7", T0)])
    env = _github_env(tmp_path, workspace)
    # WHEN it is scanned inside a GitHub Actions job
    scanned = invoke("scan", root, "--no-cache", "--no-gdb", "-j", "1", "--fail-on", "new", env=env)
    # THEN one error annotation points at the line, in the repository, and fails the job
    assert scanned.returncode == ExitStatus.CRASHES
    (command,) = [line for line in scanned.stdout.splitlines() if line.startswith("::")]
    assert command.startswith("::error file=csrc/calls.cu,line=15,title=new CUDA crash ")
    assert "%0A" in command and "\n" not in command.split("::", 2)[2]
    # AND the job summary is the Markdown index, rendered as GitHub renders it
    html = cmarkgfm.github_flavored_markdown_to_html((tmp_path / "summary.md").read_text())
    assert "<table>" in html and "two_level" in html


def test_an_annotation_has_no_file_when_the_source_is_not_in_the_checkout(tmp_path):
    root = _artifact(tmp_path / "artifacts", 1234567890, 1, [("v7", T0)])
    env = _github_env(tmp_path, tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    scanned = invoke("scan", root, "--no-cache", "--no-gdb", "-j", "1", env=env)
    (command,) = [line for line in scanned.stdout.splitlines() if line.startswith("::")]
    assert command.startswith("::warning title=new CUDA crash ")  # counted by no --fail-on
    assert scanned.returncode == ExitStatus.OK


def test_the_tracker_comment_renders_as_github_renders_it_and_names_the_run(tmp_path):
    root = _artifact(tmp_path / "artifacts", 1234567890, 2, [("v7", T0), ("v8", T0 + DAY)])
    comment = tmp_path / "tracker.md"
    env = _github_env(tmp_path, tmp_path)
    scanned = _scan(root, "--tracker-comment", comment, "--ci", "none", env=env)
    assert scanned.returncode == ExitStatus.OK and "\n::" not in scanned.stdout
    text = comment.read_text()
    assert len(text) < 65_536
    html = cmarkgfm.github_flavored_markdown_to_html(text)
    assert '<a href="https://github.com/acme/kernels/actions/runs/1234567890/attempts/2">' in html
    assert "<strong>new</strong>" in html and "<table>" in html
    assert "(PR #27859, job <code>gpu-tests</code>)</h3>" in html
    assert "run 1234567890 attempt 2 job unit-1-gpu" in html
    assert "**" not in re.sub(r"<[^>]+>", "", html)  # no emphasis left unrendered


def test_the_junit_report_is_valid_against_junit_10_xsd_with_a_case_per_group(tmp_path):
    (xsd,) = require_files([XSD] if XSD.is_file() else [], "junit-10.xsd (dev/setup.sh test)")
    root = _artifact(tmp_path / "artifacts", 1234567890, 1, [("v7", T0)])
    (root / "cuda-coredumps-unit-1-gpu-1234567890-1" / "broken.nvcudmp").write_bytes(
        b"\x7fELF\x02\x01\x01" + b"\0" * 57
    )
    report = tmp_path / "crashes.xml"
    scanned = _scan(root, "--junit", report, "--fail-on", "new")
    assert scanned.returncode == ExitStatus.CRASHES
    schema = xmlschema.XMLSchema(xsd)
    schema.validate(report)
    suite = schema.to_dict(report)["testsuite"][0]
    assert (suite["@tests"], suite["@failures"], suite["@errors"]) == ("2", "1", "1")
    failing = next(case for case in suite["testcase"] if "failure" in case)
    assert failing["failure"][0]["@type"] == "new"
    assert failing["@name"].endswith("Warp Illegal Address in two_level")


def test_the_documented_workflow_runs_as_written_on_an_artifact_folder(tmp_path):
    # GIVEN the scan steps of the workflow in docs/ci.md, and a folder laid out as its
    # download step leaves the artifacts, in a checkout holding its known-crashes file
    steps = re.findall(r"^\s+(?:- )?run: (postmortem scan .+)$", DOC.read_text(), re.MULTILINE)
    assert steps, "docs/ci.md lost its scan step"
    _artifact(tmp_path / "artifacts", 1234567890, 1, [("v7", T0)])
    (tmp_path / "known-crashes.toml").write_text("")
    env = _github_env(tmp_path, tmp_path)
    # WHEN they run there (with the tools this machine has)
    for step in steps:
        args = shlex.split(step)[1:] + ["--no-gdb", "-j", "1"]
        done = invoke(*args, env=env, cwd=tmp_path)
        # THEN the new crash fails the job, and every file the workflow uploads is there
        assert done.returncode == ExitStatus.CRASHES, done.stderr
    for name in re.findall(r"--(?:junit|tracker-comment) (\S+)", " ".join(steps)):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "summary.md").stat().st_size > 0
