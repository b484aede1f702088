"""Read what ptxas recorded about a cubin's kernels (``.nv.info``) and about itself (notes).

``.nv.info`` and ``.nv.info.<kernel>`` hold EIATTR records, little-endian and 4-byte aligned:
a format byte, an attribute byte, then the value. Formats 1-3 (NVAL, BVAL, HVAL) carry 2
bytes (unused, low byte, u16); format 4 (SVAL) a u16 size and that many bytes. Evidence:
``cuobjdump -elf`` 13.5 on the fixture cubins and on probes with rewritten records
(tests/unit/test_nvinfo.py compares the two); the attribute numbers are the ones that
cuobjdump names. Values this module interprets:

- ``EIATTR_KPARAM_INFO`` (0x17), 12 bytes: u32 index, u16 ordinal, u16 offset, u32 flags with
  the pointee's log alignment in bits 0-7, space 8-11, cbank 12-16, "in shared memory" 17 and
  the size in bytes in 18-31;
- ``EIATTR_PARAM_CBANK`` (0x0a): u32 symbol (``.nv.constant0.<kernel>``), u16 offset, u16 size
  of the parameters in constant bank 0 (``0x210``, 16 for ``oob_kernel`` on sm_90);
- ``EIATTR_REGCOUNT`` (0x2f) and ``FRAME_SIZE`` (0x11) in ``.nv.info``: u32 symbol index of
  the function, u32 value.

``.note.nv.tkinfo`` (type 2000, owner "NVIDIA Corp", cubins of ELF ABI 8; ABI 7 cubins from
ptxas 11.8 have none) holds six u32 (note version, then offsets of the object name, tool
name, tool version, tool branch and tool options) followed by the strings they point into.
``.note.nv.cuinfo`` (type 1000): u16 note version, u16 virtual SM, u32 CUDA version × 10.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from postmortem.cubin.elfimage import ElfImage
from postmortem.errors import MalformedElf, NvInfoError

__all__ = [
    "ATTRIBUTE_NAMES",
    "KernelInfo",
    "KernelParam",
    "NvInfoAttribute",
    "ToolkitInfo",
    "parse_attributes",
    "read_kernel_info",
    "read_toolkit_info",
]


# Number and name (without EIATTR_) as cuobjdump 13.5 prints them, learnt by rewriting the
# attribute byte of a record in a fixture cubin and reading `cuobjdump -elf` (see the test).
_NAMES = """
00 ERROR   01 PAD   02 IMAGE_SLOT   03 JUMPTABLE_RELOCS   04 CTAIDZ_USED   05 MAX_THREADS
06 IMAGE_OFFSET   07 IMAGE_SIZE   08 TEXTURE_NORMALIZED   09 SAMPLER_INIT   0A PARAM_CBANK
0B SMEM_PARAM_OFFSETS   0C CBANK_PARAM_OFFSETS   0D SYNC_STACK   0E TEXID_SAMPID_MAP   0F EXTERNS
10 REQNTID   11 FRAME_SIZE   12 MIN_STACK_SIZE   13 SAMPLER_FORCE_UNNORMALIZED
14 BINDLESS_IMAGE_OFFSETS   15 BINDLESS_TEXTURE_BANK   16 BINDLESS_SURFACE_BANK   17 KPARAM_INFO
18 SMEM_PARAM_SIZE   19 CBANK_PARAM_SIZE   1A QUERY_NUMATTRIB   1B MAXREG_COUNT
1C EXIT_INSTR_OFFSETS   1D S2RCTAID_INSTR_OFFSETS   1E CRS_STACK_SIZE   1F NEED_CNP_WRAPPER
20 NEED_CNP_PATCH   21 EXPLICIT_CACHING   22 ISTYPEP_USED   23 MAX_STACK_SIZE   24 SUQ_USED
25 LD_CACHEMOD_INSTR_OFFSETS   26 LOAD_CACHE_REQUEST   27 ATOM_SYS_INSTR_OFFSETS
28 COOP_GROUP_INSTR_OFFSETS   29 COOP_GROUP_MASK_REGIDS   2B WMMA_USED   2C HAS_PRE_V10_OBJECT
2D ATOMF16_EMUL_INSTR_OFFSETS   2E ATOM16_EMUL_INSTR_REG_MAP   2F REGCOUNT
31 INT_WARP_WIDE_INSTR_OFFSETS   32 SHARED_SCRATCH   33 STATISTICS   34 INDIRECT_BRANCH_TARGETS
36 SW_WAR   37 CUDA_API_VERSION   38 NUM_MBARRIERS   39 MBARRIER_INSTR_OFFSETS
3A COROUTINE_RESUME_ID_OFFSETS   3B SAM_REGION_STACK_SIZE   3C PER_REG_TARGET_PERF_STATS
3D CTA_PER_CLUSTER   3E EXPLICIT_CLUSTER   3F MAX_CLUSTER_RANK   40 INSTR_REG_MAP
41 RESERVED_SMEM_USED   42 RESERVED_SMEM_0_SIZE   43 UCODE_SECTION_DATA
44 UNUSED_LOAD_BYTE_OFFSET   45 KPARAM_INFO_V2   46 SYSCALL_OFFSETS   48 GRAPHICS_GLOBAL_CBANK
49 SHADER_TYPE   4A VRC_CTA_INIT_COUNT   4B TOOLS_PATCH_FUNC   4C NUM_BARRIERS
4D TEXMODE_INDEPENDENT   4E PERF_STATISTICS   4F AT_ENTRY_FRAGMENTS   50 SPARSE_MMA_MASK
51 TCGEN05_1CTA_USED   52 TCGEN05_2CTA_USED   53 GEN_ERRBAR_AT_EXIT   54 REG_RECONFIG
55 ANNOTATIONS   57 STACK_CANARY_TRAP_OFFSETS   58 STUB_FUNCTION_KIND
59 LOCAL_CTA_ASYNC_STORE_OFFSETS   5B BLOCKS_ARE_CLUSTERS   5C SANITIZE   5D SYSCALLS_FALLBACK
5E CUDA_REQ   61 RTCORE_ENTRY   62 CLUSTER_LAUNCH_CONTROL_USED   64 MIN_PER_CTA_MEMORY_SIZE
65 IGNOREOOB_CP_ASYNC_BULK_INSTR_OFFSETS   66 LANGUAGE   68 GRID_ATTRIBUTES   69 STACK_OFFSET
6A RT_LIVESTATE_SASS_MAP   6B NVSAL_SW_WAR   6C INSTR_OFFSETS   6D PREEXIT_USED
"""
ATTRIBUTE_NAMES: dict[int, str] = {
    int(number, 16): name for number, name in zip(*[iter(_NAMES.split())] * 2, strict=True)
}
"""Attribute number → cuobjdump's name without ``EIATTR_``."""

