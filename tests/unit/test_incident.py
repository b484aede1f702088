"""One incident from the dumps of one job: ordered by when they were written (never by name),
the first fault, the collateral dumps, the unreadable ones, and one verdict."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fleet.analyze import analyze_incident
from postmortem.analysis.fleet.incident import IncidentDump, Role, build_incident
from postmortem.analysis.oncall.summary import ProblemClass
from postmortem.model import TimeSource
from postmortem.report.incident import build_incident_report
from postmortem.report.render import render
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
    renamed,
    write_tiny_dump,
)
from tests.tooling import invoke

NATIVE = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


def _write(path, module, lanes, stamp):
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec(lanes)])])
    spec = DumpSpec([device], layout="r590", metadata_timestamp=stamp)
    return write_tiny_dump(path, spec)


def _fault(path, stamp):
    offset = cubin("oob_store").fault["offset"]
    return _write(
        path, ModuleSpec("oob_store"), [LaneSpec(offset, 14, lane=n) for n in range(4)], stamp
    )


def _collateral(path, stamp):
    # A stand-in for a rank parked in NCCL: the divergent_barrier cubin with its kernel renamed
    # ncclKernel_SendRecv_RING, every warp in its spin loop, no exception.
    module = renamed(
        ModuleSpec("divergent_barrier"), b"divergent_barrier_kernel", b"ncclKernel_SendRecv_RING"
    )
    spin = cubin("divergent_barrier").stalls["spin"]["offset"]
    return _write(path, module, [LaneSpec(spin, lane=n) for n in range(32)], stamp)


@pytest.fixture
def job(tmp_path):
    """The dumps of one job, named so that the name order is not the order they were written:
    rank0 faulted second, rank1 first, rank2 waits in NCCL, rank3 is not a dump at all."""
    rank0 = _fault(tmp_path / "core.rank0.nvcudmp", T0 + 5)
    rank1 = _fault(tmp_path / "core.rank1.nvcudmp", T0 + 3)
    rank2 = _collateral(tmp_path / "core.rank2.nvcudmp", T0 + 4)
    rank3 = tmp_path / "core.rank3.nvcudmp"
    rank3.write_bytes(b"not an ELF file, cut short by a full disk")
    return [rank0, rank1, rank2, rank3]


def test_the_first_fault_is_the_earliest_by_metadata_not_by_name(job):
    # WHEN the four dumps are made one incident
    incident = analyze_incident(job, NATIVE)
    # THEN they are in the order they were written, the unreadable one last, each with its role
    rows = [(r.dump.path.rsplit("/", 1)[1], r.role, r.dump.time) for r in incident.rows]
    assert rows == [
        ("core.rank1.nvcudmp", Role.FIRST_FAULT, T0 + 3),
        ("core.rank2.nvcudmp", Role.COLLATERAL, T0 + 4),
        ("core.rank0.nvcudmp", Role.FAULT, T0 + 5),
        ("core.rank3.nvcudmp", Role.UNREADABLE, incident.rows[3].dump.time),
    ]
    assert all(r.dump.time_source == TimeSource.METADATA for r in incident.rows[:3])
    # AND the collateral dump says where its warps wait; the unreadable one says why, in a line
    assert incident.rows[1].why == "no exception; its warps wait in ncclKernel_SendRecv_RING"
    assert incident.rows[3].why.startswith("not a CUDA coredump: ")
    assert "\n" not in incident.rows[3].why
    assert incident.rows[2].why == "the same crash signature as the first fault"


def test_the_verdict_is_the_first_fault_s_and_counts_who_agrees(job):
    incident = analyze_incident(job, NATIVE)
    verdict = incident.verdict
    assert verdict.kind == "fault"
    assert verdict.lead == str(job[1])
    assert verdict.headline.startswith("Warp Illegal Address in oob_kernel(float*, int, float)")
    assert (verdict.agree, verdict.of) == (2, 2)
    # AND the first fault's on-call summary leads the report
    assert incident.oncall.problem_class is ProblemClass.ILLEGAL_ADDRESS
    assert incident.notes == ()


def test_the_report_lists_each_dump_with_its_role_and_time(job):
    report = build_incident_report(analyze_incident(job, NATIVE))
    assert report["schema"] == "postmortem.incident/1"
    assert [d["role"] for d in report["dumps"]] == [
        "first-fault",
        "collateral",
        "fault",
        "unreadable",
    ]
    assert report["dumps"][0]["time_utc"] == "2026-01-01T00:00:03Z"
    assert report["counts"] == {
        "first-fault": 1, "fault": 1, "collateral": 1, "stuck": 0, "unreadable": 1,
    }  # fmt: skip
    assert report["dumps"][1]["kernels"] == ["ncclKernel_SendRecv_RING(int volatile*, float*)"]
    text = render("incident", report, "text")
    assert "first-fault  2026-01-01T00:00:03Z (by metadata)" in text
    assert "on-call summary of " in text
    for fmt in ("md", "html"):
        assert "core.rank3.nvcudmp" in render("incident", report, fmt)


def _dump(name, time, source=TimeSource.METADATA, mtime=None, **facts):
    return IncidentDump(name, time, source, time if mtime is None else mtime, **facts)


def test_undated_dumps_are_ordered_by_modification_time_and_the_notes_say_so():
    dumps = [
        _dump("b", 20.0, TimeSource.MTIME, faulted=True, signature="s1", headline="late"),
        _dump("a", 10.0, TimeSource.MTIME, faulted=True, signature="s2", headline="early"),
    ]
    incident = build_incident(dumps)
    assert [r.dump.path for r in incident.rows] == ["a", "b"]
    assert incident.rows[1].why == "another crash signature"
    assert (incident.verdict.agree, incident.verdict.of) == (1, 2)
    assert incident.notes[0].message.startswith("2 dumps carry no metadata timestamp")


def test_faults_in_the_same_second_are_told_apart_by_file_time_and_noted():
    dumps = [
        _dump("r0", 100.0, mtime=100.9, faulted=True, signature="s", headline="x"),
        _dump("r1", 100.0, mtime=100.4, faulted=True, signature="s", headline="x"),
    ]
    incident = build_incident(dumps)
    assert incident.verdict.lead == "r1"
    assert tuple(n.message for n in incident.notes) == (
        "2 faulting dumps share the first fault's timestamp (whole seconds): among them the "
        "first is the one whose file was written first",
    )


def test_without_a_fault_the_stuck_dump_leads_and_collateral_alone_says_so():
    stuck = _dump("r0", 5.0, kernels=("_Z10oob_kernelPfif",), headline="hang: …", signature="h")
    nccl = _dump("r1", 4.0, kernels=("ncclDevKernel_AllReduce_Sum_f32_RING_LL",))
    empty = IncidentDump(
        "r2", 3.0, TimeSource.MTIME, 3.0, "no GPU state to analyze", no_gpu_state=True
    )
    incident = build_incident([stuck, nccl, empty])
    assert [r.role for r in incident.rows] == [Role.COLLATERAL, Role.COLLATERAL, Role.STUCK]
    assert incident.rows[0].why.startswith("no warp and no exception")
    assert (incident.verdict.kind, incident.verdict.lead) == ("hang", "r0")
    # AND the dump with no GPU state is not put down to an old driver for its missing timestamp
    assert incident.notes == ()
    alone = build_incident([nccl, empty])
    assert alone.verdict.kind == "collateral" and alone.verdict.lead is None
    nothing = build_incident([IncidentDump("x", None, None, None, "cannot read: gone")])
    assert nothing.verdict.kind == "unreadable"
    assert nothing.rows[0].role is Role.UNREADABLE


def test_analyze_of_several_dumps_writes_the_incident_as_json(job, tmp_path):
    # GIVEN the job's dumps, named in an order that is not the order they were written
    # WHEN the command line is asked for JSON
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = invoke("analyze", *job, "--format", "json", "--no-gdb", cwd=ROOT, env=cache)
    # THEN the report is written, and the unreadable dump makes the exit status 4
    assert result.returncode == 4, result.stderr
    assert result.stderr == ""
    report = json.loads(result.stdout)
    schema = json.loads(
        resources.files("postmortem.report").joinpath("incident.schema.json").read_text()
    )
    jsonschema.Draft202012Validator(schema).validate(report)
    roles = [(d["path"].rsplit("/", 1)[1], d["role"]) for d in report["dumps"]]
    assert roles == [
        ("core.rank1.nvcudmp", "first-fault"),
        ("core.rank2.nvcudmp", "collateral"),
        ("core.rank0.nvcudmp", "fault"),
        ("core.rank3.nvcudmp", "unreadable"),
    ]
    assert report["verdict"]["lead"] == str(job[1])
    assert report["oncall"]["problem_class"] == "illegal-memory-access"


def test_scan_incident_adds_the_incident_to_the_index(job, tmp_path):
    # GIVEN the job's dumps in one folder
    folder = job[0].parent
    # WHEN it is scanned as one incident, as JSON lines
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    scan = ("scan", folder, "--incident", "--no-cache", "--no-disasm", "-j", "1")
    result = invoke(*scan, "--format", "json", cwd=ROOT, env=cache)
    # THEN the scan finishes (4: one dump is an error row), every line follows the schema,
    # and the line after the scan's is the incident, with the same roles as `analyze` gives
    assert result.returncode == 4, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    schema = json.loads(
        resources.files("postmortem.scan").joinpath("scan-line.schema.json").read_text()
    )
    validator = jsonschema.Draft202012Validator(schema)
    for line in lines:
        validator.validate(line)
    assert [line["type"] for line in lines[:2]] == ["scan", "incident"]
    incident = lines[1]
    roles = [(d["path"].rsplit("/", 1)[1], d["role"]) for d in incident["dumps"]]
    assert roles == [
        ("core.rank1.nvcudmp", "first-fault"),
        ("core.rank2.nvcudmp", "collateral"),
        ("core.rank0.nvcudmp", "fault"),
        ("core.rank3.nvcudmp", "unreadable"),
    ]
    assert (incident["verdict"]["agree"], incident["verdict"]["of"]) == (2, 2)
    # AND the text index shows the incident block
    text = invoke(*scan, cwd=ROOT, env=cache)
    assert "incident: 4 dumps: 2 faulted, 1 collateral, 0 stuck, 1 unreadable" in text.stdout


def _schema(package, name):
    return json.loads(resources.files(package).joinpath(name).read_text())


def _refs_dropped(node):
    """`node` with each `$ref` cut to its last part: copies of one schema refer to it from
    different places."""
    if isinstance(node, dict):
        return {
            key: value.rsplit("/", 1)[1] if key == "$ref" else _refs_dropped(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_refs_dropped(item) for item in node]
    return node


def test_every_copy_of_the_incident_and_oncall_schemas_agrees():
    # The on-call summary is in the analyze report and the incident, and the incident is a
    # line of a scan; each schema file carries its own copy, and the copies must not drift.
    report = _schema("postmortem.report", "report.schema.json")
    incident = _schema("postmortem.report", "incident.schema.json")
    scan = _schema("postmortem.scan", "scan-line.schema.json")["$defs"]["incident"]
    oncall = _refs_dropped(incident["$defs"]["oncall"])
    assert _refs_dropped(report["properties"]["oncall"]) == oncall
    assert _refs_dropped(scan["$defs"]["oncall"]) == oncall
    # The comparison of two dumps of one process (motion) is analyze's own: a scan's rows hold
    # no warps to compare.
    own = ("schema", "tool", "motion")
    mine = {k: v for k, v in incident["properties"].items() if k not in own}
    theirs = {k: v for k, v in scan["properties"].items() if k != "type"}
    assert _refs_dropped(theirs) == _refs_dropped(mine)
    assert set(incident["required"]) - set(own) == set(scan["required"]) - {"type"}
