"""Tiny CUDA GPU coredumps, built inside a unit test from the committed fixture builder.

As drgn builds the ELF files its tests read, a test describes lanes, warps, blocks, grids
and modules as data; `write_tiny_dump` writes them with `fixtures/builder`::

    module = ModuleSpec("oob_store")
    lane = LaneSpec(cubin("oob_store").fault["offset"], exception=14)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec([lane])])])
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))) as core:

A PC is an offset in its grid's kernel's code section (`kernel_text` gives the section's
address). Whatever a test does not name takes a plain default.
"""

from __future__ import annotations

import functools
import struct
import sys
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

from elftools.elf.elffile import ELFFile

from tests.conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "builder"))
import gpustate as G  # noqa: E402
from cubin_index import Cubin, CubinIndex  # noqa: E402
from dumpwriter import DumpWriter  # noqa: E402
from relocate import RelocatedImage, relocate_cubin  # noqa: E402

Dim3 = tuple[int, int, int]

BASE, STRIDE = 0x7F3C_2A00_0000, 0x20_0000
"""Load address of a device's first module; each next module is `STRIDE` further."""
HANDLE = 0x5612_3A40_0000
"""Handle of a device's first module; each next module's is 0x1000 more."""
CONTEXT_ID = 0x5612_39F0_0000
WARP_ILLEGAL_ADDRESS = 14
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SHDR_FIELDS = ("sh_name", "sh_type", "sh_flags", "sh_addr", "sh_offset", "sh_size",
                "sh_link", "sh_info", "sh_addralign", "sh_entsize")  # fmt: skip
_INDEX = CubinIndex(FIXTURES / "cubins" / "index.json")


def cubin(name: str, abi: str = "v7") -> Cubin:
    """A committed fixture cubin (`fixtures/cubins/<name>.sm_90.<abi>.cubin`) and what
    index.json says of it: `.kernels`, the planted `.fault["offset"]`, `.stalls`."""
    return _INDEX.get(name, abi)


@dataclass
class LaneSpec:
    """One thread: where it is, its exception, what its registers hold."""

    offset: int  # PC offset in the code section of its grid's kernel (the row's physPC)
    exception: int = 0
    lane: int | None = None  # lane id (ln); None: its position in the warp's list
    registers: dict[int, int] = field(default_factory=dict)  # R number → value; others 0


@dataclass
class WarpSpec:
    lanes: list[LaneSpec]
    warp_id: int = 0
    error_offset: int | None = None  # a valid error PC in the warp row, at this offset
    broken: bool = False  # isWarpBroken: stopped at a trap
    valid_lanes: int | None = None  # None: the bit of every lane given
    active_lanes: int | None = None  # None: the valid-lanes mask
    shared_mem_size: int | None = None  # sharedMemSize (layouts r570 and later)
    uniform_registers: dict[int, int] | None = None  # UR number → value; None: no section


@dataclass
class BlockSpec:
    """A CTA of grid `grid`, resident on SM `sm`."""

    grid: int
    warps: list[WarpSpec]
    block_idx: Dim3 = (0, 0, 0)
    sm: int = 0


@dataclass(eq=False)  # told apart by identity: two specs of one cubin are two modules
class ModuleSpec:
    """A fixture cubin, relocated and loaded in a context of one device."""

    cubin: str
    abi: str = "v7"
    handle: int | None = None  # None: HANDLE + 0x1000 per module before it on its device
    base: int | None = None  # None: BASE + STRIDE per module before it on its device
    context_id: int = CONTEXT_ID
    image: bytes | None = None  # stored instead of the relocated cubin (to damage it)


@dataclass
class GridSpec:
    grid_id: int
    module: ModuleSpec
    kernel: str = "site"  # "site" (the fixture's fault or stall kernel), "other", a name
    params: bytes | None = None  # its .cudbg.param bytes (paramsOffset 0x210); None: none
    constbanks: list[tuple[int, int, int]] = field(default_factory=list)  # (addr, size, bank)
    grid_dim: Dim3 = (1, 1, 1)
    block_dim: Dim3 = (128, 1, 1)


