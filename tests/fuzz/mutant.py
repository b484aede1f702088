"""Mutants: the fixture a mutant starts from, the registry of mutators, and how a mutant is built.

A mutant is named by the triple (dump, mutator, seed) and rebuilt from it: the mutator gets a
`random.Random` seeded with the triple's text, and nothing else that varies between runs.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tests.fuzz import elf

DUMPS = Path(__file__).resolve().parents[2] / "fixtures" / "dumps"
LOUSER = 0x80000000
RELF_IMG, ELF_IMG, BT = LOUSER + 7, LOUSER + 6, LOUSER + 8
DEV, CTX, SM, GRID, CTA, WP, LN, MOD = (LOUSER + n for n in range(9, 17))
CB, META = LOUSER + 21, LOUSER + 22
TABLE_TYPES = (DEV, CTX, SM, GRID, CTA, WP, LN, MOD, BT, CB, META)
CUDA_TYPES = tuple(LOUSER + n for n in range(1, 24))


class NotApplicable(Exception):  # noqa: N818 - a verdict, not an error
    """The mutator has nothing to work on in this dump (the mutant is skipped)."""


@dataclass(frozen=True, slots=True)
class Mutant:
    """The bytes of a mutant file, and how to lay them out on disk."""

    data: bytes
    size: int = 0
    """File size when larger than `data`: a sparse hole follows `data` (no disk used)."""
    tail: bytes = b""
    """Bytes written at the very end of a sparse file."""
    compressed: bool = False
    """`data` is a gzip stream already (else a gzip fixture's mutant is compressed again)."""

    def write(self, path: Path) -> None:
        with open(path, "wb") as out:
            out.write(self.data)
            if self.size > len(self.data):
                out.truncate(self.size)
                if self.tail:
                    out.seek(self.size - len(self.tail))
                    out.write(self.tail)


@dataclass(frozen=True, slots=True)
class Seed:
    """A fixture dump, parsed once, that mutators start from."""

    name: str
    plain: bytes
    """The dump's bytes, decompressed when the fixture is gzip."""
    gzip: bytes | None
    """The fixture's own bytes when it is gzip-compressed."""
    elf: elf.Elf
    images: tuple[tuple[elf.Section, elf.Elf], ...] = field(default=())
    """Every (relocated or not) cubin image: its dump section and its own ELF."""

    @property
    def tables(self) -> list[elf.Section]:
        return [s for s in self.elf.sections if s.type in TABLE_TYPES and s.entsize and s.size]

    def of_type(self, *types: int) -> list[elf.Section]:
        return self.elf.of_type(*types)


Mutator = Callable[[Seed, random.Random], "bytes | bytearray | Mutant"]


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    function: Mutator
    weight: float
    """Relative frequency in a campaign (1 for most; the few costly ones less)."""


REGISTRY: dict[str, Entry] = {}


def mutator(weight: float = 1.0) -> Callable[[Mutator], Mutator]:
    """Register a mutator under its function's name."""

    def register(function: Mutator) -> Mutator:
        REGISTRY[function.__name__] = Entry(function.__name__, function, weight)
        return function

    return register


def mutators() -> dict[str, Entry]:
    """Every registered mutator, by name, in registration order."""
    from tests.fuzz import compressed, content, mutators  # noqa: F401 - they register

    return REGISTRY


def dump_names() -> list[str]:
    """Every fixture dump (plain and gzip), by file name."""
    return sorted(p.name for p in DUMPS.iterdir() if p.name.endswith((".nvcudmp", ".nvcudmp.gz")))


@cache
def load_seed(name: str) -> Seed:
    """The fixture `name` (a file name in fixtures/dumps, or a path), parsed."""
    path = Path(name) if "/" in name else DUMPS / name
    raw = path.read_bytes()
    packed = raw if raw[:2] == b"\x1f\x8b" else None
    plain = gzip.decompress(raw) if packed else raw
    parsed = elf.parse(plain)
    if parsed is None:
        raise ValueError(f"{name}: not an ELF file")
    images = []
    for section in parsed.of_type(RELF_IMG, ELF_IMG):
        image = elf.parse(plain, section.offset, section.end)
        if image is not None:
            images.append((section, image))
    return Seed(name, plain, packed, parsed, tuple(images))


def build(dump: str, name: str, seed: int) -> Mutant:
    """The mutant (dump, mutator, seed); raises NotApplicable when there is none."""
    source = load_seed(dump)
    rng = random.Random(f"{dump}|{name}|{seed}")
    made = mutators()[name].function(source, rng)
    mutant = made if isinstance(made, Mutant) else Mutant(bytes(made))
    if source.gzip is not None and not mutant.compressed and not mutant.size:
        mutant = Mutant(gzip.compress(mutant.data, compresslevel=1, mtime=0), compressed=True)
    return mutant


def interesting(rng: random.Random, original: int, width: int = 8, extra: list[int] = ()) -> int:
    """A value likely to break a reader: 0, 1, small, huge, off by one, halved or doubled,
    or one of `extra` (another table's value, the section's own index...)."""
    top = (1 << (8 * width)) - 1
    kind = rng.choice(("zero", "one", "small", "huge", "off", "scale", "extra", "extra"))
    if kind == "extra" and extra:
        return rng.choice(list(extra)) & top
    if kind == "zero":
        return 0
    if kind == "one":
        return 1
    if kind == "small":
        return rng.randint(2, 64)
    if kind == "off":
        return (original + rng.choice((-1, 1))) & top
    if kind == "scale":
        return rng.choice((original * 2, original // 2, original * 3 // 2)) & top
    huge = (top, top - 1, top >> 1, (top >> 1) + 1, 2**32 - 1, 2**31, 2**32, 2**40, 2**48)
    return rng.choice(huge) & top


def random_span(rng: random.Random, start: int, size: int) -> tuple[int, int]:
    """A random sub-range of [start, start + size): a few bytes, or a larger chunk."""
    if size <= 0:
        return start, 0
    length = min(size, rng.choice((1, 2, 4, 8, 16, 64, 256, size)))
    return start + rng.randrange(size - length + 1), length


def scribble(rng: random.Random, data: bytearray, start: int, size: int) -> None:
    """Overwrite a random span of [start, start + size) with zeros, 0xff or random bytes."""
    at, length = random_span(rng, start, min(size, len(data) - start))
    fill = rng.choice(("random", "zero", "ff", "flip"))
    for i in range(at, at + length):
        if fill == "random":
            data[i] = rng.randrange(256)
        elif fill == "zero":
            data[i] = 0
        elif fill == "ff":
            data[i] = 0xFF
        else:
            data[i] ^= 1 << rng.randrange(8)
