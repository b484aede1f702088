"""Mutators of what sections hold: table rows, registers, strings, memory, cubin images."""

from __future__ import annotations

import random

from tests.fuzz import elf
from tests.fuzz.mutant import (
    BT,
    CB,
    CTA,
    CTX,
    DEV,
    GRID,
    LN,
    LOUSER,
    META,
    SM,
    WP,
    NotApplicable,
    Seed,
    interesting,
    mutator,
    scribble,
)

DEV_REGS, DEV_PRED, DEV_UREGS, DEV_UPRED = LOUSER + 5, LOUSER + 17, LOUSER + 19, LOUSER + 20
CBU_BAR, PARAM_MEM = LOUSER + 23, LOUSER + 18
MEMORY = (LOUSER + 1, LOUSER + 2, LOUSER + 3, LOUSER + 4, PARAM_MEM)
REGISTERS = (DEV_REGS, DEV_PRED, DEV_UREGS, DEV_UPRED, CBU_BAR)

# (table type, offset, width) of the fields the analysis leans on (coredump-format.md).
COUNTS = [
    *((DEV, o, 4) for o in (36, 40, 44, 48, 52, 56, 60, 64, 72, 76, 80)),
    *((GRID, o, 4) for o in (68, 72, 76, 80, 84, 88, 92, 104, 108, 112, 120, 124, 128)),
    (GRID, 48, 8), (WP, 32, 4), (WP, 40, 4), (LN, 16, 4), (LN, 36, 4), (LN, 40, 4),
    (BT, 16, 4), (CB, 8, 4), (CB, 12, 4), (CTX, 32, 4), (META, 28, 4), (SM, 0, 4), (WP, 8, 4),
    (CTA, 8, 4), (CTA, 12, 4), (CTA, 16, 4), (LN, 20, 4), (LN, 24, 4), (LN, 28, 4),
]  # fmt: skip
STRINGS = [(DEV, 0), (DEV, 8), (DEV, 16), (META, 0), (SM, 40), (WP, 72)]
EXCEPTIONS = [(LN, 32), (SM, 8), (WP, 24), (WP, 20), (WP, 12), (WP, 16), (SM, 12)]
PCS = [(LN, 0), (LN, 8), (WP, 0), (SM, 16), (GRID, 24), (BT, 0), (BT, 8), (CB, 0)]