_NVAL, _BVAL, _HVAL, _SVAL = 1, 2, 3, 4
_MAX_THREADS, _PARAM_CBANK, _REQNTID, _FRAME_SIZE = 0x05, 0x0A, 0x10, 0x11
_KPARAM_INFO, _CBANK_PARAM_SIZE, _MAXREG_COUNT, _EXIT_OFFSETS = 0x17, 0x19, 0x1B, 0x1C
_REGCOUNT, _CUDA_API, _CTA_PER_CLUSTER = 0x2F, 0x37, 0x3D
# Decoded into KernelInfo fields; every other record is kept raw in KernelInfo.other.
_INTERPRETED = frozenset(
    {_MAX_THREADS, _PARAM_CBANK, _REQNTID, _KPARAM_INFO, _CBANK_PARAM_SIZE, _MAXREG_COUNT,
     _EXIT_OFFSETS, _CUDA_API, _CTA_PER_CLUSTER}
)  # fmt: skip
_NOTE_CUINFO, _NOTE_TKINFO = 1000, 2000


@dataclass(frozen=True, slots=True)
class NvInfoAttribute:
    """One EIATTR record, undecoded."""

    attribute: int
    """The attribute number (``0x17`` is KPARAM_INFO); see `ATTRIBUTE_NAMES`."""
    format: int
    """1 NVAL (no value), 2 BVAL (byte), 3 HVAL (u16), 4 SVAL (sized)."""
    value: bytes
    """The value's bytes: empty for NVAL, 1 for BVAL, 2 for HVAL, the payload for SVAL."""

    @property
    def name(self) -> str | None:
        """cuobjdump's name without the ``EIATTR_`` prefix; None for a number it does not know."""
        return ATTRIBUTE_NAMES.get(self.attribute)


