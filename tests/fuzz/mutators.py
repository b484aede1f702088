"""Mutators of the ELF container: header fields, section headers, truncation, overlap, holes.

Each is a small function `(seed, rng) -> bytes | Mutant`, registered under its own name.
The mutators of what sections hold are in `content.py`, those of gzip streams in
`compressed.py`.
"""

from __future__ import annotations

import random

from tests.fuzz import elf
from tests.fuzz.mutant import (
    CUDA_TYPES,
    LOUSER,
    Mutant,
    NotApplicable,
    Seed,
    interesting,
    mutator,
    scribble,
)

# -- the ELF header ---------------------------------------------------------------------


@mutator()
def ehdr_shoff(seed: Seed, rng: random.Random) -> bytearray:
    """e_shoff: 0, 1, the file size, just short of it, huge, off by a header."""
    data = bytearray(seed.plain)
    size, shoff = len(data), seed.elf.shoff
    extra = [size, size - 1, size - 63, size - 64, shoff + 64, shoff - 64, 64, 1 << 63]
    elf.put_ehdr(data, "e_shoff", interesting(rng, shoff, 8, extra))
    return data


@mutator()
def ehdr_shnum(seed: Seed, rng: random.Random) -> bytearray:
    """e_shnum (or the extended count in section 0): 0, one off, 0xff00, huge."""
    data = bytearray(seed.plain)
    count = seed.elf.count
    extra = [count - 1, count + 1, 0xFF00, 0xFFFF, count * 2, 0]
    if rng.random() < 0.3:  # the extended count, in section 0's sh_size
        elf.put_ehdr(data, "e_shnum", 0)
        elf.put_shdr(data, seed.elf.sections[0], "sh_size", interesting(rng, count, 8, extra))
    else:
        elf.put_ehdr(data, "e_shnum", interesting(rng, count, 2, extra))
    return data


@mutator()
def ehdr_shstrndx(seed: Seed, rng: random.Random) -> bytearray:
    """e_shstrndx (or SHN_XINDEX and section 0's sh_link): out of range, another section."""
    data = bytearray(seed.plain)
    count, index = seed.elf.count, seed.elf.shstrndx
    others = [s.index for s in seed.elf.sections[1:]]
    extra = [count, count - 1, elf.SHN_XINDEX, rng.choice(others), 0, 0xFF00]
    value = interesting(rng, index, 4, extra)
    if value >= elf.SHN_XINDEX or rng.random() < 0.3:  # through section 0's sh_link
        elf.put_ehdr(data, "e_shstrndx", elf.SHN_XINDEX)
        elf.put_shdr(data, seed.elf.sections[0], "sh_link", value)
    else:
        elf.put_ehdr(data, "e_shstrndx", value)
    return data


@mutator()
def ehdr_shentsize(seed: Seed, rng: random.Random) -> bytearray:
    """e_shentsize other than 64."""
    data = bytearray(seed.plain)
    elf.put_ehdr(data, "e_shentsize", interesting(rng, 64, 2, [63, 65, 128, 32, 56, 72]))
    return data


@mutator()
def ehdr_type_machine(seed: Seed, rng: random.Random) -> bytearray:
    """e_type, e_machine, e_version, e_ehsize: executables, host cores, other machines."""
    data = bytearray(seed.plain)
    for field, original, extra in (
        ("e_type", 4, [0, 1, 2, 3, 5, 0xFE00, 0xFFFF]),
        ("e_machine", 190, [0, 3, 62, 183, 189, 191, 0xFFFF]),
        ("e_version", 1, [0, 2]),
        ("e_ehsize", 64, [0, 52, 65]),
    ):
        if rng.random() < 0.5:
            elf.put_ehdr(data, field, interesting(rng, original, 2, extra))
    return data


@mutator()
def ehdr_ident(seed: Seed, rng: random.Random) -> bytearray:
    """e_ident bytes: magic, class, data encoding, version, OS ABI, ABI version, padding."""
    data = bytearray(seed.plain)
    # 0-3 magic, 4 class, 5 data, 6 version, 7 OS ABI, 8 ABI version, 9-15 padding
    for _ in range(rng.choice((1, 1, 2, 4))):
        at = rng.choice((0, 1, 3, 4, 4, 5, 5, 6, 7, 7, 8, 8, 9, 15))
        data[at] = rng.choice((0, 1, 2, 3, 0x33, 0x7F, 0xFF, data[at] ^ 1, rng.randrange(256)))
    return data