@dataclass
class SmFault:
    """An SM-row exception (layouts r555 and later) at `offset` in grid `grid`'s kernel."""

    sm: int
    exception: int
    grid: int
    offset: int


@dataclass
class DeviceSpec:
    modules: list[ModuleSpec]
    grids: list[GridSpec]
    blocks: list[BlockSpec] = field(default_factory=list)
    sm_faults: list[SmFault] = field(default_factory=list)
    shared_window_base: int = 0
    local_window_base: int = 0

    def __post_init__(self) -> None:  # the default handle and load address of each module
        for n, module in enumerate(self.modules):
            module.handle = HANDLE + n * 0x1000 if module.handle is None else module.handle
            module.base = BASE + n * STRIDE if module.base is None else module.base


@dataclass
class DumpSpec:
    devices: list[DeviceSpec]
    layout: str = "r400"  # row layout generation: r346 … r615 (fixtures/builder/layouts.py)
    metadata_flags: int | None = None  # generation flags of a metadata row (r565 and later)
    metadata_timestamp: int | None = None  # when the dump was written (Unix seconds), same row
    memory: list[tuple[int, bytes]] = field(default_factory=list)  # global (address, bytes)


def write_tiny_dump(path: Path, spec: DumpSpec) -> Path:
    """Write the dump `spec` describes to `path`; returns `path`."""
    state = G.GpuState(
        [_device(index, device) for index, device in enumerate(spec.devices)],
        memory=[G.Memory(address, data) for address, data in spec.memory],
    )
    if spec.metadata_flags is not None or spec.metadata_timestamp is not None:
        state.metadata = {"generatorName": "tinydump", "flags": spec.metadata_flags or 0}
        if spec.metadata_timestamp is not None:
            state.metadata["timestamp"] = spec.metadata_timestamp
    with path.open("wb") as file, DumpWriter(file) as writer:
        G.write_state(writer, state, spec.layout)
    return path


def patch_section(path: Path, name: str, **fields: int) -> None:
    """Overwrite header fields (`sh_link=0`, `sh_entsize=7`…) of section `name` of the dump
    at `path`: how a test damages a dump the writer wrote whole."""
    data = bytearray(path.read_bytes())
    elf = ELFFile(BytesIO(data))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == name)
    at = elf.header.e_shoff + index * elf.header.e_shentsize
    header = dict(zip(_SHDR_FIELDS, _SHDR.unpack_from(data, at), strict=True)) | fields
    _SHDR.pack_into(data, at, *header.values())
    path.write_bytes(data)


def renamed(module: ModuleSpec, old: bytes, new: bytes) -> ModuleSpec:
    """`module` with every `old` in its relocated image replaced by `new`, of the same length:
    a stand-in for a kernel of another name (``ncclKernel_SendRecv_RING``) that no fixture
    cubin holds. The symbol and section names change; code and addresses stay."""
    assert len(old) == len(new), "a name of another length would move every string after it"
    module.image = relocated(module).data.replace(old, new)
    return module


@functools.cache
def relocated(module: ModuleSpec) -> RelocatedImage:
    """`module` relocated (`.data`), where it is loaded (`.section_addrs`, `.end`)."""
    return relocate_cubin(cubin(module.cubin, module.abi).data, module.base or BASE)


def kernel_text(grid: GridSpec) -> tuple[dict, int]:
    """The grid's kernel (its index.json entry) and the load address of its code section."""
    kernel = cubin(grid.module.cubin, grid.module.abi).kernel(grid.kernel)
    return kernel, relocated(grid.module).section_addrs[f".text.{kernel['name']}"]