def rows_of(seed: Seed, table: int, end: int = 0) -> list[int]:
    """Absolute offsets of every row of every `table` section whose stride reaches `end`."""
    return [
        s.offset + row * s.entsize
        for s in seed.of_type(table)
        if s.entsize >= end and s.entsize and s.end <= len(seed.plain)
        for row in range(s.size // s.entsize)
    ]


def edit_rows(seed: Seed, rng: random.Random, fields, value, many: float = 0.2) -> bytearray:
    """Set one field (or, sometimes, that field in every row) to `value(rng, original)`."""
    data = bytearray(seed.plain)
    edits = 0
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        table, offset, width = rng.choice(fields)
        rows = rows_of(seed, table, offset + width)
        if not rows:
            continue
        chosen = rows if rng.random() < many else [rng.choice(rows)]
        for row in chosen:
            elf.put(data, row + offset, width, value(rng, elf.get(data, row + offset, width)))
        edits += 1
    if not edits:
        raise NotApplicable("no such rows")
    return data


@mutator()
def row_fields(seed: Seed, rng: random.Random) -> bytearray:
    """Any aligned u32 or u64 of a table row."""
    fields = sorted(
        {(s.type, offset, width) for s in seed.tables for offset in range(0, s.entsize, 4)
         for width in ((4, 8) if offset % 8 == 0 and offset + 8 <= s.entsize else (4,))}
    )  # fmt: skip
    if not fields:
        raise NotApplicable("no tables")
    return edit_rows(seed, rng, fields, lambda r, v: interesting(r, v, 4), many=0.1)


@mutator()
def row_counts(seed: Seed, rng: random.Random) -> bytearray:
    """Counts, dimensions, depths and indices: 0, 1, huge."""
    extra = [0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 1 << 16, 1 << 20, 255, 256, 1024]
    return edit_rows(seed, rng, COUNTS, lambda r, v: interesting(r, v, 4, extra))


@mutator()
def row_exceptions(seed: Seed, rng: random.Random) -> bytearray:
    """Exception codes, error-PC-valid flags, broken warps and lane masks."""
    codes = [*range(0, 40), 0xFFFFFFFF, 0x80000000, 1 << 16]
    fields = [(table, offset, 4) for table, offset in EXCEPTIONS]

    def value(r: random.Random, original: int) -> int:
        return r.choice((r.choice(codes), interesting(r, original, 4), r.getrandbits(32)))

    return edit_rows(seed, rng, fields, value, many=0.4)


def code_addresses(seed: Seed) -> list[tuple[int, int]]:
    """(address, size) of every executable section of every cubin image."""
    return [
        (s.addr, s.size)
        for _, image in seed.images
        for s in image.sections
        if s.flags & elf.SHF_EXECINSTR and s.size
    ]


@mutator()
def row_pcs(seed: Seed, rng: random.Random) -> bytearray:
    """PCs, entry addresses and return addresses moved around the code (and far from it)."""
    code = code_addresses(seed) or [(0x7FFF0000, 0x100)]
    data_sections = [(s.addr, s.size) for _, i in seed.images for s in i.sections if s.addr]
    fields = [(table, offset, 8) for table, offset in PCS]

    def value(r: random.Random, original: int) -> int:
        addr, size = r.choice(code)
        other = r.choice(data_sections or code)[0]
        return r.choice((
            addr + 16 * r.randrange(max(size // 16, 1)), addr + r.randrange(size) | 1,
            addr + size, addr - 16, addr - 1, 0, 2**64 - 1, 2**64 - 16, other, original ^ 8,
            interesting(r, original, 8),
        ))  # fmt: skip

    data = edit_rows(seed, rng, fields, value, many=0.3)
    if rng.random() < 0.5:  # make the moved PCs count: valid error PCs, faulting lanes
        for table, offset in ((WP, 24), (SM, 12), (LN, 32)):
            for row in rows_of(seed, table, offset + 4):
                if rng.random() < 0.3:
                    elf.put(data, row + offset, 4, rng.choice((1, 14, 0xFFFFFFFF)))
    return data


@mutator()
def strtab_offsets(seed: Seed, rng: random.Random) -> bytearray:
    """String-table indices (device names, SM type, generator, exception strings) out of range."""
    strtab = next((s for s in seed.elf.sections if s.name == ".strtab"), None)
    size = strtab.size if strtab else 0
    extra = [size, size - 1, size + 1, 2**32, 2**63, 2**64 - 1, rng.randrange(max(size, 1))]
    fields = [(table, offset, 8) for table, offset in STRINGS]
    return edit_rows(seed, rng, fields, lambda r, v: interesting(r, v, 8, extra), many=0.3)


@mutator()
def strtab_content(seed: Seed, rng: random.Random) -> bytearray:
    """The string tables garbled: NULs gone, invalid UTF-8, controls; or resized, moved."""
    data = bytearray(seed.plain)
    names = [s for s in seed.elf.sections if s.type == elf.SHT_STRTAB]
    if not names:
        raise NotApplicable("no string tables")
    section = rng.choice(names)
    how = rng.choice(("nuls", "bytes", "size", "offset"))
    if how == "nuls":
        for i in range(section.offset, min(section.end, len(data))):
            if data[i] == 0 and rng.random() < 0.7:
                data[i] = rng.choice((0x41, 0xFF, 0x0A, 0x1B, 0x80, 0x60))
    elif how == "bytes":
        for _ in range(rng.choice((1, 4, 16))):
            scribble(rng, data, section.offset, section.size)
    else:
        field = "sh_" + how
        elf.put_shdr(data, section, field, section_value_simple(seed, rng, section, field))
    return data


def section_value_simple(seed: Seed, rng: random.Random, section: elf.Section, field: str) -> int:
    size = len(seed.plain)
    original = section.size if field == "sh_size" else section.offset
    extra = [size, size - section.offset, size - 1, section.size + 1, 2**63]
    return interesting(rng, original, 8, extra)


@mutator()
def regs_size(seed: Seed, rng: random.Random) -> bytearray:
    """Register, predicate, uniform and barrier sections of odd or absurd sizes."""
    data = bytearray(seed.plain)
    sections = seed.of_type(*REGISTERS)
    if not sections:
        raise NotApplicable("no register sections")
    for section in rng.sample(sections, min(len(sections), rng.choice((1, 1, 4, 64)))):
        extra = [1, 2, 3, 5, 6, 7, section.size | 1, section.size + 2, section.size - 2]
        elf.put_shdr(data, section, "sh_size", interesting(rng, section.size, 8, extra))
        if rng.random() < 0.2:
            elf.put_shdr(data, section, "sh_entsize", rng.choice((0, 1, 3, 8, 2**63)))
    return data


@mutator()
def regs_values(seed: Seed, rng: random.Random) -> bytearray:
    """Register and predicate values: zeros, all ones, sign bits, halves of code addresses."""
    data = bytearray(seed.plain)
    sections = [s for s in seed.of_type(*REGISTERS) if s.size >= 4]
    if not sections:
        raise NotApplicable("no register sections")
    halves = [a & 0xFFFFFFFF for a, _ in code_addresses(seed)] + [
        a >> 32 for a, _ in code_addresses(seed)
    ]
    values = [0, 1, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0xFFFFFFF0, *halves]
    for section in rng.sample(sections, min(len(sections), rng.choice((1, 2, 8)))):
        registers = section.size // 4
        every = rng.random() < 0.3
        for n in range(registers) if every else rng.sample(range(registers), min(registers, 4)):
            value = rng.choice(values) if rng.random() < 0.7 else rng.getrandbits(32)
            elf.put(data, section.offset + 4 * n, 4, value)
    return data


@mutator()
def memory_segments(seed: Seed, rng: random.Random) -> bytearray:
    """Captured memory and parameter sections: addresses that wrap, sizes, contents."""
    data = bytearray(seed.plain)
    sections = seed.of_type(*MEMORY)
    if not sections:
        raise NotApplicable("no memory sections")
    peers = [s.addr for s in sections]
    for section in rng.sample(sections, min(len(sections), rng.choice((1, 1, 2, 8)))):
        how = rng.choice(("addr", "size", "bytes", "bytes"))
        if how == "addr":
            extra = [*peers, 2**64 - 1, 2**64 - section.size // 2, section.addr + 1, 0]
            elf.put_shdr(data, section, "sh_addr", interesting(rng, section.addr, 8, extra))
        elif how == "size":
            extra = [section.size + 1, section.size - 1, 2**64 - section.addr, 1, 7]
            elf.put_shdr(data, section, "sh_size", interesting(rng, section.size, 8, extra))
        else:
            for _ in range(rng.choice((1, 4, 16))):
                scribble(rng, data, section.offset, section.size)
    return data


# -- cubin images -----------------------------------------------------------------------


def pick_image(seed: Seed, rng: random.Random):
    if not seed.images:
        raise NotApplicable("no cubin images")
    relocated = [pair for pair in seed.images if pair[0].type == LOUSER + 7]
    return rng.choice(relocated if relocated and rng.random() < 0.8 else list(seed.images))


@mutator()
def cubin_bytes(seed: Seed, rng: random.Random) -> bytearray:
    """Random bytes anywhere in a cubin image."""
    data = bytearray(seed.plain)
    section, _ = pick_image(seed, rng)
    for _ in range(rng.choice((1, 4, 16, 64))):
        scribble(rng, data, section.offset, section.size)
    return data


@mutator()
def cubin_header(seed: Seed, rng: random.Random) -> bytearray:
    """A cubin's ELF header: magic, class, section table offset, count, string index, flags."""
    data = bytearray(seed.plain)
    section, image = pick_image(seed, rng)
    base = section.offset
    for _ in range(rng.choice((1, 1, 2, 3))):
        field = rng.choice([*elf.EHDR_FIELDS, "ident", "ident"])
        if field == "ident":
            at = rng.choice((0, 1, 4, 5, 6, 7, 8))
            data[base + at] = rng.choice((0, 1, 2, 0x33, 0x41, 0xFF, data[base + at] ^ 1))
            continue
        offset, width = elf.EHDR_FIELDS[field]
        original = elf.get(data, base + offset, width)
        extra = [image.count, image.count + 1, section.size, section.size - 64, 0xFFFF]
        elf.put_ehdr(data, field, interesting(rng, original, width, extra), base)
    return data


@mutator()
def cubin_sections(seed: Seed, rng: random.Random) -> bytearray:
    """A cubin's section headers: offsets, sizes, addresses, flags, links of code and symbols."""
    data = bytearray(seed.plain)
    dump_section, image = pick_image(seed, rng)
    if not image.sections:
        raise NotApplicable("image without sections")
    favoured = [
        s for s in image.sections
        if s.name.startswith((".text", ".symtab", ".strtab", ".nv.info", ".debug_line", ".nv.con"))
    ]  # fmt: skip
    for _ in range(rng.choice((1, 1, 2, 4))):
        section = rng.choice(favoured if favoured and rng.random() < 0.7 else image.sections)
        field = rng.choice(list(elf.SHDR_FIELDS))
        offset, width = elf.SHDR_FIELDS[field]
        original = elf.get(data, section.header_at + offset, width)
        peers = [elf.get(data, s.header_at + offset, width) for s in image.sections]
        extra = [*peers, section.index, image.count, dump_section.size, dump_section.size + 1]
        elf.put(data, section.header_at + offset, width, interesting(rng, original, width, extra))
    return data


@mutator()
def cubin_symtab(seed: Seed, rng: random.Random) -> bytearray:
    """A cubin's symbols (name, type, section index, value, size) or its string tables."""
    data = bytearray(seed.plain)
    _, image = pick_image(seed, rng)
    symtabs = image.of_type(elf.SHT_SYMTAB)
    strtabs = image.of_type(elf.SHT_STRTAB)
    if not symtabs:
        raise NotApplicable("image without symbols")
    symtab = symtabs[0]
    start, count = image.base + symtab.offset, symtab.size // 24
    how = rng.choice(("symbol", "symbol", "symbol", "header", "strings"))
    if how == "symbol" and count:
        code = code_addresses(seed) or [(0, 0)]
        for _ in range(rng.choice((1, 2, 8))):
            at = start + 24 * rng.randrange(count)
            offset, width = rng.choice(((0, 4), (4, 1), (6, 2), (8, 8), (16, 8), (5, 1)))
            extra = [symtab.index, image.count, 0xFFF1, 0xFFFF, 0x12, 0x22, *code[0]]
            original = elf.get(data, at + offset, width)
            elf.put(data, at + offset, width, interesting(rng, original, width, extra))
    elif how == "header" or not strtabs:
        field = rng.choice(("sh_entsize", "sh_size", "sh_offset", "sh_link", "sh_info"))
        offset, width = elf.SHDR_FIELDS[field]
        original = elf.get(data, symtab.header_at + offset, width)
        extra = [0, 1, 23, 25, symtab.size + 1, symtab.index, image.count]
        elf.put(data, symtab.header_at + offset, width, interesting(rng, original, width, extra))
    else:
        strings = rng.choice(strtabs)
        at = image.base + strings.offset
        for i in range(at, min(at + strings.size, len(data))):
            if data[i] == 0 and rng.random() < 0.5:
                data[i] = rng.choice((0x41, 0xFF, 0x80, 0x0A))
    return data


@mutator()
def cubin_nvinfo(seed: Seed, rng: random.Random) -> bytearray:
    """`.nv.info` attribute records: format, attribute, length fields and values."""
    data = bytearray(seed.plain)
    _, image = pick_image(seed, rng)
    infos = [s for s in image.sections if s.name.startswith(".nv.info") and s.size]
    if not infos:
        raise NotApplicable("image without .nv.info")
    section = rng.choice(infos)
    start, end = image.base + section.offset, image.base + section.end
    records, at = [], start
    while at + 2 <= end:  # EIFMT: 1 none, 2 byte, 3 half, 4 sized
        records.append(at)
        fmt = data[at]
        at += 2 + {1: 0, 2: 1, 3: 2}.get(fmt, 2 + elf.get(data, at + 2, 2) if fmt == 4 else 0)
    for _ in range(rng.choice((1, 1, 2, 4))):
        record = rng.choice(records or [start])
        how = rng.choice(("format", "attribute", "length", "value"))
        if how == "format":
            data[record] = rng.choice((0, 1, 2, 3, 4, 5, 0xFF))
        elif how == "attribute":
            data[record + 1] = rng.randrange(256)
        elif how == "length":
            elf.put(data, record + 2, 2, interesting(rng, elf.get(data, record + 2, 2), 2))
        else:
            scribble(rng, data, record + 4, min(16, end - record - 4))
    return data


@mutator()
def cubin_truncate(seed: Seed, rng: random.Random) -> bytearray:
    """A cubin cut short: its section in the dump made smaller."""
    data = bytearray(seed.plain)
    section, image = pick_image(seed, rng)
    cuts = [0, 1, 4, 16, 63, 64, image.shoff, image.shoff + 64, section.size - 1]
    cuts += [s.offset + d for s in image.sections for d in (0, 1)]
    cut = rng.choice([c for c in cuts if 0 <= c < section.size] or [0])
    elf.put_shdr(data, section, "sh_size", cut)
    return data


@mutator()
def cubin_debug(seed: Seed, rng: random.Random) -> bytearray:
    """Line tables, frame tables and other debug sections of a cubin scribbled over."""
    data = bytearray(seed.plain)
    _, image = pick_image(seed, rng)
    debug = [s for s in image.sections if s.name.startswith((".debug", ".nv_debug")) and s.size]
    pool = debug or [s for s in image.sections if s.size and s.type != elf.SHT_NOBITS]
    if not pool:
        raise NotApplicable("image without sections")
    for _ in range(rng.choice((1, 2, 8, 32))):
        section = rng.choice(pool)
        scribble(rng, data, image.base + section.offset, section.size)
    return data