# -- section headers --------------------------------------------------------------------


def pick_section(seed: Seed, rng: random.Random, tables: float = 0.7) -> elf.Section:
    """A table section most of the time, else any other section (section 0 included)."""
    pool = seed.tables if rng.random() < tables else list(seed.elf.sections)
    return rng.choice(pool or list(seed.elf.sections))


def section_value(seed: Seed, rng: random.Random, section: elf.Section, field: str) -> int:
    """A hostile value for `field` of `section`: interesting numbers, the same field of
    another table, the section's own index (a link to itself: a cycle)..."""
    offset, width = elf.SHDR_FIELDS[field]
    original = elf.get(seed.plain, section.header_at + offset, width)
    peers = [elf.get(seed.plain, s.header_at + offset, width) for s in seed.tables]
    count, size = seed.elf.count, len(seed.plain)
    extra = [*peers, section.index, count, count - 1]
    if field == "sh_type":
        extra = [*peers, *CUDA_TYPES, LOUSER + 24, LOUSER, elf.SHT_NOBITS, elf.SHT_STRTAB, 7]
    elif field in ("sh_link", "sh_info"):
        extra += [s.index for s in seed.tables] + [0xFFFF, 0xFFFFFFFF]
    elif field == "sh_entsize":
        extra += [original - 8, original + 8, original + 4, 1, 3, 7, section.size]
    elif field == "sh_size":
        extra += [size, size - section.offset, size - section.offset + 1]
        extra += [section.size - section.entsize, section.size + section.entsize]
    elif field == "sh_offset":
        extra += [size, size - 1, size - section.size, size - section.size + 1, 0]
        extra += [seed.elf.shoff, original + 1, original - section.entsize]
    return interesting(rng, original, width, extra)


def _shdr_field(field: str) -> None:
    def mutate(seed: Seed, rng: random.Random) -> bytearray:
        data = bytearray(seed.plain)
        section = pick_section(seed, rng)
        elf.put_shdr(data, section, field, section_value(seed, rng, section, field))
        return data

    mutate.__name__ = mutate.__qualname__ = "shdr_" + field.removeprefix("sh_")
    mutate.__doc__ = (
        f"{field} of a table (mostly) or another section: 0, 1, small, huge, off by one, "
        "another table's value, the section's own index."
    )
    mutator()(mutate)


for _field in ("sh_entsize", "sh_size", "sh_offset", "sh_link", "sh_info", "sh_type"):
    _shdr_field(_field)


@mutator()
def shdr_many(seed: Seed, rng: random.Random) -> bytearray:
    """Several fields of several section headers at once."""
    data = bytearray(seed.plain)
    fields = ["sh_entsize", "sh_size", "sh_offset", "sh_link", "sh_info", "sh_type", "sh_addr"]
    for _ in range(rng.randint(2, 8)):
        section = pick_section(seed, rng)
        field = rng.choice(fields)
        elf.put_shdr(data, section, field, section_value(seed, rng, section, field))
    return data


@mutator()
def link_cycle(seed: Seed, rng: random.Random) -> bytearray:
    """Tables whose sh_link (and sh_info) form a cycle of length 1 to 4."""
    data = bytearray(seed.plain)
    tables = seed.tables
    if not tables:
        raise NotApplicable("no tables")
    ring = rng.sample(tables, min(len(tables), rng.randint(1, 4)))
    for section, parent in zip(ring, ring[1:] + ring[:1], strict=True):
        elf.put_shdr(data, section, "sh_link", parent.index)
        if rng.random() < 0.5:
            elf.put_shdr(data, section, "sh_info", rng.choice((0, section.index, parent.index)))
    return data


@mutator()
def section_swap(seed: Seed, rng: random.Random) -> bytearray:
    """Two section headers swapped, or one copied over another."""
    data = bytearray(seed.plain)
    sections = seed.elf.sections
    a = pick_section(seed, rng)
    b = rng.choice(seed.tables if rng.random() < 0.5 and seed.tables else sections)
    header_a = bytes(data[a.header_at : a.header_at + 64])
    header_b = bytes(data[b.header_at : b.header_at + 64])
    data[a.header_at : a.header_at + 64] = header_b
    if rng.random() < 0.5:
        data[b.header_at : b.header_at + 64] = header_a
    return data


