"""Decoded table rows → model values. A field the row's stride lacks becomes None."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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

Row = Any  # a numpy record (np.void) whose dtype holds only the fields present
StringLookup = Callable[[int, str], str]


def _get(row: Row, name: str) -> int | None:
    names = row.dtype.names
    return int(row[name]) if names is not None and name in names else None


def _int(row: Row, name: str) -> int:
    return int(row[name])


def _dim3(row: Row, prefix: str) -> Dim3 | None:
    x, y, z = (_get(row, f"{prefix}_{axis}") for axis in "xyz")
    if x is None or y is None or z is None:
        return None
    return (x, y, z)


def _need_dim3(row: Row, prefix: str) -> Dim3:
    return (_int(row, f"{prefix}_x"), _int(row, f"{prefix}_y"), _int(row, f"{prefix}_z"))


def _optional_string(row: Row, name: str, lookup: StringLookup) -> str | None:
    offset = _get(row, name)
    return None if offset is None or offset == 0 else lookup(offset, name)


def make_device(row: Row, ref: RowRef, lookup: StringLookup) -> Device:
    return Device(
        index=ref.row,
        dev_id=_int(row, "dev_id"),
        name=lookup(_int(row, "dev_name"), "devName"),
        type=lookup(_int(row, "dev_type"), "devType"),
        sm_type=lookup(_int(row, "sm_type"), "smType"),
        pci_bus_id=_int(row, "pci_bus_id"),
        pci_dev_id=_int(row, "pci_dev_id"),
        num_sms=_int(row, "num_sms"),
        num_warps_per_sm=_int(row, "num_warps_per_sm"),
        num_lanes_per_warp=_int(row, "num_lanes_per_warp"),
        num_regs_per_lane=_int(row, "num_regs_per_lane"),
        num_predicates_per_lane=_int(row, "num_predicates_per_lane"),
        sm_major=_int(row, "sm_major"),
        sm_minor=_int(row, "sm_minor"),
        instruction_size=_int(row, "instruction_size"),
        status=_int(row, "status"),
        num_uniform_regs_per_warp=_get(row, "num_uniform_regs_per_warp"),
        num_uniform_predicates_per_warp=_get(row, "num_uniform_predicates_per_warp"),
        num_convergence_barriers_per_warp=_get(row, "num_convergence_barriers_per_warp"),
        ref=ref,
    )


def make_context(row: Row, ref: RowRef) -> Context:
    return Context(
        context_id=_int(row, "context_id"),
        shared_window_base=_int(row, "shared_window_base"),
        local_window_base=_int(row, "local_window_base"),
        global_window_base=_int(row, "global_window_base"),
        device_index=_int(row, "device_index"),
        host_tid=_int(row, "host_tid"),
        ref=ref,
    )


def make_grid(row: Row, device_index: int, ref: RowRef) -> Grid:
    return Grid(
        grid_id=_int(row, "grid_id"),
        context_id=_int(row, "context_id"),
        device_index=device_index,
        function=_int(row, "function"),
        function_entry=_int(row, "function_entry"),
        module_handle=_int(row, "module_handle"),
        parent_grid_id=_int(row, "parent_grid_id"),
        params_offset=_int(row, "params_offset"),
        kernel_type=_int(row, "kernel_type"),
        origin=_int(row, "origin"),
        grid_status=_int(row, "grid_status"),
        num_regs=_int(row, "num_regs"),
        grid_dim=_need_dim3(row, "grid_dim"),
        block_dim=_need_dim3(row, "block_dim"),
        attr_launch_blocking=_int(row, "attr_launch_blocking"),
        attr_host_tid=_int(row, "attr_host_tid"),
        cluster_dim=_dim3(row, "cluster_dim"),
        preferred_cluster_dim=_dim3(row, "preferred_cluster_dim"),
        ref=ref,
    )


def make_sm(row: Row, device_index: int, ref: RowRef, lookup: StringLookup) -> SM:
    error_pc = _get(row, "error_pc") if _get(row, "error_pc_valid") else None
    target = _dim3(row, "cluster_target") if _get(row, "cluster_target_valid") else None
    return SM(
        sm_id=_int(row, "sm_id"),
        device_index=device_index,
        exception=_get(row, "exception"),
        error_pc=error_pc,
        cluster_target_block_idx=target,
        exception_string=_optional_string(row, "exception_string", lookup),
        ref=ref,
    )


def make_cta(row: Row, sm: SM, ref: RowRef) -> CTA:
    return CTA(
        grid_id=_int(row, "grid_id"),
        block_idx=_need_dim3(row, "block_idx"),
        device_index=sm.device_index,
        sm_id=sm.sm_id,
        cluster_idx=_dim3(row, "cluster_idx"),
        cluster_dim=_dim3(row, "cluster_dim"),
        ref=ref,
    )


def make_warp(row: Row, cta: CTA, ref: RowRef, lookup: StringLookup) -> Warp:
    return Warp(
        warp_id=_int(row, "warp_id"),
        device_index=cta.device_index,
        sm_id=cta.sm_id,
        grid_id=cta.grid_id,
        block_idx=cta.block_idx,
        error_pc=_int(row, "error_pc") if _int(row, "error_pc_valid") else None,
        valid_lanes_mask=_int(row, "valid_lanes_mask"),
        active_lanes_mask=_int(row, "active_lanes_mask"),
        is_broken=bool(_int(row, "is_warp_broken")),
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
    rpc_lo, rpc_hi = _get(row, "rpc_lo"), _get(row, "rpc_hi")
    return Lane(
        lane=_int(row, "ln"),
        device_index=warp.device_index,
        sm_id=warp.sm_id,
        grid_id=warp.grid_id,
        block_idx=warp.block_idx,
        warp_id=warp.warp_id,
        thread_idx=_need_dim3(row, "thread_idx"),
        virtual_pc=_int(row, "virtual_pc"),
        function_offset=_int(row, "phys_pc"),
        exception=_int(row, "exception"),
        call_depth=_int(row, "call_depth"),
        syscall_call_depth=_int(row, "syscall_call_depth"),
        cc_register=_int(row, "cc_register"),
        cbu_thread_state=_get(row, "cbu_thread_state"),
        return_pc=None if rpc_lo is None or rpc_hi is None else (rpc_hi << 32) | rpc_lo,
        ref=ref,
    )


def make_metadata(row: Row, lookup: StringLookup) -> Metadata:
    return Metadata(
        generator_name=lookup(_int(row, "generator_name"), "generatorName"),
        driver_version=(_int(row, "driver_version_major"), _int(row, "driver_version_minor")),
        cuda_driver_version=(
            _int(row, "cuda_driver_version_major"),
            _int(row, "cuda_driver_version_minor"),
        ),
        flags=_int(row, "flags"),
        timestamp=_int(row, "timestamp"),
    )