def _device(index: int, device: DeviceSpec) -> G.Device:
    contexts: dict[int, G.Context] = {}
    for module in device.modules:
        row = {"contextId": module.context_id, "deviceIdx": index,
               "sharedWindowBase": device.shared_window_base,
               "localWindowBase": device.local_window_base}  # fmt: skip
        context = contexts.setdefault(module.context_id, G.Context(row, []))
        image = module.image if module.image is not None else relocated(module).data
        context.modules.append(G.Module({"moduleHandle": module.handle}, image))
    grids = {g.grid_id: g for g in device.grids}
    sms: dict[int, G.Sm] = {}
    for block in device.blocks:
        sm = sms.setdefault(block.sm, G.Sm({"smId": block.sm}, []))
        sm.ctas.append(_cta(grids[block.grid], block))
    for fault in device.sm_faults:
        sm = sms.setdefault(fault.sm, G.Sm({"smId": fault.sm}, []))
        pc = kernel_text(grids[fault.grid])[1] + fault.offset
        sm.row.update(exception=fault.exception, errorPCValid=1, errorPC=pc)
    grid_rows, sm_rows = [_grid(grid) for grid in device.grids], [sms[s] for s in sorted(sms)]
    return G.Device(_device_row(index), list(contexts.values()), grid_rows, sm_rows)


def _grid(grid: GridSpec) -> G.Grid:
    kernel, text = kernel_text(grid)
    (gx, gy, gz), (bx, by, bz) = grid.grid_dim, grid.block_dim
    row = {"gridId64": grid.grid_id, "contextId": grid.module.context_id, "functionEntry": text,
           "moduleHandle": grid.module.handle, "paramsOffset": 0x210, "kernelType": 2,
           "gridStatus": 2, "numRegs": kernel["num_regs"], "gridDimX": gx, "gridDimY": gy,
           "gridDimZ": gz, "blockDimX": bx, "blockDimY": by, "blockDimZ": bz}  # fmt: skip
    banks = [{"addr": a, "size": s, "bankId": b} for a, s, b in grid.constbanks]
    return G.Grid(row, grid.params, banks or None)


def _cta(grid: GridSpec, block: BlockSpec) -> G.Cta:
    kernel, text = kernel_text(grid)
    warps = [_warp(warp, text, int(kernel["num_regs"])) for warp in block.warps]
    x, y, z = block.block_idx
    return G.Cta({"gridId64": grid.grid_id, "blockIdxX": x, "blockIdxY": y, "blockIdxZ": z}, warps)


def _warp(warp: WarpSpec, text: int, num_regs: int) -> G.Warp:
    lanes, valid = [], 0
    for position, lane in enumerate(warp.lanes):
        ln = position if lane.lane is None else lane.lane
        valid |= 1 << ln
        row = {"virtualPC": text + lane.offset, "physPC": lane.offset, "ln": ln,
               "threadIdxX": 32 * warp.warp_id + ln, "exception": lane.exception}  # fmt: skip
        lanes.append(G.Lane(row, _words(lane.registers, num_regs), bytes(28)))
    valid = valid if warp.valid_lanes is None else warp.valid_lanes
    row = {"warpId": warp.warp_id, "validLanesMask": valid, "numRegs": num_regs,
           "activeLanesMask": valid if warp.active_lanes is None else warp.active_lanes,
           "isWarpBroken": int(warp.broken)}  # fmt: skip
    if warp.shared_mem_size is not None:
        row["sharedMemSize"] = warp.shared_mem_size
    if warp.error_offset is not None:
        row.update(errorPC=text + warp.error_offset, errorPCValid=1)
    uniform = None if warp.uniform_registers is None else _words(warp.uniform_registers, 63)
    return G.Warp(row, lanes, uregs=uniform, upred=None if uniform is None else bytes(28))


def _words(values: dict[int, int], count: int) -> bytes:
    count = max(count, max(values, default=-1) + 1)
    return struct.pack(f"<{count}I", *(values.get(n, 0) & 0xFFFF_FFFF for n in range(count)))


def _device_row(index: int) -> dict[str, int | str]:
    return {"devName": "NVIDIA H100 80GB HBM3", "devType": "GH100", "smType": "sm_90",
            "devId": index, "pciBusId": 0x18 + index, "numSMs": 132, "numWarpsPerSM": 64,
            "numLanesPerWarp": 32, "numRegsPerLane": 255, "numPredicatesPrLane": 7,
            "smMajor": 9, "smMinor": 0, "instructionSize": 16, "numUniformRegsPrWarp": 63,
            "numUniformPredicatesPrWarp": 7}  # fmt: skip
