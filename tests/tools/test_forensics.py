"""Forensics against what the builder planted: every faulting lane's address, the argument it
came from, the misalignment, the shared-memory overflow, and what each build recorded.

The expected addresses come from the fixtures' `address` specs (how each kernel's source
computes the address, fixtures/builder/build_cubins.py), which the builder writes into the
faulting lanes' registers; nothing here is taken from the tool's own output. Every test
that reads a dump runs on both corpora (`corpus`: relocated images with only code
addressed, and with every SHF_ALLOC section addressed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from postmortem import open_coredump
from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.census import fault_census
from postmortem.analysis.fault.fault import FaultSite, LocalizeOptions, localize
from postmortem.analysis.forensics.address import LaneAddress, address_spread
from postmortem.analysis.forensics.arguments import read_arguments
from postmortem.analysis.forensics.region import check_addresses
from postmortem.analysis.state import kernel_code
from postmortem.codemap import CodeMap, find_faults
from postmortem.cubin.operands import decode_access
from postmortem.cubin.sass import parse_sass
from tests.conftest import dump_paths, truth_of
from tests.tooling import require_tool


def _addressed(path: Path) -> bool:
    truth = truth_of(path)
    return bool(truth["faulting_lanes"]) and truth["fault"]["address"] is not None


ADDRESSED = [p for p in dump_paths() if truth_of(p)["fault"] and _addressed(p)]


@pytest.fixture(scope="module")
def nvdisasm():
    return require_tool("nvdisasm")


def _site(path: Path, corpus: Path, nvdisasm) -> FaultSite:
    """The site on the device of the truth's fault (a dump may fault on several devices), in
    the dump of that name under `corpus` (either relocation convention)."""
    device = truth_of(path)["fault"]["device"]
    with open_coredump(corpus / path.name) as core:
        sites = localize(core, LocalizeOptions(nvdisasm=nvdisasm))
    site = next(s for s in sites if s.faults[0].device_index == device)
    assert site.forensics is not None
    return site


def _check(site: FaultSite, name: str):
    assert site.forensics is not None
    return next(c for c in site.forensics.checks if c.check == name)


def test_every_addressed_fixture_is_covered():
    names = {p.name.split(".")[0] for p in ADDRESSED}
    assert {"oob_store", "misaligned_load", "shared_overflow", "two_modules"} <= names


@pytest.mark.parametrize("path", ADDRESSED, ids=lambda p: p.name)
def test_each_lane_address_equals_the_planted_one(path: Path, corpus: Path, nvdisasm):
    # GIVEN the lanes the builder planted, keyed by their coordinates
    truth = truth_of(path)
    planted = {
        (f["device"], f["sm"], f["warp"], f["lane"]): f["effective_address"]
        for f in truth["faulting_lanes"]
        if f["device"] == truth["fault"]["device"]
    }
    # WHEN the faulting instruction's address is computed from each lane's registers
    forensics = _site(path, corpus, nvdisasm).forensics
    assert forensics is not None and forensics.lane_set == "faulting lanes"
    computed = {(a.device_index, a.sm_id, a.warp_id, a.lane): a.address for a in forensics.lanes}
    # THEN every lane gets exactly the planted address
    assert computed == planted


@pytest.mark.parametrize("path", ADDRESSED, ids=lambda p: p.name)
def test_the_spread_follows_the_source_stride(path: Path, corpus: Path, nvdisasm):
    truth = truth_of(path)
    device = truth["fault"]["device"]
    addresses = [f["effective_address"] for f in truth["faulting_lanes"] if f["device"] == device]
    spread = _site(path, corpus, nvdisasm).forensics.spread
    assert spread is not None
    assert (spread.minimum, spread.maximum) == (min(addresses), max(addresses))
    assert spread.stride_bytes == truth["fault"]["address"]["stride"]
    assert spread.irregular_lanes == ()


def _global_with_params(path: Path) -> bool:
    truth = truth_of(path)
    return truth["fault"]["address"]["space"] == "global" and "params" in truth["optional_sections"]


@pytest.mark.parametrize(
    "path", [p for p in ADDRESSED if _global_with_params(p)], ids=lambda p: p.name
)
def test_the_address_is_attributed_to_the_argument_it_came_from(path: Path, corpus: Path, nvdisasm):
    # GIVEN the argument the kernel's source indexes, read from the truth's parameter bytes
    truth = truth_of(path)
    spec = truth["fault"]["address"]
    grid = next(g for g in truth["grids"] if g["grid_id"] == truth["fault"]["grid_id"])
    params = bytes.fromhex(grid["params"])
    pointer = int.from_bytes(params[8 * spec["arg"] : 8 * spec["arg"] + 8], "little")
    first = truth["faulting_lanes"][0]["effective_address"]
    # WHEN the arguments are decoded
    arguments = _site(path, corpus, nvdisasm).forensics.arguments
    assert arguments is not None and arguments.layout == ".nv.info"
    assert [a.ordinal for a in arguments.arguments] == list(range(len(arguments.arguments)))
    planted = arguments.arguments[spec["arg"]]
    if planted.kind == "aggregate":
        # THEN a struct passed by value (cutlass_like's Params) is never the culprit, but the
        # word of it nearest below the address is said, with the planted distance
        assert arguments.culprit is None
        assert f"holds 0x{pointer:x}, 0x{first - pointer:x} below the address" in (
            arguments.reasoning or ""
        )
        return
    # THEN the culprit is that argument, at the planted distance
    assert arguments.culprit is not None
    assert arguments.culprit.ordinal == spec["arg"]
    assert arguments.culprit.value == pointer
    assert arguments.culprit.distance == first - pointer


def test_arguments_come_from_constant_bank_zero_without_a_param_section(corpus: Path, nvdisasm):
    arguments = _site(corpus / "oob_store_cbank.nvcudmp", corpus, nvdisasm).forensics.arguments
    assert arguments is not None and arguments.source == "constant bank 0"


def test_a_dump_without_parameter_memory_says_so(corpus: Path, nvdisasm):
    forensics = _site(corpus / "oob_store_bare.nvcudmp", corpus, nvdisasm).forensics
    assert forensics.arguments is None
    assert any("no parameter memory" in note.message for note in forensics.notes)


def test_misaligned_load_is_misaligned_by_four_bytes(corpus: Path, nvdisasm):
    site = _site(corpus / "misaligned_load.nvcudmp", corpus, nvdisasm)
    assert site.forensics.access.width_bytes == 16
    check = _check(site, "alignment")
    assert check.verdict is False and check.excess_bytes == 4
    assert "misaligned by 4 bytes for a 16-byte access" in check.message


def test_shared_overflow_reports_how_far_past_the_window(corpus: Path, nvdisasm):
    # GIVEN the shared-memory size the builder gave the warp row, and the planted offsets
    truth = truth_of(corpus / "shared_overflow.nvcudmp")
    size = truth["faulting_lanes"][0]["shared_mem_size"]
    worst = max(f["effective_address"] for f in truth["faulting_lanes"])
    # WHEN the faulting STS is examined
    check = _check(_site(corpus / "shared_overflow.nvcudmp", corpus, nvdisasm), "shared-size")
    # THEN the overflow is the end of the widest access minus the window
    assert check.verdict is False
    assert check.excess_bytes == worst + 4 - size == 16
    assert f"{size:,}-byte window" in check.message


def test_shared_check_is_impossible_without_shared_mem_size(corpus: Path, nvdisasm):
    check = _check(
        _site(corpus / "shared_overflow.twin_r400.nvcudmp", corpus, nvdisasm), "shared-size"
    )
    assert check.verdict is None and "sharedMemSize" in check.message


def test_lightweight_dump_cannot_judge_a_global_address(corpus: Path, nvdisasm):
    check = _check(_site(corpus / "oob_store.nvcudmp", corpus, nvdisasm), "global-segment")
    assert check.verdict is None
    assert "says nothing about the address being bad" in check.message


def test_captured_memory_shows_the_address_is_outside_it(corpus: Path, nvdisasm):
    check = _check(_site(corpus / "oob_store_memory.nvcudmp", corpus, nvdisasm), "global-segment")
    assert check.verdict is False and "5 of 5 addresses" in check.message


def test_sm_level_fault_has_no_registers_and_says_so(corpus: Path, nvdisasm):
    forensics = _site(corpus / "sm_fault.nvcudmp", corpus, nvdisasm).forensics
    assert forensics.lanes == ()
    assert any("faulting warp is not in the dump" in note.message for note in forensics.notes)


@pytest.mark.parametrize(
    "name,code,words",
    [
        ("oob_store_stripped", "line-info-removed", "-lineinfo  -arch sm_90 -m 64"),
        ("oob_store_nolineinfo_v8", "no-line-info", "compiled without -lineinfo"),
        ("oob_store_nolineinfo", "no-line-info", "cannot be told"),
    ],
)
def test_build_provenance_tells_how_line_info_went_missing(
    name, code, words, corpus: Path, nvdisasm
):
    site = _site(corpus / f"{name}.nvcudmp", corpus, nvdisasm)
    messages = {d.code.value: d.message for d in site.diagnoses}
    assert words in messages[code]


def test_analysis_reports_each_faulting_modules_build(corpus: Path):
    analysis = analyze_dump(
        corpus / "oob_store_stripped.nvcudmp",
        AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False),
    )
    (build,) = analysis.builds
    assert build.kernels == ("_Z10oob_kernelPfif",)
    assert build.toolkit is not None and build.toolkit.tool_name == "ptxas"
    assert build.line_info == "line info removed after compilation (compiled with -lineinfo)"


def test_census_counts_lanes_warps_ctas_and_coordinates(corpus: Path, nvdisasm):
    # GIVEN the faulting lanes the builder planted
    path = corpus / "oob_store.nvcudmp"
    lanes = truth_of(path)["faulting_lanes"]
    # WHEN the fault sites are counted
    (row,) = fault_census([_site(path, corpus, nvdisasm)])
    # THEN the row holds every lane, in one warp of one block on one SM
    c = row.counts
    assert (c.lanes, c.warps, c.ctas, c.sms, c.devices) == (len(lanes), 1, 1, 1, 1)
    threads = [f["thread_idx"][0] for f in lanes]
    assert row.threads is not None
    assert (row.threads.low[0], row.threads.high[0]) == (min(threads), max(threads))
    assert row.sms_seen == ((lanes[0]["device"], lanes[0]["sm"]),)


def test_census_merges_one_instruction_faulting_on_two_devices(corpus: Path, nvdisasm):
    # GIVEN a two-GPU dump where both devices fault at the same kernel offset
    path = corpus / "two_devices_fault.nvcudmp"
    lanes = truth_of(path)["faulting_lanes"]
    with open_coredump(path) as core:
        sites = localize(core, LocalizeOptions(nvdisasm=nvdisasm))
    # WHEN the sites are counted
    rows = fault_census(sites)
    # THEN the two sites (one per device) make one row over both devices
    assert len(sites) == 2
    (row,) = rows
    assert (row.counts.lanes, row.counts.devices) == (len(lanes), 2)
    assert row.sms_seen == tuple(sorted({(f["device"], f["sm"]) for f in lanes}))
    blocks = [f["block_idx"] for f in lanes]
    assert row.blocks is not None
    assert row.blocks.low == tuple(min(b[i] for b in blocks) for i in range(3))
    assert row.blocks.high == tuple(max(b[i] for b in blocks) for i in range(3))


@pytest.mark.parametrize(
    "window,offset,check,verdict",
    [("shared", 0x10, "shared-size", None), ("local", 0x20, "local-size", None)],
)
def test_a_generic_address_in_a_window_is_checked_as_that_space(
    window, offset, check, verdict, corpus: Path
):
    # GIVEN a generic store whose address lies in the context's shared or local window
    (instruction,) = parse_sass(
        "        /*0000*/                   ST.E [R2.64], R5 ;\n"
    ).instructions
    access = decode_access(instruction)
    assert access is not None and access.space == "generic"
    with open_coredump(corpus / "oob_store.nvcudmp") as core:
        (context,) = core.contexts()
        base = {"shared": context.shared_window_base, "local": context.local_window_base}
        faults = find_faults(core)
        # WHEN it is checked
        checks = check_addresses(core, access, faults, [base[window] + offset])
    # THEN it is judged as a shared or local offset (this dump has neither size), not global
    assert [(c.check, c.verdict) for c in checks] == [(check, verdict)]


def test_an_address_just_below_a_pointer_is_attributed_to_it(corpus: Path):
    # GIVEN consumer(buffer, out, n): `out[-1]` lies 4 bytes below arg1 and far above arg0
    path = corpus / "two_modules.nvcudmp"
    grid_id = truth_of(path)["fault"]["grid_id"]
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        grid = core.find_grid(0, grid_id)
        location, function = kernel_code(core, code_map, 0, grid_id)
        cubin = code_map.image_bytes(location.module)
        out = int.from_bytes(core.params(grid)[8:16], "little")
        # WHEN the arguments are read against that address
        arguments, _ = read_arguments(core, grid, cubin, function.name, out - 4)
    # THEN it is arg1 - 0x4
    assert arguments is not None and arguments.culprit is not None
    assert (arguments.culprit.ordinal, arguments.culprit.distance) == (1, -4)


def test_a_repeated_lane_id_does_not_break_the_spread():
    lanes = [
        LaneAddress(0, 3, 2, lane, (5, 0, 0), (64 + lane, 0, 0), 0x1000 + 4 * lane, (), ())
        for lane in (3, 3, 4, 5)
    ]
    spread = address_spread(lanes)
    assert spread is not None and spread.stride_bytes == 4
