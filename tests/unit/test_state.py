"""GPU state: each warp's lane PCs, their histogram per grid, and which kernel a grid runs."""

from __future__ import annotations

from postmortem import open_coredump
from postmortem.analysis.state import PcGroup, WarpPcs, gpu_state, kernel_of, pc_groups, warp_pcs
from postmortem.codemap import CodeMap
from tests.tinydump import (
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    write_tiny_dump,
)

CONSUMER, PRODUCER = "_Z8consumerPKfPfi", "_Z8producerPfi"


def _lanes(offset, lanes, exception=0):
    return [LaneSpec(offset, exception, lane=n) for n in lanes]


def _two_grids(tmp_path):
    """Grid 1 runs two_kernels' consumer: one converged warp, one diverged warp with two
    faulting lanes; grid 2 runs its producer, in a second block."""
    module = ModuleSpec("two_kernels")
    grids = [GridSpec(1, module, CONSUMER), GridSpec(2, module, PRODUCER)]
    converged = WarpSpec(_lanes(0x80, range(32)), warp_id=0)
    diverged = WarpSpec(
        _lanes(0x90, range(24)) + _lanes(0x110, range(24, 26), exception=14), warp_id=1
    )
    producer = WarpSpec(_lanes(0x40, range(8)), warp_id=0)
    blocks = [
        BlockSpec(1, [converged, diverged], (0, 0, 0), sm=2),
        BlockSpec(2, [producer], (1, 0, 0), sm=5),
    ]
    return write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([DeviceSpec([module], grids, blocks)]))


def test_warp_pcs_counts_lanes_per_pc_most_populous_first(tmp_path):
    with open_coredump(_two_grids(tmp_path)) as core:
        warps = warp_pcs(core)
    assert [(w.grid_id, w.sm_id, w.warp_id, w.block_idx) for w in warps] == [
        (1, 2, 0, (0, 0, 0)),
        (1, 2, 1, (0, 0, 0)),
        (2, 5, 0, (1, 0, 0)),
    ]
    converged, diverged, _ = warps
    assert converged.lanes_at == ((0x80, 32),) and not converged.diverged
    assert diverged.lanes_at == ((0x90, 24), (0x110, 2)) and diverged.diverged
    assert diverged.faulting_at == ((0x110, 2),)


def test_a_lane_row_outside_the_valid_mask_is_no_thread(tmp_path):
    # GIVEN a warp with four lane rows whose valid mask holds only lanes 0 and 1
    module = ModuleSpec("oob_store")
    warp = WarpSpec(_lanes(0x10, (0, 1)) + _lanes(0x20, (2, 3)), valid_lanes=0b11)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [warp])])
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:
        (only,) = warp_pcs(core)
    # THEN only the two valid lanes are counted
    assert only.lanes_at == ((0x10, 2),)


def test_gpu_state_gives_each_grid_its_kernel_histogram_and_divergence(tmp_path):
    with open_coredump(_two_grids(tmp_path)) as core:
        state = gpu_state(core)
    consumer, producer = state
    assert (consumer.grid_id, consumer.kernel, consumer.warps, consumer.lanes) == (
        1, CONSUMER, 2, 58,
    )  # fmt: skip
    assert consumer.divergent_warps == 1
    assert consumer.pcs == (
        PcGroup(0x80, 1, 32, 0, 1),
        PcGroup(0x90, 1, 24, 0, 1),
        PcGroup(0x110, 1, 2, 2, 1),
    )
    assert (producer.grid_id, producer.kernel, producer.lanes, producer.divergent_warps) == (
        2, PRODUCER, 8, 0,
    )  # fmt: skip


def test_pc_groups_count_warps_and_blocks_per_pc():
    def warp(block, warp_id, lanes_at, faulting_at=()):
        return WarpPcs(0, 1, block, 0, warp_id, lanes_at, faulting_at)

    warps = [
        warp((0, 0, 0), 0, ((0x100, 30), (0x40, 2)), ((0x40, 2),)),
        warp((0, 0, 0), 1, ((0x100, 32),)),
        warp((1, 0, 0), 0, ((0x100, 16),)),
    ]
    assert pc_groups(warps) == (PcGroup(0x100, 3, 78, 0, 2), PcGroup(0x40, 1, 2, 2, 1))


def test_kernel_of_names_the_grid_kernel_and_none_for_an_unknown_grid(tmp_path):
    with open_coredump(_two_grids(tmp_path)) as core:
        code_map = CodeMap(core)
        assert kernel_of(core, code_map, 0, 2) == PRODUCER
        assert kernel_of(core, code_map, 0, 1) == CONSUMER
        assert kernel_of(core, code_map, 0, 99) is None
        assert kernel_of(core, code_map, 0, None) is None