@dataclass(frozen=True, slots=True)
class KernelParam:
    """One kernel parameter's place in the parameter constant bank."""

    index: int
    """The record's index field (0 in every cubin seen)."""
    ordinal: int
    """The parameter's position in the signature, from 0."""
    offset: int
    """Byte offset from the start of the parameters (add `KernelInfo.param_offset` for the
    offset in constant bank 0)."""
    size_bytes: int
    """Its size in bytes (8 for a pointer, 4 for an int or float, a struct's size)."""
    log_alignment: int
    """The pointee's log2 alignment as recorded (0 when unstated)."""


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """What ``.nv.info`` and ``.nv.info.<kernel>`` say about one kernel."""

    name: str
    """The kernel's mangled name."""
    symbol_index: int | None
    """Its index in ``.symtab``; None when the symbol table does not name it."""
    params: tuple[KernelParam, ...]
    """The parameters in ordinal order (KPARAM_INFO)."""
    param_offset: int | None
    """Where the parameters start in constant bank 0 (PARAM_CBANK), e.g. ``0x210`` on sm_90."""
    param_size_bytes: int | None
    """Their total size (CBANK_PARAM_SIZE, else PARAM_CBANK's size field)."""
    register_count: int | None
    """Registers per thread (REGCOUNT in ``.nv.info``, keyed by the symbol index)."""
    max_register_count: int | None
    """The register limit ptxas worked under (MAXREG_COUNT; 0xff when unlimited)."""
    frame_size_bytes: int | None
    """Stack frame size (FRAME_SIZE in ``.nv.info``)."""
    max_threads: tuple[int, int, int] | None
    """``__launch_bounds__``' block size (MAX_THREADS)."""
    required_threads: tuple[int, int, int] | None
    """``.reqntid`` block size (REQNTID)."""
    cluster_dims: tuple[int, int, int] | None
    """``__cluster_dims__`` (CTA_PER_CLUSTER)."""
    exit_offsets: tuple[int, ...]
    """Offsets of the kernel's EXIT instructions (EXIT_INSTR_OFFSETS)."""
    cuda_api_version: int | None
    """CUDA_API_VERSION: the CUDA version × 10 (135 for 13.5)."""
    other: tuple[NvInfoAttribute, ...]
    """Every record of ``.nv.info.<kernel>`` not interpreted above, kept raw."""


@dataclass(frozen=True, slots=True)
class ToolkitInfo:
    """Who built the cubin and how: ``.note.nv.tkinfo`` and ``.note.nv.cuinfo``."""

    tool_name: str | None
    """The producing tool (``ptxas``); None without a tkinfo note."""
    tool_version: str | None
    """``Cuda compilation tools, release 13.5, V13.5.37``."""
    tool_branch: str | None
    """The build id, ``Build cuda_13.5.r13.5/compiler.39125733_0``."""
    options: str | None
    """The tool's options as recorded, e.g. ``-lineinfo  -arch sm_90 -m 64`` (ptxas records
    ``--generate-line-info`` as ``-lineinfo``, and nvcc's ``-G`` reaches it as ``-g``)."""
    object_name: str | None
    """The output name the tool was given (``lb.cubin``); empty or None when unrecorded."""
    note_version: int | None
    """The tkinfo note's version (2)."""
    virtual_arch: str | None
    """The PTX target from cuinfo, ``sm_90``."""
    cuda_version: tuple[int, int] | None
    """The toolkit version from cuinfo, ``(13, 5)``."""

    @property
    def has_lineinfo_option(self) -> bool | None:
        """True when the options ask for line info; None when no options were recorded."""
        if self.options is None:
            return None
        return not {"-lineinfo", "--generate-line-info"}.isdisjoint(self.options.split())

    def arch_name(self, sm_arch: int) -> str:
        """The target as the build named it: ``sm_90a`` (an architecture-specific or family
        target, which the ELF header does not tell from ``sm_90``) when the recorded options
        say ``-arch sm_90a`` for the header's ``sm_90``; else ``sm_<sm_arch>``."""
        plain = f"sm_{sm_arch}"
        words = (self.options or "").replace("=", " ").split()
        for flag, value in zip(words, words[1:], strict=False):
            if flag in ("-arch", "--gpu-name") and value[:-1] == plain and value[-1] in "af":
                return value
        return plain

    @property
    def has_device_debug(self) -> bool | None:
        """True for a ``-G`` build (ptxas ``-g``/``--device-debug``); None when unrecorded."""
        if self.options is None:
            return None
        return not {"-g", "-G", "--device-debug"}.isdisjoint(self.options.split())


