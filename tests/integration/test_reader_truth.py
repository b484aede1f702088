"""The native reader reads back exactly what the fixture builder planted, in every dump.

The builder encodes the format independently of postmortem (fixtures/builder/layouts.py),
so agreement here means both follow coredump-format.md, not that one copies the other.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from postmortem import find_faults, open_coredump
from postmortem.model import FaultSource
from tests.conftest import DUMPS, dump_paths, truth_of

OPTIONAL = {  # the builder's names → section types the reader counts
    "bt": "backtrace",
    "cbanks": "constbank table",
    "cbu_bar": "convergence barriers",
    "elfimg": "non-relocated image",
    "global": "global memory",
    "local": "local memory",
    "meta": "metadata",
    "params": "parameter memory",
    "shared": "shared memory",
    "uregs": "uniform registers",
    "upred": "uniform predicates",
}


def _counts(core) -> dict[str, int]:
    counts = dict.fromkeys(("sms", "ctas", "warps", "lanes", "grids"), 0)
    for device in core.devices:
        counts["grids"] += len(core.grids(device))
        for sm in core.sms(device):
            counts["sms"] += 1
            for cta in core.ctas(sm):
                counts["ctas"] += 1
                for warp in core.warps(cta):
                    counts["warps"] += 1
                    counts["lanes"] += len(core.lanes(warp))
    contexts = core.contexts()
    counts["contexts"] = len(contexts)
    counts["modules"] = sum(len(core.modules(c)) for c in contexts)
    counts["devices"] = len(core.devices)
    counts["sections"] = core.identity.section_count
    return counts


@pytest.mark.parametrize("path", dump_paths(), ids=lambda p: p.name)
def test_identity_layout_and_counts(path: Path):
    truth = truth_of(path)
    with open_coredump(path) as core:
        assert core.compressed == truth["compressed"]
        assert core.identity.extended_numbering == truth["extended_numbering"]
        assert core.layout_generation == truth["layout"]
        assert _counts(core) == truth["counts"]
        assert [(d.index, d.name, d.pci_bus_id) for d in core.devices] == [
            (d["device"], d["name"], d["pci_bus"]) for d in truth["devices"]
        ]
        present = {name for name, n in core.section_counts().items() if n}
        assert {OPTIONAL[o] for o in truth["optional_sections"]} == present & set(OPTIONAL.values())


@pytest.mark.parametrize("path", dump_paths(), ids=lambda p: p.name)
def test_lane_faults_are_the_planted_lanes(path: Path):
    truth = truth_of(path)
    with open_coredump(path) as core:
        faults = [f for f in find_faults(core) if f.source is FaultSource.LANE]
    found = {
        (f.device_index, f.sm_id, f.block_idx, f.warp_id, f.lane, f.thread_idx, f.exception,
         f.function_offset, f.grid_id)
        for f in faults
    }  # fmt: skip
    planted = {
        (lane["device"], lane["sm"], tuple(lane["block_idx"]), lane["warp"], lane["lane"],
         tuple(lane["thread_idx"]), lane["exception"], lane["phys_pc"], lane["grid_id"])
        for lane in truth["faulting_lanes"]
    }  # fmt: skip
    assert found == planted


@pytest.mark.parametrize("path", dump_paths(), ids=lambda p: p.name)
def test_each_fault_maps_to_the_planted_kernel_and_offset(path: Path):
    truth = truth_of(path)
    with open_coredump(path) as core:
        faults = find_faults(core)
    if truth["fault"] is None:
        assert faults == ()
        return
    planted = truth["fault"]
    assert faults, "a planted fault was not found"
    # Each device loads the module at its own address: PCs are compared per device.
    pcs = {(f["device"], f["virtual_pc"]) for f in truth["faulting_lanes"]}
    for fault in faults:
        if fault.device_index == planted["device"]:
            assert fault.error_pc == planted["error_pc"]
            assert fault.location is not None
            assert fault.location.module_handle == planted["module_handle"]
        assert (fault.device_index, fault.error_pc) in pcs or not pcs
        assert fault.exception == planted["exception"]
        assert fault.location is not None
        assert fault.location.function == planted["kernel"]
        assert fault.location.offset == planted["offset"]
        if fault.function_offset is not None:
            assert fault.function_offset == fault.location.offset


@pytest.mark.parametrize("path", dump_paths(), ids=lambda p: p.name)
def test_sm_only_faults_are_found_from_the_sm_row(path: Path):
    truth = truth_of(path)
    with open_coredump(path) as core:
        sm_faults = [f for f in find_faults(core) if f.source is FaultSource.SM]
    planted = truth["sm_exceptions"]
    assert [(f.device_index, f.sm_id, f.exception, f.error_pc, f.detail) for f in sm_faults] == [
        (s["device"], s["sm"], s["exception"], s["error_pc"], s.get("exception_string"))
        for s in planted
        if s.get("warp_exited")
    ]


@pytest.mark.parametrize("path", dump_paths(), ids=lambda p: p.name)
def test_grids_and_their_kernels(path: Path):
    truth = truth_of(path)
    from postmortem.summary import summarize

    with open_coredump(path) as core:
        launches = summarize(core).launches
    assert sorted(
        (x.grid.grid_id, x.kernel, x.grid.grid_dim, x.grid.block_dim, x.grid.num_regs)
        for x in launches
    ) == sorted(
        (g["grid_id"], g["kernel"], tuple(g["grid_dim"]), tuple(g["block_dim"]), g["num_regs"])
        for g in truth["grids"]
    )


@pytest.mark.parametrize("path", dump_paths(), ids=lambda p: p.name)
def test_params_and_memory_segments(path: Path):
    truth = truth_of(path)
    with open_coredump(path) as core:
        segments = [(s.address, s.size_bytes) for s in core.memory_segments()]
        params = {
            grid.grid_id: core.params(grid)
            for device in core.devices
            for grid in core.grids(device)
        }
    assert segments == [(m["addr"], m["size"]) for m in truth["memory"]]
    for grid in truth["grids"]:
        captured = "params" in truth["optional_sections"]
        expected = bytes.fromhex(grid["params"]) if captured else None
        assert params[grid["grid_id"]] == expected


def test_newer_layouts_read_the_same_as_their_r400_twins():
    twins = [p for p in dump_paths() if ".twin_r400." in p.name]
    assert twins
    for twin in twins:
        newer = twin.with_name(twin.name.replace(".twin_r400", ""))
        with open_coredump(newer) as a, open_coredump(twin) as b:
            lanes_a = [(x.lane, x.thread_idx, x.virtual_pc, x.exception) for d in a.devices
                       for w in a.iter_warps(d) for x in a.lanes(w)]  # fmt: skip
            lanes_b = [(x.lane, x.thread_idx, x.virtual_pc, x.exception) for d in b.devices
                       for w in b.iter_warps(d) for x in b.lanes(w)]  # fmt: skip
            assert lanes_a == lanes_b
            regs_a = [
                a.registers(x) for d in a.devices for w in a.iter_warps(d) for x in a.lanes(w)
            ]
            regs_b = [
                b.registers(x) for d in b.devices for w in b.iter_warps(d) for x in b.lanes(w)
            ]
            assert regs_a == regs_b


def test_gzip_dump_is_read_from_a_private_copy_that_is_removed(tmp_path, monkeypatch):
    # GIVEN a gzip-compressed dump and a private temporary directory
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    path = next(p for p in dump_paths() if p.name.endswith(".gz"))
    # WHEN it is opened THEN it reads as the uncompressed dump does, from a 0700 directory
    with open_coredump(path) as core:
        assert core.compressed
        assert find_faults(core)
        copies = list(tmp_path.iterdir())
        assert len(copies) == 1 and (copies[0].stat().st_mode & 0o777) == 0o700
    # AND nothing is left behind once it is closed
    assert list(tmp_path.iterdir()) == []


def test_each_fault_names_a_grid_the_dump_holds():
    for path in dump_paths():
        with open_coredump(path) as core:
            for fault in find_faults(core):
                if fault.grid_id is not None:
                    grid = core.find_grid(fault.device_index, fault.grid_id)
                    assert grid is not None
                    assert fault.location is not None
                    assert fault.location.function is not None


def test_a_warps_shared_memory_is_its_own_ctas():
    with open_coredump(DUMPS / "oob_store_memory.nvcudmp") as core:
        pairs = [
            (core.shared_memory(cta), core.shared_memory(warp))
            for device in core.devices
            for sm in core.sms(device)
            for cta in core.ctas(sm)
            for warp in core.warps(cta)
        ]
    assert pairs and all(own is not None and own == via for own, via in pairs)
