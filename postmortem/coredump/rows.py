"""Decoded table rows → model values. A field the row's stride lacks becomes None.

Any non-zero stride is read: other producers write rows shorter than the first release's
(an 8-byte grid row holding only the grid id), so every field may be absent, and an
absent field is None, never guessed or zero-filled.
"""

from __future__ import annotations

from collections.abc import Callable

from postmortem.model import (
    CTA,
    SM,
    Context,
    Device,
    Dim3,
    Grid,
    Lane,
    Metadata,
    RowRef,
    Warp,
)

Row = dict[str, int]
"""A decoded row: only the fields its stride holds, by name."""

StringLookup = Callable[[int, str], str | None]


def _get(row: Row, name: str) -> int | None:
    value = row.get(name)
    return None if value is None else int(value)


def _dim3(row: Row, prefix: str) -> Dim3 | None:
    x, y, z = (_get(row, f"{prefix}_{axis}") for axis in "xyz")
    if x is None or y is None or z is None:
        return None
    return (x, y, z)


def _string(row: Row, name: str, lookup: StringLookup, what: str) -> str | None:
    offset = _get(row, name)
    return None if offset is None else lookup(offset, what)


def _optional_string(row: Row, name: str, lookup: StringLookup) -> str | None:
    offset = _get(row, name)
    return None if offset is None or offset == 0 else lookup(offset, name)


def make_device(row: Row, ref: RowRef, lookup: StringLookup) -> Device:
    return Device(
        index=ref.row,
        dev_id=_get(row, "dev_id"),
        name=_string(row, "dev_name", lookup, "devName"),
        type=_string(row, "dev_type", lookup, "devType"),
        sm_type=_string(row, "sm_type", lookup, "smType"),
        pci_bus_id=_get(row, "pci_bus_id"),
        pci_dev_id=_get(row, "pci_dev_id"),
        num_sms=_get(row, "num_sms"),
        num_warps_per_sm=_get(row, "num_warps_per_sm"),
        num_lanes_per_warp=_get(row, "num_lanes_per_warp"),
        num_regs_per_lane=_get(row, "num_regs_per_lane"),
        num_predicates_per_lane=_get(row, "num_predicates_per_lane"),
        sm_major=_get(row, "sm_major"),
        sm_minor=_get(row, "sm_minor"),
        instruction_size=_get(row, "instruction_size"),
        status=_get(row, "status"),
        num_uniform_regs_per_warp=_get(row, "num_uniform_regs_per_warp"),
        num_uniform_predicates_per_warp=_get(row, "num_uniform_predicates_per_warp"),
        num_convergence_barriers_per_warp=_get(row, "num_convergence_barriers_per_warp"),
        ref=ref,
    )


def make_context(row: Row, ref: RowRef, device_index: int) -> Context:
    return Context(
        context_id=_get(row, "context_id"),
        shared_window_base=_get(row, "shared_window_base"),
        local_window_base=_get(row, "local_window_base"),
        global_window_base=_get(row, "global_window_base"),
        device_index=device_index,
        host_tid=_get(row, "host_tid"),
        ref=ref,
    )


def make_grid(row: Row, device_index: int, ref: RowRef) -> Grid:
    return Grid(
        grid_id=_get(row, "grid_id"),
        context_id=_get(row, "context_id"),
        device_index=device_index,
        function=_get(row, "function"),
        function_entry=_get(row, "function_entry"),
        module_handle=_get(row, "module_handle"),
        parent_grid_id=_get(row, "parent_grid_id"),
        params_offset=_get(row, "params_offset"),
        kernel_type=_get(row, "kernel_type"),
        origin=_get(row, "origin"),
        grid_status=_get(row, "grid_status"),
        num_regs=_get(row, "num_regs"),
        grid_dim=_dim3(row, "grid_dim"),
        block_dim=_dim3(row, "block_dim"),
        attr_launch_blocking=_get(row, "attr_launch_blocking"),
        attr_host_tid=_get(row, "attr_host_tid"),
        cluster_dim=_dim3(row, "cluster_dim"),
        preferred_cluster_dim=_dim3(row, "preferred_cluster_dim"),
        ref=ref,
    )