def parse_attributes(data: bytes, section: str = ".nv.info") -> tuple[NvInfoAttribute, ...]:
    """Splits the bytes of an ``.nv.info`` section into EIATTR records.

    Args:
        data: The section's contents.
        section: The section's name, for error messages.

    Returns:
        The records in order.

    Raises:
        NvInfoError: A record has an unknown format or runs past the end.
    """
    records: list[NvInfoAttribute] = []
    position = 0
    while position < len(data):
        if position + 4 > len(data):
            raise NvInfoError(section, f"record at byte {position} is cut short")
        fmt, attribute, short = struct.unpack_from("<BBH", data, position)
        if fmt == _SVAL:
            end = position + 4 + short
            if end > len(data):
                raise NvInfoError(
                    section,
                    f"record at byte {position} needs {short} bytes after its header, "
                    f"{len(data) - position - 4} are left",
                )
            value = bytes(data[position + 4 : end])
        elif fmt in (_NVAL, _BVAL, _HVAL):
            end = position + 4
            # NVAL ignores its two value bytes, BVAL uses the first, HVAL both (a u16).
            value = bytes(data[position + 2 : position + 2 + (fmt - 1)])
        else:
            raise NvInfoError(section, f"record at byte {position} has unknown format {fmt}")
        records.append(NvInfoAttribute(attribute, fmt, value))
        position = end
    return tuple(records)


def read_kernel_info(cubin: bytes, kernel: str) -> KernelInfo | None:
    """Reads one kernel's parameter layout, register count and launch attributes.

    Args:
        cubin: The cubin's bytes (an ELF image).
        kernel: The kernel's mangled name.

    Returns:
        The kernel's attributes, or None when the cubin has no ``.nv.info.<kernel>`` section.

    Raises:
        NvInfoError: The image, its section table or an ``.nv.info`` section is malformed.
    """
    try:
        return _kernel_info(ElfImage(cubin), kernel)
    except MalformedElf as exc:
        raise NvInfoError(exc.where, exc.problem) from exc


def _kernel_info(elf: ElfImage, kernel: str) -> KernelInfo | None:
    section = f".nv.info.{kernel}"
    data = elf.section_data(section)
    if data is None:
        return None
    records = parse_attributes(data, section)
    symbol_index = elf.symbol_index(kernel)
    per_function = _per_function(elf, symbol_index)
    values = {r.attribute: r for r in records if r.attribute in _INTERPRETED}
    cbank = _param_cbank(values.get(_PARAM_CBANK), section)
    size = _u32_or_u16(values.get(_CBANK_PARAM_SIZE))
    return KernelInfo(
        name=kernel,
        symbol_index=symbol_index,
        params=_params(records, section),
        param_offset=None if cbank is None else cbank[0],
        param_size_bytes=size if size is not None else (None if cbank is None else cbank[1]),
        register_count=per_function.get(_REGCOUNT),
        max_register_count=_u32_or_u16(values.get(_MAXREG_COUNT)),
        frame_size_bytes=per_function.get(_FRAME_SIZE),
        max_threads=_dims(values.get(_MAX_THREADS)),
        required_threads=_dims(values.get(_REQNTID)),
        cluster_dims=_dims(values.get(_CTA_PER_CLUSTER)),
        exit_offsets=_words(values.get(_EXIT_OFFSETS)),
        cuda_api_version=_u32_or_u16(values.get(_CUDA_API)),
        other=tuple(r for r in records if r.attribute not in _INTERPRETED),
    )


def _per_function(elf: ElfImage, symbol_index: int | None) -> dict[int, int]:
    """The ``.nv.info`` values (REGCOUNT, FRAME_SIZE, …) recorded for one function symbol."""
    data = elf.section_data(".nv.info")
    if data is None or symbol_index is None:
        return {}
    found: dict[int, int] = {}
    for record in parse_attributes(data, ".nv.info"):
        if record.format == _SVAL and len(record.value) == 8:
            symbol, value = struct.unpack("<II", record.value)
            if symbol == symbol_index:
                found[record.attribute] = value
    return found


def _params(records: tuple[NvInfoAttribute, ...], section: str) -> tuple[KernelParam, ...]:
    params: list[KernelParam] = []
    for record in records:
        if record.attribute != _KPARAM_INFO:
            continue
        if len(record.value) < 12:
            raise NvInfoError(section, f"KPARAM_INFO holds {len(record.value)} bytes, not 12")
        index, ordinal, offset, flags = struct.unpack_from("<IHHI", record.value)
        params.append(KernelParam(index, ordinal, offset, flags >> 18, flags & 0xFF))
    return tuple(sorted(params, key=lambda p: (p.ordinal, p.offset)))


