"""Mutators of compressed dumps (gzip, zstd, xz): cut, flipped, padded, and small streams
that inflate."""

from __future__ import annotations

import gzip
import lzma
import random
import struct
import sys
import zlib
from functools import cache

from tests.fuzz import elf
from tests.fuzz.mutant import Mutant, Seed, mutator

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

_GIB = 1 << 30


@cache
def _compressed(name: str, plain: bytes, packed: bytes | None) -> bytes:
    return packed if packed is not None else gzip.compress(plain, compresslevel=6, mtime=0)


def stream(seed: Seed) -> bytes:
    """The fixture's gzip stream (made with mtime 0 for a plain fixture)."""
    return _compressed(seed.name, seed.plain, seed.gzip)


@mutator()
def gzip_truncate(seed: Seed, rng: random.Random) -> Mutant:
    """The gzip stream cut: in its header, in the deflate data, in or before its trailer."""
    packed = stream(seed)
    size = len(packed)
    cut = rng.choice((0, 2, 3, 9, 10, size - 8, size - 4, size - 1, rng.randrange(size)))
    return Mutant(packed[: max(2, cut)], compressed=True)


@mutator()
def gzip_bitflip(seed: Seed, rng: random.Random) -> Mutant:
    """Bits of the gzip stream flipped: header, deflate data, CRC and length trailer."""
    packed = bytearray(stream(seed))
    size = len(packed)
    for _ in range(rng.choice((1, 1, 2, 8))):
        at = rng.choice((rng.randrange(2, 10), rng.randrange(size - 8, size), rng.randrange(size)))
        packed[at] ^= 1 << rng.randrange(8)
    return Mutant(bytes(packed), compressed=True)


@mutator()
def gzip_garbage(seed: Seed, rng: random.Random) -> Mutant:
    """Trailing garbage, extra members, header flags that promise fields not there."""
    packed = bytearray(stream(seed))
    how = rng.choice(("trailing", "zeros", "member", "cut_member", "flags", "method"))
    if how == "trailing":
        packed += bytes(rng.randrange(256) for _ in range(rng.choice((1, 7, 100))))
    elif how == "zeros":
        packed += bytes(rng.choice((1, 512, 4096)))
    elif how == "member":  # a second valid member: the dump with bytes appended
        packed += gzip.compress(bytes(rng.randrange(256) for _ in range(64)), mtime=0)
    elif how == "cut_member":
        packed += gzip.compress(seed.plain[:4096], mtime=0)[: rng.randrange(2, 40)]
    elif how == "flags":  # FHCRC 2, FEXTRA 4, FNAME 8, FCOMMENT 16, reserved 0xe0
        packed[3] = rng.choice((2, 4, 8, 16, 0x1E, 0x20, 0xE0, 0xFF))
    else:
        packed[2] = rng.choice((0, 7, 9, 0xFF))
    return Mutant(bytes(packed), compressed=True)


@cache
def _zeros_block() -> bytes:
    """Raw deflate of 1 MiB of zeros ending in a full flush: it can be repeated as is."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    compressor.compress(b"")
    compressor.flush(zlib.Z_FULL_FLUSH)
    return compressor.compress(bytes(1 << 20)) + compressor.flush(zlib.Z_FULL_FLUSH)


@mutator(weight=0.02)
def gzip_bomb(seed: Seed, rng: random.Random) -> Mutant:
    """A CUDA ELF header followed by gigabytes of zeros: about 1 MiB of gzip per GiB.

    The trailer's CRC is not that of the content (computing it would take seconds), or the
    trailer is missing: a reader finds out only at the end of the stream.
    """
    header = bytearray(seed.plain[:64])
    gib = rng.choice((1, 4, 16))
    total = 64 + gib * _GIB
    if rng.random() < 0.5:  # the section headers promised at the far end
        elf.put_ehdr(header, "e_shoff", total - 64 * max(seed.elf.count, 1))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = compressor.compress(bytes(header)) + compressor.flush(zlib.Z_FULL_FLUSH)
    body += _zeros_block() * (gib * 1024) + zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    trailer = b"" if rng.random() < 0.3 else struct.pack("<II", 0, total & 0xFFFFFFFF)
    head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return Mutant(head + body + trailer, compressed=True)


def _zstd(data: bytes) -> bytes:
    return zstd.compress(data, options={zstd.CompressionParameter.checksum_flag: 1})


@cache
def _other_stream(codec: str, name: str, plain: bytes) -> bytes:
    return _zstd(plain) if codec == "zstd" else lzma.compress(plain, preset=1)


@mutator()
def zstd_xz_damage(seed: Seed, rng: random.Random) -> Mutant:
    """The dump as a zstd (Spark RAPIDS' default) or xz stream, then cut, flipped or padded."""
    codec = rng.choice(("zstd", "xz"))
    packed = bytearray(_other_stream(codec, seed.name, seed.plain))
    size = len(packed)
    how = rng.choice(("cut", "flip", "flip", "trailing", "second"))
    if how == "cut":
        packed = packed[: rng.choice((1, 4, 6, 12, size // 2, size - 4, size - 1))]
    elif how == "flip":
        for _ in range(rng.choice((1, 2, 8))):
            at = rng.choice((rng.randrange(min(size, 16)), rng.randrange(size)))
            packed[at] ^= 1 << rng.randrange(8)
    elif how == "trailing":
        packed += bytes(rng.randrange(256) for _ in range(rng.choice((1, 12, 100))))
    else:  # a second frame or stream: more bytes after the whole dump
        packed += _zstd(b"\0" * 4096) if codec == "zstd" else lzma.compress(b"\0" * 4096)
    return Mutant(bytes(packed), compressed=True)


@cache
def _zstd_zeros_frame() -> bytes:
    """A zstd frame of 64 MiB of zeros: frames concatenate into one stream."""
    return zstd.compress(bytes(64 << 20))


@mutator(weight=0.02)
def zstd_bomb(seed: Seed, rng: random.Random) -> Mutant:
    """A CUDA ELF header then gigabytes of zeros, as concatenated zstd frames."""
    header = bytearray(seed.plain[:64])
    gib = rng.choice((1, 4))
    if rng.random() < 0.5:  # the section headers promised at the far end
        elf.put_ehdr(header, "e_shoff", 64 + gib * _GIB - 64 * max(seed.elf.count, 1))
    return Mutant(_zstd(bytes(header)) + _zstd_zeros_frame() * (gib * 16), compressed=True)
