"""Hardware or code across a fleet of dumps (NVIDIA's Xid 13/31 guidance applied to dumps):
one signature on many GPUs points at the code; one GPU (or SM) faulting in signatures of
its own points at the GPU; a small fleet says it cannot tell.

The fleets are written by the fixture builder (bench/fleet.py) into a temporary folder
and scanned for real, with no external tool.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fleet.signature import load_rules
from postmortem.report.render import render
from postmortem.scan.fleet.hardware import CODE, HARDWARE, TOO_FEW, TOO_FEW_TEXT, UNCLEAR
from postmortem.scan.outputs.index import build_index
from postmortem.scan.run import ScanOptions, ScanResult, run_scan
from postmortem.scan.work.worker import WorkOptions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from fleet import FleetDump, write_dump  # noqa: E402

SCHEMA = json.loads((ROOT / "postmortem" / "scan" / "scan-line.schema.json").read_text())
BAD_GPU = "node-07/0000:3a:00.0"


def _scan(folder: Path) -> ScanResult:
    work = WorkOptions(AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False),
                       load_rules())  # fmt: skip
    return run_scan([folder], ScanOptions(work, jobs=1, cache_path=None))


def _write(folder: Path, dumps: list[FleetDump]) -> Path:
    folder.mkdir(exist_ok=True)
    for number, dump in enumerate(dumps):
        write_dump(folder, FleetDump(**{**_fields(dump), "pid": 3000 + number}))
    return folder


def _fields(dump: FleetDump) -> dict[str, object]:
    return {name: getattr(dump, name) for name in FleetDump.__slots__}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> ScanResult:
    # GIVEN a fleet where oob_store's fault (one signature) strikes six GPUs on three hosts,
    # and one GPU, node-07's at bus 0x3a, faults in three signatures no other GPU shows
    spread = [
        FleetDump("oob_store", host=f"node-0{host}", pci_bus=bus, sm=3 + host)
        for host in (1, 2, 3) for bus in (0x18, 0x2A)
    ]  # fmt: skip
    bad = [
        FleetDump("misaligned_load", host="node-07", pci_bus=0x3A, sm=sm, time=1_763_000_000 + sm)
        for sm in (11, 40, 77)
    ] + [
        FleetDump("cutlass_like", host="node-07", pci_bus=0x3A, sm=90),
        FleetDump("device_assert", host="node-07", pci_bus=0x3A, sm=12),
        FleetDump("oob_store", host="node-07", pci_bus=0x3A, sm=5),
    ]  # fmt: skip
    return _scan(_write(tmp_path_factory.mktemp("fleet"), spread + bad))


def _group(result: ScanResult, cubin_kernel: str):
    return next(g for g in result.groups if g.signature.kernel.startswith(cubin_kernel))


def test_one_signature_on_many_gpus_points_at_the_code(fleet):
    group = _group(fleet, "oob_kernel")
    assert group.blame is not None
    assert group.blame.kind == CODE
    assert (group.blame.dumps, group.blame.gpus, group.blame.hosts) == (7, 7, 4)
    assert "7 GPUs of 4 host(s)" in group.blame.reason


def test_one_gpu_faulting_in_signatures_of_its_own_points_at_the_gpu(fleet):
    gpu = next(g for g in fleet.gpus if g.id == BAD_GPU)
    assert gpu.blame.kind == HARDWARE
    assert (gpu.blame.dumps, gpu.blame.signatures) == (6, 4)
    assert "5 dumps in 3 signatures that no other GPU shows" in gpu.blame.reason
    # the signature confined to that GPU is blamed on it too; the one seen once cannot be
    assert _group(fleet, "misaligned_kernel").blame.kind == HARDWARE
    assert _group(fleet, "assert_kernel").blame.kind == TOO_FEW


def test_the_gpus_of_a_code_bug_are_not_blamed(fleet):
    others = [g for g in fleet.gpus if g.id != BAD_GPU]
    assert len(others) == 6
    assert {g.blame.kind for g in others} == {TOO_FEW}


def test_one_sm_faulting_across_signatures_points_at_the_gpu(tmp_path):
    # GIVEN widespread signatures, and one GPU whose SM 66 holds three faults of two of them
    dumps = [
        FleetDump(cubin, host=f"node-{n:02d}", pci_bus=0x18, sm=n)
        for cubin in ("oob_store", "shared_overflow") for n in range(1, 5)
    ] + [
        FleetDump("oob_store", host="node-09", pci_bus=0x9A, sm=66),
        FleetDump("shared_overflow", host="node-09", pci_bus=0x9A, sm=66),
        FleetDump("shared_overflow", host="node-09", pci_bus=0x9A, sm=66, time=1_763_000_100),
    ]  # fmt: skip
    # WHEN the fleet is scanned
    result = _scan(_write(tmp_path / "dumps", dumps))
    # THEN that GPU is blamed, by its SM
    gpu = next(g for g in result.gpus if g.id == "node-09/0000:9a:00.0")
    assert gpu.blame.kind == HARDWARE and gpu.blame.sm == 66
    assert "3 dumps on SM 66 in 2 different signatures" in gpu.blame.reason


def test_a_small_fleet_says_it_cannot_tell(tmp_path):
    # GIVEN four dumps: one GPU faulting in three signatures, one signature on three GPUs
    dumps = [
        FleetDump("oob_store", host="node-01", pci_bus=0x18),
        FleetDump("misaligned_load", host="node-01", pci_bus=0x18),
        FleetDump("oob_store", host="node-02", pci_bus=0x18),
        FleetDump("oob_store", host="node-03", pci_bus=0x18),
    ]
    # WHEN they are scanned
    result = _scan(_write(tmp_path / "dumps", dumps))
    # THEN nothing is claimed, and the index says why
    assert {g.blame.kind for g in result.groups if g.blame} == {TOO_FEW}
    assert {g.blame.kind for g in result.gpus} == {TOO_FEW}
    assert all(TOO_FEW_TEXT in g.blame.reason for g in result.gpus)
    assert TOO_FEW_TEXT in render("scan", build_index(result), "text")


def test_without_hosts_in_the_names_no_gpu_is_blamed(tmp_path):
    # GIVEN one PCI address faulting in three signatures, in dumps whose names give no host
    folder = tmp_path / "dumps"
    folder.mkdir()
    for number, cubin in enumerate(["misaligned_load"] * 3 + ["cutlass_like"] * 3):
        path = write_dump(folder, FleetDump(cubin, pci_bus=0x3A, pid=number))
        path.rename(folder / f"dump-{number}.nvcudmp")
    # WHEN they are scanned
    result = _scan(folder)
    # THEN the address may stand for several machines: unclear, never hardware
    (gpu,) = result.gpus
    assert gpu.id == "?/0000:3a:00.0"
    assert gpu.blame.kind == UNCLEAR and "give no host" in gpu.blame.reason


def test_every_index_format_shows_the_verdicts_and_the_json_lines_fit_the_schema(fleet):
    index = build_index(fleet)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    lines = [json.loads(line) for line in render("scan", index, "json").splitlines()]
    for line in lines:
        validator.validate(line)
    (summary,) = [line for line in lines if line["type"] == "scan"]
    bad = next(g for g in summary["gpus"] if g["id"] == BAD_GPU)
    assert bad["fleet_verdict"]["kind"] == HARDWARE
    assert bad["pci_address"] == "0000:3a:00.0"
    groups = [line for line in lines if line["type"] == "group"]
    assert {g["fleet_verdict"]["kind"] for g in groups} == {CODE, HARDWARE, TOO_FEW}
    dumps = [line for line in lines if line["type"] == "dump"]
    assert {d["gpu"] for d in dumps} >= {BAD_GPU}
    for fmt in ("text", "md", "html"):
        text = render("scan", index, fmt)
        assert BAD_GPU in text, fmt
        assert "points at the code" in text and "points at this GPU" in text, fmt
