"""The text layout of `postmortem info`, written out in Python.

The one layout not kept as a jinja template: `info` is the quick look, and importing jinja2
alone costs it about 20 ms of a start-up that must not lose to cuda-gdb's. Layout only, as
a template would hold: the numbers and groups come from `report/info.py`'s view model.
Every value passes through `_shown`, as the text templates' `finalize` does: control
characters escaped, a fact the dump does not hold shown as `?`.
"""

from __future__ import annotations

from typing import Any

from postmortem.demangle import demangle
from postmortem.report.textsafe import escape_controls
from postmortem.report.values import UNKNOWN, UNKNOWN_KERNEL, Json, dim3_text, hex_text, size_text


def render_info_text(summary: Json) -> str:
    """`info`'s view model (`build_info`) as the text `postmortem info` prints."""
    lines = [f"{_shown(summary['path'])}: CUDA coredump, {size_text(summary['file_size'])}"]
    if summary["codec"]:
        lines[0] += f" ({_shown(summary['codec'])}-compressed)"
    lines += _faults(summary)
    lines += [f"{_shown(f['severity'])}: {_shown(f['message'])}" for f in summary["findings"]]
    lines.append("")
    lines += _devices(summary)
    lines += _grids(summary["launches"])
    lines += _modules(summary["modules"])
    lines += _format(summary)
    return "\n".join(lines) + "\n"


def _faults(summary: Json) -> list[str]:
    f = summary["fault_summary"]
    if not f["lanes"] and not f["without_lane"]:
        return ["no exception recorded: every warp was live (a hang or a user-triggered dump)"]
    head = f"faults at {_plural(f['pcs'], 'PC')}"
    if f["codes"] > 1:
        head += f", {_plural(f['codes'], 'exception code')}"
    head += ": "
    if f["lanes"]:
        head += f"{_plural(f['lanes'], 'lane')} in {_plural(f['warps'], 'warp')}"
    if f["lanes"] and f["without_lane"]:
        head += "; "
    if f["without_lane"]:
        head += f"{_plural(f['without_lane'], 'warp or SM record')} with no faulting lane"
    lines = [head]
    for group in f["groups"]:
        lines += _fault_group(group["count"], group["first"])
    if f["groups_left_out"]:
        lines.append(f"  ... and {_shown(f['groups_left_out'])} more sites")
    return lines


def _fault_group(count: int, first: Json) -> list[str]:
    site = f"  {_shown(first['exception_name'])}"
    if first["exception"] is not None:
        site += f" ({_shown(first['exception'])})"
    site += " at "
    if first["error_pc"] is None:
        site += "pc unknown"
    else:
        site += f"pc {hex_text(first['error_pc'])}"
        location = first["location"]
        if location:
            site += f" = {_kernel(location['function'])}+{hex_text(location['offset'])}"
        else:
            site += " (outside every module in the dump)"
    who = f"    {_plural(count, first['source'])}; first: "
    block, thread = first["block_idx"], first["thread_idx"]
    if block:
        who += f"block {dim3_text(block)}, "
        if thread:
            who += f"thread {dim3_text(thread)}, "
    who += f"device {_shown(first['device_index'])}, "
    if thread and not block:
        who += f"thread {dim3_text(thread)}, "
    who += f"sm {_shown(first['sm_id'])}"
    for key, word in (("warp_id", "warp"), ("lane", "lane"), ("grid_id", "grid")):
        if first[key] is not None:
            who += f", {word} {_shown(first[key])}"
    lines = [site, who]
    if first["detail"]:
        lines.append(f"    driver says: {_shown(first['detail'])}")
    return lines


def _devices(summary: Json) -> list[str]:
    lines = [f"devices: {len(summary['devices'])}"]
    lines += [
        f"  {_shown(d['index'])}: {_shown(d['name'])} ({_shown(d['type'])}, "
        f"{_shown(d['sm_type'])}), {_shown(d['num_sms'])} SMs x "
        f"{_shown(d['num_warps_per_sm'])} warps x {_shown(d['num_lanes_per_warp'])} lanes, "
        f"pci {hex_text(d['pci_bus_id'], '02x', '')}:{hex_text(d['pci_dev_id'], '02x', '')}"
        for d in summary["devices"]
    ]
    c = summary["census"]
    lines.append(
        f"  captured: {_shown(c['sms'])} SMs, {_shown(c['ctas'])} CTAs, "
        f"{_shown(c['warps'])} warps, {_shown(c['lanes'])} lanes"
    )
    return lines


def _grids(launches: list[Json]) -> list[str]:
    lines = [f"grids: {len(launches)}"]
    for launch in launches:
        g = launch["grid"]
        grid_dim, block_dim = dim3_text(g["grid_dim"]), dim3_text(g["block_dim"])
        cluster = g["cluster_dim"]
        shown = f" cluster {dim3_text(cluster)}" if cluster and cluster != [0, 0, 0] else ""
        lines.append(
            f"  grid {_shown(g['grid_id'])} on device {_shown(g['device_index'])}: "
            f"{_kernel(launch['kernel'])}<<<{grid_dim},{block_dim}>>>{shown}, "
            f"{_shown(g['num_regs'])} registers"
        )
    return lines


def _modules(modules: list[Json]) -> list[str]:
    lines = [f"modules: {len(modules)}"]
    for m in modules:
        module, image = m["module"], m["module"]["relocated_image"]
        if module["module_handle"] is None:
            line = "  root-level image (no module row, so device, context and handle unknown; "
        else:
            line = (
                f"  {hex_text(module['module_handle'])} (context {hex_text(module['context_id'])}, "
            )
        size = size_text(image["size_bytes"]) if image else "no image"
        functions = ", ".join(_kernel(name) for name in m["functions"]) or "no functions"
        lines.append(f"{line}ELF ABI v{_shown(m['abi_version'])}, {size}): {functions}")
    return lines


def _format(summary: Json) -> list[str]:
    numbering = " (extended numbering)" if summary["extended_numbering"] else ""
    lines = [
        f"format: ELF ABI v{_shown(summary['abi_version'])}, {_shown(summary['section_count'])} "
        f"sections{numbering}, rows in the {_shown(summary['layout_generation'])} layout"
    ]
    meta = summary["metadata"]
    if meta:
        flags = "?" if meta["flags"] is None else ", ".join(meta["flag_names"]) or "none"
        lines.append(
            f"  written by {_shown(meta['generator_name'])}, driver "
            f"{_shown(meta['driver_version_text'])} (CUDA "
            f"{_shown(meta['cuda_driver_version_text'])}), flags: {_shown(flags)}, at "
            f"{_shown(meta['timestamp'])} (Unix time)"
        )
    sections = summary["optional_sections"].items()
    present = ", ".join(f"{_shown(name)} {_shown(n)}" for name, n in sections if n) or "none"
    absent = ", ".join(_shown(name) for name, n in sections if not n) or "none"
    lines += [f"  optional sections present: {present}", f"  absent: {absent}"]
    return lines


def _shown(value: object) -> str:
    return UNKNOWN if value is None else escape_controls(str(value))


def _plural(count: int, word: Any) -> str:
    return f"{_shown(count)} {_shown(word)}{'s' if count != 1 else ''}"


def _kernel(mangled: str | None) -> str:
    return escape_controls(demangle(mangled)) if mangled else UNKNOWN_KERNEL