def make_sm(row: Row, device_index: int, ref: RowRef, lookup: StringLookup) -> SM:
    error_pc = _get(row, "error_pc") if _get(row, "error_pc_valid") else None
    target = _dim3(row, "cluster_target") if _get(row, "cluster_target_valid") else None
    return SM(
        sm_id=_get(row, "sm_id"),
        device_index=device_index,
        exception=_get(row, "exception"),
        error_pc=error_pc,
        cluster_target_block_idx=target,
        exception_string=_optional_string(row, "exception_string", lookup),
        ref=ref,
    )


def make_cta(row: Row, sm: SM, ref: RowRef) -> CTA:
    return CTA(
        grid_id=_get(row, "grid_id"),
        block_idx=_dim3(row, "block_idx"),
        device_index=sm.device_index,
        sm_id=sm.sm_id,
        cluster_idx=_dim3(row, "cluster_idx"),
        cluster_dim=_dim3(row, "cluster_dim"),
        ref=ref,
    )


def make_warp(row: Row, cta: CTA, ref: RowRef, lookup: StringLookup) -> Warp:
    broken = _get(row, "is_warp_broken")
    return Warp(
        warp_id=_get(row, "warp_id"),
        device_index=cta.device_index,
        sm_id=cta.sm_id,
        grid_id=cta.grid_id,
        block_idx=cta.block_idx,
        error_pc=_get(row, "error_pc") if _get(row, "error_pc_valid") else None,
        valid_lanes_mask=_get(row, "valid_lanes_mask"),
        active_lanes_mask=_get(row, "active_lanes_mask"),
        is_broken=None if broken is None else bool(broken),
        num_regs=_get(row, "num_regs"),
        shared_mem_size=_get(row, "shared_mem_size"),
        in_syscall_lanes_mask=_get(row, "in_syscall_lanes_mask"),
        cbu_active_lanes_mask=_get(row, "cbu_active_lanes_mask"),
        cbu_exited_lanes_mask=_get(row, "cbu_exited_lanes_mask"),
        cbu_collective_lanes_mask=_get(row, "cbu_collective_lanes_mask"),
        barrier_scope=_get(row, "barrier_scope"),
        additional_barrier_info=_optional_string(row, "additional_barrier_info", lookup),
        ref=ref,
    )


def make_lane(row: Row, warp: Warp, ref: RowRef) -> Lane:
    # A lane row's fields are the ints `rows` unpacked, read directly, and the Lane's are
    # passed in order (half the cost of naming 16 of them): a grid-wide fault makes a Lane
    # for each of 270,000 rows.
    get = row.get
    rpc_lo, rpc_hi = get("rpc_lo"), get("rpc_hi")
    x, y, z = get("thread_idx_x"), get("thread_idx_y"), get("thread_idx_z")
    return Lane(
        get("ln"), warp.device_index, warp.sm_id, warp.grid_id, warp.block_idx, warp.warp_id,
        None if x is None or y is None or z is None else (x, y, z),
        get("virtual_pc"), get("phys_pc"), get("exception"), get("call_depth"),
        get("syscall_call_depth"), get("cc_register"), get("cbu_thread_state"),
        None if rpc_lo is None or rpc_hi is None else (rpc_hi << 32) | rpc_lo,
        ref,
    )  # fmt: skip


def make_metadata(row: Row, lookup: StringLookup) -> Metadata:
    major, minor = _get(row, "driver_version_major"), _get(row, "driver_version_minor")
    cuda_major = _get(row, "cuda_driver_version_major")
    cuda_minor = _get(row, "cuda_driver_version_minor")
    return Metadata(
        generator_name=_string(row, "generator_name", lookup, "generatorName"),
        driver_version=None if major is None or minor is None else (major, minor),
        cuda_driver_version=(
            None if cuda_major is None or cuda_minor is None else (cuda_major, cuda_minor)
        ),
        flags=_get(row, "flags"),
        timestamp=_get(row, "timestamp"),
    )
