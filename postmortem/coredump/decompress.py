"""Compressed dumps (gzip, zstd, xz) turned into a readable file, within a budget.

The driver writes gzip dumps itself (generation flag `gzip_compress`), Spark RAPIDS writes
zstd ones, and users xz theirs. A dump is decompressed as a stream, a chunk at a time, into
an unlinked temporary file, never whole into memory. The first chunk must start like a CUDA
coredump or the work stops there. The output is capped by a `Budget`: a multiple of the
compressed size (with a floor) or `POSTMORTEM_MAX_DECOMPRESSED`, and the free space of the
temporary directory less a reserve. Runs of zeros (the untouched memory of a full dump, or a
bomb) become holes in a sparse file, so they cost time but no disk. Where the format states
a size up front (a zstd frame header, the xz index, the dump's own ELF header), a dump that
must exceed the budget is refused before it is decompressed.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import mmap
import os
import re
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, cast

from postmortem.coredump.codec import XZ_MAGIC, Codec
from postmortem.elf import core_header_problem, described_end, section_table_end
from postmortem.errors import CompressedDumpError

if sys.version_info >= (3, 14):
    from compression.zstd import ZstdError, ZstdFile, get_frame_info
else:
    from backports.zstd import ZstdError, ZstdFile, get_frame_info

MAX_DECOMPRESSED_ENV = "POSTMORTEM_MAX_DECOMPRESSED"
"""Environment variable: the most bytes a compressed dump may decompress to (`K`, `M`, `G`
or `T` may follow, powers of 1024); it replaces the ratio and the floor below."""

# Lightweight dumps (tables and ELF images, no memory) compress 5-7x with gzip and 9-17x
# with xz (the fixture corpus). A dump whose memory is 90 % zero pages still stays under
# about 60x. Past 200x a dump is 95-98 % zeros: a bomb's signature, or a full dump of
# memory that was allocated and never touched (a pool), which the user can allow with
# MAX_DECOMPRESSED_ENV. Deflate itself cannot pass about 1032x, so a higher ratio would not
# limit gzip at all. The floor lets any small file grow to 512 MiB: about a second of
# inflating on a slow core (a 1 GiB gzip bomb took 2.5-4 s per command, past the 5 s budget
# on a loaded machine), and zeros cost no disk.
_RATIO = 200
_FLOOR_BYTES = 512 << 20
# Left free on the temporary directory's disk for everyone else: 1 GiB, or a tenth of a
# small disk (a 4 GiB tmpfs keeps 410 MiB).
_RESERVE_BYTES = 1 << 30
_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)
_MAX_XZ_INDEX = 1 << 20  # 100,000 blocks; xz -T6 makes one per 24 MiB
_TOOLS = {"gzip": "gzip -dk", "zstd": "zstd -d", "xz": "xz -dk"}
_DECODE_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, ZstdError)


@dataclass(slots=True)
class Budget:
    """The most bytes one dump may decompress to, and how far decompressing it got.

    `decompress_to_file` sets the counters from zero and leaves them as they were when it
    returned or failed, so a caller (or a test) can see what a refused dump cost.
    """

    limit_bytes: int
    """The most decompressed bytes allowed (the logical size of the output)."""
    source: str = "the limit given"
    """What set the limit, in words for the error message."""
    decompressed_bytes: int = 0
    """Bytes decompressed so far (the size of the temporary file)."""
    stored_bytes: int = 0
    """Bytes of those written to disk; runs of zeros became holes and are not counted."""

    @classmethod
    def for_dump(cls, compressed_bytes: int) -> Budget:
        """The default budget of a compressed file of `compressed_bytes` bytes.

        `POSTMORTEM_MAX_DECOMPRESSED`, when set, is the limit; otherwise it is 200 times
        the compressed size, and at least 512 MiB.

        Raises:
            ValueError: `POSTMORTEM_MAX_DECOMPRESSED` is not a number of bytes.
        """
        setting = os.environ.get(MAX_DECOMPRESSED_ENV, "").strip()
        if setting:
            return cls(_parse_bytes(setting), f"{MAX_DECOMPRESSED_ENV}={setting}")
        rule = (
            f"the default: {_RATIO} x its {_format_bytes(compressed_bytes)}, "
            f"at least {_format_bytes(_FLOOR_BYTES)}"
        )
        return cls(max(compressed_bytes * _RATIO, _FLOOR_BYTES), rule)


def open_decompressed_stream(
    path: Path, codec: Codec, raw: IO[bytes] | None = None
) -> io.BufferedIOBase:
    """A reader of the decompressed bytes of `path` (or of `raw`, the compressed bytes
    already opened), with no budget: read a bounded amount.

    Multi-member gzip, concatenated zstd frames and concatenated xz streams read as one, as
    the command-line tools do. Reading raises the codec's own exceptions (OSError,
    EOFError, zlib.error, lzma.LZMAError, ZstdError): prefer `read_decompressed_head` for
    the first bytes and `decompress_to_file` for the whole.

    Raises:
        OSError: The file cannot be opened.
    """
    source: IO[bytes] | Path = path if raw is None else raw
    if codec == "gzip":
        return gzip.GzipFile(path, "rb") if raw is None else gzip.GzipFile(fileobj=raw)
    if codec == "zstd":
        return ZstdFile(source, "rb")
    return lzma.LZMAFile(source, "rb", format=lzma.FORMAT_XZ)


def read_decompressed_head(path: Path, codec: Codec, size_bytes: int) -> bytes:
    """The first `size_bytes` decompressed bytes of `path` (fewer when it is shorter).

    Raises:
        CompressedDumpError: The file cannot be read, or its stream is corrupt or cut
            short within the first `size_bytes`.
    """
    try:
        with open_decompressed_stream(path, codec) as stream:
            return stream.read(size_bytes)
    except _DECODE_ERRORS as error:
        raise CompressedDumpError(path, _describe(error), codec) from None


def decompress_to_file(
    path: Path,
    codec: Codec,
    directory: str,
    *,
    budget: Budget | None = None,
    source: Callable[[], IO[bytes]] | None = None,
    compressed_bytes: int | None = None,
) -> BinaryIO:
    """Decompress `path` into an unlinked temporary file in `directory`, open for reading.

    The stream is read a chunk at a time and never held whole in memory. The first chunk
    must start like a CUDA coredump. The output may grow to `budget` (by default
    `Budget.for_dump`: 200 x the compressed size, at least 2 GiB, or
    `POSTMORTEM_MAX_DECOMPRESSED` bytes) and may store on disk the free space of
    `directory` less a reserve of 1 GiB (or a tenth of a small disk). To go past the
    budget with a file you trust, set `POSTMORTEM_MAX_DECOMPRESSED` (bytes; `64G` works),
    or decompress it yourself and pass the plain dump.

    Raises:
        CompressedDumpError: The file cannot be read, its stream is corrupt or cut short,
            what it holds is not a CUDA coredump, or it outgrows the budget or the disk.
            Nothing is left in `directory`.

    A dump that is not a local file (one in an object store) comes as `source`, which opens
    its compressed bytes as a stream, and `compressed_bytes`, its size.
    """
    try:
        if compressed_bytes is None:
            compressed_bytes = os.stat(path).st_size
        if budget is None:
            budget = Budget.for_dump(compressed_bytes)
        room_bytes = _room(directory)
    except (OSError, ValueError) as error:
        raise CompressedDumpError(path, _describe(error), codec) from None
    budget.decompressed_bytes = budget.stored_bytes = 0
    # A stream cannot seek to the xz index cheaply: remote dumps rely on the budget alone.
    hinted = None if source is not None else _find_size_hint(path, codec, compressed_bytes)
    if hinted is not None and hinted[0] > budget.limit_bytes:
        raise _over_budget(path, codec, budget, f"{hinted[1]} says {_format_bytes(hinted[0])}")
    out: BinaryIO | None = None
    try:
        out = cast(BinaryIO, tempfile.TemporaryFile(dir=directory))  # noqa: SIM115
        raw = None if source is None else source()
        with (
            contextlib.closing(raw) if raw is not None else contextlib.nullcontext(),
            open_decompressed_stream(path, codec, raw) as stream,
        ):
            _copy(path, codec, stream, out, budget, room_bytes)
        out.truncate(budget.decompressed_bytes)  # a trailing hole
        out.seek(0)
    except BaseException as error:
        if out is not None:
            out.close()
        if isinstance(error, OSError):  # opening the input, writing the output
            raise CompressedDumpError(path, _describe(error), codec) from None
        raise
    return out


def _copy(
    path: Path,
    codec: Codec,
    stream: io.BufferedIOBase,
    out: BinaryIO,
    budget: Budget,
    room_bytes: int,
) -> None:
    first = True
    table_end: int | None = None
    end: int | None = None
    while chunk := _read_chunk(path, codec, stream, budget):
        if first:
            _check_first_chunk(path, codec, chunk, budget)
            table_end = section_table_end(chunk)
            first = False
        if budget.decompressed_bytes + len(chunk) > budget.limit_bytes:
            raise _over_budget(path, codec, budget, "it grows past that")
        if chunk == _ZEROS:
            out.seek(len(chunk), os.SEEK_CUR)
        else:
            if budget.stored_bytes + len(chunk) > room_bytes:
                raise _out_of_room(path, codec, budget, room_bytes)
            out.write(chunk)
            budget.stored_bytes += len(chunk)
        budget.decompressed_bytes += len(chunk)
        if end is None and table_end is not None and budget.decompressed_bytes >= table_end:
            end = _dump_end(out, budget.decompressed_bytes)
        if end is not None and budget.decompressed_bytes >= end:
            break  # the dump is whole: what follows is no part of it (or a bomb)
    if first:
        _check_first_chunk(path, codec, b"", budget)


def _dump_end(out: BinaryIO, size: int) -> int:
    """Where the dump ends by its own section headers, now that they are decompressed: its
    last section's end (a header table of zeros, as a bomb behind a real ELF header has,
    ends it right there); what it is when they cannot be read (the reader says why)."""
    out.flush()
    out.truncate(size)  # the holes after the last write count too
    with mmap.mmap(out.fileno(), size, access=mmap.ACCESS_READ) as mapped:
        end = described_end(mapped, size)
    return size if end is None else end


def _read_chunk(path: Path, codec: Codec, stream: io.BufferedIOBase, budget: Budget) -> bytes:
    try:
        return stream.read(_CHUNK)
    except _DECODE_ERRORS as error:
        done = budget.decompressed_bytes
        where = f" (after {done} decompressed bytes)" if done else ""
        raise CompressedDumpError(path, _describe(error) + where, codec) from None


def _check_first_chunk(path: Path, codec: Codec, chunk: bytes, budget: Budget) -> None:
    problem = core_header_problem(chunk)
    if problem is not None:
        reason = f"the decompressed data is not a CUDA coredump: {problem}"
        raise CompressedDumpError(path, reason, codec)
    promised = section_table_end(chunk)
    if promised is not None and promised > budget.limit_bytes:
        reason = f"its ELF header puts section headers up to byte {promised}"
        raise _over_budget(path, codec, budget, reason)


def _over_budget(path: Path, codec: Codec, budget: Budget, evidence: str) -> CompressedDumpError:
    reason = (
        f"refused: the decompressed dump may be at most {_format_bytes(budget.limit_bytes)} "
        f"({budget.source}), and {evidence}"
    )
    hint = (
        f"if you trust the file, set {MAX_DECOMPRESSED_ENV} to a larger number of bytes "
        f"(e.g. 64G), or decompress it yourself ({_TOOLS[codec]} {path.name})"
    )
    return CompressedDumpError(path, reason, codec, hint)


def _out_of_room(path: Path, codec: Codec, budget: Budget, room_bytes: int) -> CompressedDumpError:
    reason = (
        f"refused after {budget.decompressed_bytes} decompressed bytes: the temporary "
        f"directory's disk has {_format_bytes(max(room_bytes, 0))} to spare"
    )
    hint = (
        "point TMPDIR at a disk with more room, or decompress it yourself onto one "
        f"({_TOOLS[codec]} {path.name})"
    )
    return CompressedDumpError(path, reason, codec, hint)


def _room(directory: str) -> int:
    usage = shutil.disk_usage(directory)
    return usage.free - min(_RESERVE_BYTES, usage.total // 10)


def _find_size_hint(path: Path, codec: Codec, compressed_bytes: int) -> tuple[int, str] | None:
    # A lower bound of the decompressed size the format states, and where it says so; None
    # when it states none or cannot be read (the decompressor then reports the damage).
    # gzip's ISIZE is not used: it is the size mod 2**32, and in a truncated file (the usual
    # damage) the last four bytes are compressed data, so it would refuse cut dumps as
    # "too large" instead of saying they are cut; with the budget above it could only
    # ever matter for files of 2-21 MiB anyway.
    try:
        with open(path, "rb") as file:
            if codec == "zstd":
                # Written when the compressor knew the size (the zstd tool on a file), not
                # by streaming writers; a later frame only adds to it.
                content = get_frame_info(file.read(18)).decompressed_size
                return None if content is None else (content, "the first zstd frame header")
            if codec == "xz":
                indexed = _xz_index_size(file, compressed_bytes)
                return None if indexed is None else (indexed, "the xz index")
    except (OSError, ZstdError, ValueError):
        return None
    return None


def _xz_index_size(file: BinaryIO, end: int) -> int | None:
    # The sum of the uncompressed sizes in the index of every stream, read from the last
    # stream back (xz file format 1.2.1, sections 2.1.2 and 4). Stream padding is not
    # handled: such a file has no hint.
    total = 0
    while end > 0:
        if end < 24:
            return None
        file.seek(end - 12)
        footer = file.read(12)
        index_bytes = (int.from_bytes(footer[4:8], "little") + 1) * 4
        if footer[10:] != b"YZ" or index_bytes > min(_MAX_XZ_INDEX, end - 24):
            return None
        file.seek(end - 12 - index_bytes)
        index = file.read(index_bytes)
        if index[:1] != b"\x00":
            return None
        count, at = _varint(index, 1)
        blocks_bytes = 0
        for _ in range(count):
            unpadded, at = _varint(index, at)
            uncompressed, at = _varint(index, at)
            blocks_bytes += (unpadded + 3) & ~3
            total += uncompressed
        end -= 12 + index_bytes + blocks_bytes + 12
        if end < 0:
            return None
        file.seek(end)
        if file.read(6) != XZ_MAGIC:
            return None
    return total


def _varint(data: bytes, at: int) -> tuple[int, int]:
    # xz's multibyte integer: 7 bits a byte, low first, at most 9 bytes.
    value = 0
    for shift in range(0, 63, 7):
        if at >= len(data):
            raise ValueError("xz index cut short")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
    raise ValueError("xz index integer too long")


def _parse_bytes(text: str) -> int:
    match = re.fullmatch(r"(\d+)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if match is None:
        raise ValueError(f"{MAX_DECOMPRESSED_ENV}={text!r} is not a number of bytes (e.g. 64G)")
    return int(match[1]) << (10 * " KMGT".index(match[2].upper() or " "))


def _format_bytes(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _describe(error: BaseException) -> str:
    if isinstance(error, EOFError):  # the same words from all three decompressors
        return "the file is cut short: its compressed data ends before the end-of-stream mark"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