# -- layout: truncation, overlap, holes -------------------------------------------------


@mutator()
def truncate_boundary(seed: Seed, rng: random.Random) -> bytes:
    """The dump cut at a section boundary, or a few bytes either side of one."""
    parsed, size = seed.elf, len(seed.plain)
    cuts = {0, 1, 4, 16, 63, 64, parsed.shoff, parsed.shoff + 64 * parsed.count}
    cuts.update(parsed.shoff + 64 * rng.randrange(max(parsed.count, 1)) for _ in range(4))
    for section in parsed.sections:
        cuts.update((section.offset, section.end))
    where = rng.choice(sorted(c for c in cuts if 0 <= c < size) or [0])
    where += rng.choice((0, 0, 0, -1, 1, -rng.randint(2, 16), rng.randint(2, 16)))
    return seed.plain[: max(0, min(where, size - 1))]


@mutator()
def overlap_tables(seed: Seed, rng: random.Random) -> bytearray:
    """Many tables pointed at one large range: the whole file, the section headers, an image."""
    data = bytearray(seed.plain)
    size, tables = len(data), seed.tables
    if not tables:
        raise NotApplicable("no tables")
    largest = max(seed.elf.sections, key=lambda s: s.size if s.end <= size else 0)
    start, length = rng.choice(
        ((0, size), (seed.elf.shoff, size - seed.elf.shoff), (largest.offset, largest.size))
    )
    chosen = tables if rng.random() < 0.3 else rng.sample(tables, rng.randint(2, len(tables)))
    whole = rng.random() < 0.8
    for section in chosen:
        entsize = section.entsize
        elf.put_shdr(data, section, "sh_offset", start)
        elf.put_shdr(data, section, "sh_size", length - length % entsize if whole else length)
    return data


@mutator(weight=0.5)
def sparse_hole(seed: Seed, rng: random.Random) -> Mutant:
    """A huge sparse region appended (no disk used) and sections pointed into it."""
    data = bytearray(seed.plain)
    size = len(data)
    hole = rng.choice((1 << 30, 1 << 33, 1 << 36))
    total = size + hole
    tail = b""
    if rng.random() < 0.2:  # the section headers moved to the far end, past the hole
        headers = data[seed.elf.shoff : seed.elf.shoff + 64 * seed.elf.count]
        tail = bytes(headers)
        elf.put_ehdr(data, "e_shoff", total - len(tail))
    else:
        pool = seed.tables if rng.random() < 0.7 else list(seed.elf.sections[1:])
        for section in rng.sample(pool, min(len(pool), rng.choice((1, 1, 2, 3)))):
            entsize = section.entsize or 1
            offset = size + rng.choice((0, 64, hole // 2)) - rng.choice((0, 0, entsize))
            length = rng.choice((hole // 2, hole - (offset - size), hole, 1 << 62))
            elf.put_shdr(data, section, "sh_offset", offset)
            elf.put_shdr(data, section, "sh_size", length - length % entsize)
    return Mutant(bytes(data), total, tail)


# -- baselines --------------------------------------------------------------------------


@mutator()
def byte_flips(seed: Seed, rng: random.Random) -> bytearray:
    """Random bytes anywhere (the unstructured baseline)."""
    data = bytearray(seed.plain)
    for _ in range(rng.choice((1, 2, 4, 8, 32))):
        at = rng.randrange(len(data))
        data[at] = rng.choice((0, 0xFF, data[at] ^ (1 << rng.randrange(8)), rng.randrange(256)))
    return data


@mutator()
def header_bytes(seed: Seed, rng: random.Random) -> bytearray:
    """Random bytes inside the ELF header and the section header table."""
    data = bytearray(seed.plain)
    start, length = seed.elf.shoff, 64 * seed.elf.count
    for _ in range(rng.choice((1, 2, 4, 8))):
        if rng.random() < 0.2:
            scribble(rng, data, 0, 64)
        else:
            scribble(rng, data, start, length)
    return data