def _param_cbank(record: NvInfoAttribute | None, section: str) -> tuple[int, int] | None:
    if record is None:
        return None
    if len(record.value) < 8:
        raise NvInfoError(section, f"PARAM_CBANK holds {len(record.value)} bytes, not 8")
    _symbol, offset, size = struct.unpack_from("<IHH", record.value)
    return offset, size


def _u32_or_u16(record: NvInfoAttribute | None) -> int | None:
    """An HVAL's u16, a BVAL's byte or a 4-byte SVAL's u32."""
    if record is None or record.format == _NVAL or len(record.value) not in (1, 2, 4):
        return None
    return int.from_bytes(record.value, "little")


def _dims(record: NvInfoAttribute | None) -> tuple[int, int, int] | None:
    if record is None or record.format != _SVAL or len(record.value) != 12:
        return None
    x, y, z = struct.unpack("<III", record.value)
    return x, y, z


def _words(record: NvInfoAttribute | None) -> tuple[int, ...]:
    if record is None or record.format != _SVAL:
        return ()
    usable = len(record.value) - len(record.value) % 4
    return tuple(word for (word,) in struct.iter_unpack("<I", record.value[:usable]))


def read_toolkit_info(cubin: bytes) -> ToolkitInfo | None:
    """Reads the producing tool, its version and options, and the CUDA version of a cubin.

    Args:
        cubin: The cubin's bytes (an ELF image).

    Returns:
        What the ``.note.nv.tkinfo`` and ``.note.nv.cuinfo`` notes say (fields of an absent
        note are None), or None when the cubin has neither (ELF ABI 7 cubins from ptxas 11.8).

    Raises:
        NvInfoError: The image, its section table or a note is malformed.
    """
    try:
        return _toolkit_info(ElfImage(cubin))
    except MalformedElf as exc:
        raise NvInfoError(exc.where, exc.problem) from exc


def _toolkit_info(elf: ElfImage) -> ToolkitInfo | None:
    tkinfo = _note(elf, ".note.nv.tkinfo", _NOTE_TKINFO)
    cuinfo = _note(elf, ".note.nv.cuinfo", _NOTE_CUINFO)
    if tkinfo is None and cuinfo is None:
        return None
    strings = _tkinfo_strings(tkinfo) if tkinfo is not None else {}
    arch, version = _cuinfo(cuinfo) if cuinfo is not None else (None, None)
    return ToolkitInfo(
        tool_name=strings.get("tool_name"),
        tool_version=strings.get("tool_version"),
        tool_branch=strings.get("tool_branch"),
        options=strings.get("options"),
        object_name=strings.get("object_name"),
        note_version=int.from_bytes(tkinfo[:4], "little") if tkinfo is not None else None,
        virtual_arch=arch,
        cuda_version=version,
    )


_TKINFO_FIELDS = ("object_name", "tool_name", "tool_version", "tool_branch", "options")


def _tkinfo_strings(desc: bytes) -> dict[str, str]:
    """The strings a tkinfo note points at: six u32 (version, five offsets), then a table."""
    header = 4 * (1 + len(_TKINFO_FIELDS))
    if len(desc) < header:
        raise NvInfoError(".note.nv.tkinfo", f"note holds {len(desc)} bytes, needs {header}")
    offsets = struct.unpack_from(f"<{len(_TKINFO_FIELDS)}I", desc, 4)
    table = desc[header:]
    found: dict[str, str] = {}
    for field, offset in zip(_TKINFO_FIELDS, offsets, strict=True):
        if offset >= len(table):
            raise NvInfoError(
                ".note.nv.tkinfo",
                f"{field} at string offset {offset} is past the {len(table)}-byte table",
            )
        found[field] = table[offset:].split(b"\0", 1)[0].decode("utf-8", "replace").strip()
    return found


def _cuinfo(desc: bytes) -> tuple[str, tuple[int, int]]:
    if len(desc) < 8:
        raise NvInfoError(".note.nv.cuinfo", f"note holds {len(desc)} bytes, needs 8")
    _version, arch, cuda = struct.unpack_from("<HHI", desc)
    return f"sm_{arch}", divmod(cuda, 10)


def _note(elf: ElfImage, section: str, note_type: int) -> bytes | None:
    return next((n.desc for n in elf.notes(section) if n.type == note_type), None)
