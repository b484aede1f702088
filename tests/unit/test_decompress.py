"""Compressed dumps: each codec round-trips, damage and bombs become CompressedDumpError."""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import struct
import sys
import zlib
from types import SimpleNamespace

import pytest

from postmortem.coredump.codec import sniff_codec
from postmortem.coredump.decompress import (
    MAX_DECOMPRESSED_ENV,
    Budget,
    decompress_to_file,
    read_decompressed_head,
)
from postmortem.elf import core_header_problem
from postmortem.errors import CompressedDumpError, PostmortemError
from tests.conftest import DUMPS

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

OOB = DUMPS / "oob_store.nvcudmp"
CODECS = ["gzip", "zstd", "xz"]
MIB = 1 << 20


def _compress(codec, data):
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "zstd":  # with a checksum, as the zstd tool writes by default
        return zstd.compress(data, options={zstd.CompressionParameter.checksum_flag: 1})
    return lzma.compress(data)


def _streaming_compressor(codec):
    # Streamed: no size in the zstd frame header, as Spark RAPIDS writes them.
    if codec == "gzip":
        return zlib.compressobj(1, zlib.DEFLATED, 31)
    if codec == "zstd":
        return zstd.ZstdCompressor(level=1)
    return lzma.LZMACompressor(preset=0)


def _described(size):
    """A CUDA core's ELF header whose section headers (right after it) describe one section
    of `size` bytes that follows them: the dump is whole only with all `size` bytes."""
    header = bytearray(OOB.read_bytes()[:64])
    struct.pack_into("<Q", header, 0x28, 64)  # e_shoff
    struct.pack_into("<HH", header, 0x3C, 2, 0)  # e_shnum, e_shstrndx
    section = struct.pack("<IIQQQQIIQQ", 0, 1, 0, 0, 192, size, 0, 0, 1, 0)
    return bytes(header) + bytes(64) + section


def _bomb(codec, head, zero_mib):
    """`head` then `zero_mib` MiB of zeros, compressed a MiB at a time."""
    compressor = _streaming_compressor(codec)
    parts = [compressor.compress(head)]
    zeros = bytes(MIB)
    parts += [compressor.compress(zeros) for _ in range(zero_mib)]
    parts.append(compressor.flush())
    return b"".join(parts)


@pytest.fixture
def workdir(tmp_path):
    """Where the compressed files go, and an empty directory for the temporary file."""
    temp = tmp_path / "temp"
    temp.mkdir()
    return tmp_path, temp


def _refusal(path, codec, temp, budget=None):
    with pytest.raises(CompressedDumpError) as caught:
        decompress_to_file(path, codec, str(temp), budget=budget)
    error = caught.value
    assert os.listdir(temp) == []
    assert error.codec == codec
    assert "\n" not in str(error)
    assert str(error).startswith(f"{path}: cannot decompress {codec} dump: ")
    return error


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_round_trips_a_real_dump(workdir, codec):
    tmp_path, temp = workdir
    data = OOB.read_bytes()
    packed = tmp_path / f"oob.{codec}"
    packed.write_bytes(_compress(codec, data))
    assert sniff_codec(packed.read_bytes()[:6]) == codec
    assert read_decompressed_head(packed, codec, 20) == data[:20]
    budget = Budget(1 << 30)
    with decompress_to_file(packed, codec, str(temp), budget=budget) as out:
        assert os.listdir(temp) == []  # unlinked from the start
        assert out.read() == data
        assert os.fstat(out.fileno()).st_size == len(data)
    assert budget.decompressed_bytes == budget.stored_bytes == len(data)


@pytest.mark.parametrize("codec", CODECS)
def test_concatenated_streams_read_as_one_like_the_tools(workdir, codec):
    tmp_path, temp = workdir
    data = OOB.read_bytes()
    packed = tmp_path / f"twice.{codec}"
    packed.write_bytes(_compress(codec, data[:1000]) + _compress(codec, data[1000:]))
    with decompress_to_file(packed, codec, str(temp)) as out:
        assert out.read() == data


def test_zstd_behind_a_skippable_frame_is_recognized(workdir):
    # pzstd writes a skippable frame before each frame
    tmp_path, temp = workdir
    data = OOB.read_bytes()
    packed = tmp_path / "oob.zst"
    packed.write_bytes(
        b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"size" + zstd.compress(data)
    )
    assert sniff_codec(packed.read_bytes()) == "zstd"
    with decompress_to_file(packed, "zstd", str(temp)) as out:
        assert out.read() == data


def test_codec_magic():
    assert sniff_codec(b"\x1f\x8b\x08\x00\x00\x00") == "gzip"
    assert sniff_codec(b"\x28\xb5\x2f\xfd\x00\x00") == "zstd"
    assert sniff_codec(b"\xfd7zXZ\x00") == "xz"
    assert sniff_codec(b"\xfd7zXZ") is None  # cut before the whole magic
    assert sniff_codec(OOB.read_bytes()[:6]) is None
    assert sniff_codec(b"") is None


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("keep", [0.5, 0.99, 10], ids=["half", "tail-cut", "header-only"])
def test_truncated_stream_is_a_compressed_dump_error(workdir, codec, keep):
    tmp_path, temp = workdir
    packed_bytes = _compress(codec, OOB.read_bytes())
    cut = tmp_path / f"cut.{codec}"
    cut.write_bytes(packed_bytes[: int(len(packed_bytes) * keep) if keep < 1 else keep])
    error = _refusal(cut, codec, temp)
    assert "cut short" in error.reason
    with pytest.raises(CompressedDumpError):
        read_decompressed_head(cut, codec, 1 << 30)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("where", [0.3, 0.6, 0.95])
def test_corrupted_stream_is_a_compressed_dump_error(workdir, codec, where):
    tmp_path, temp = workdir
    damaged = bytearray(_compress(codec, OOB.read_bytes()))
    at = int(len(damaged) * where)
    damaged[at : at + 4] = bytes(b ^ 0x5A for b in damaged[at : at + 4])
    path = tmp_path / f"damaged.{codec}"
    path.write_bytes(bytes(damaged))
    _refusal(path, codec, temp)


@pytest.mark.parametrize("codec", ["gzip", "zstd"])  # Python's lzma ignores it, intact data
def test_trailing_garbage_is_a_compressed_dump_error(workdir, codec):
    tmp_path, temp = workdir
    path = tmp_path / f"garbage.{codec}"
    path.write_bytes(_compress(codec, OOB.read_bytes()) + b"not compressed data")
    _refusal(path, codec, temp)


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_stops_at_the_budget_and_its_zeros_take_no_disk(workdir, codec):
    # GIVEN a valid CUDA core header followed by 64 MiB of zeros, and an 8 MiB budget
    tmp_path, temp = workdir
    bomb = tmp_path / f"bomb.{codec}"
    # (xz: stream padding after it hides its index, which would refuse it before starting)
    bomb.write_bytes(_bomb(codec, _described(64 * MIB), 64) + (b"\0" * 4 if codec == "xz" else b""))
    budget = Budget(8 * MIB, "a test limit")
    # WHEN it is decompressed
    error = _refusal(bomb, codec, temp, budget)
    # THEN it stops at the limit, and only the chunk with the header reached the disk
    assert 7 * MIB <= budget.decompressed_bytes <= 8 * MIB
    assert budget.stored_bytes == MIB
    assert "at most 8.0 MiB (a test limit)" in error.reason
    assert MAX_DECOMPRESSED_ENV in error.hint


def test_the_default_budget_stops_a_bomb_past_the_floor(workdir, monkeypatch):
    # 64 KiB of zstd holding 512 MiB and 1 MiB: past the 512 MiB floor, and 200x is far below
    monkeypatch.delenv(MAX_DECOMPRESSED_ENV, raising=False)
    tmp_path, temp = workdir
    bomb = tmp_path / "bomb.zst"
    bomb.write_bytes(_bomb("zstd", _described(513 * MIB), 513))
    assert bomb.stat().st_size < 100_000
    budget = Budget.for_dump(bomb.stat().st_size)
    error = _refusal(bomb, "zstd", temp, budget)
    assert budget.decompressed_bytes <= 512 * MIB
    assert budget.stored_bytes == MIB
    assert "at most 512.0 MiB (the default: 200 x its" in error.reason
    assert "zstd -d bomb.zst" in error.hint


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"A" * (4 * MIB), "no ELF magic (it starts with 41 41 41 41)"),
        (b"", "it is empty"),
        (b"\x7fELF\x02\x01", "it is only 6 bytes long"),
        (None, "ELF e_type 4, e_machine 62, expected 4 and 190"),
    ],
    ids=["text", "empty", "short", "host-core"],
)
def test_data_that_is_no_cuda_dump_is_refused_after_the_first_chunk(workdir, codec, data, problem):
    tmp_path, temp = workdir
    if data is None:  # an x86-64 core file
        head = bytearray(OOB.read_bytes())
        head[18:20] = (62).to_bytes(2, "little")
        data = bytes(head)
    path = tmp_path / f"other.{codec}"
    path.write_bytes(_compress(codec, data))
    budget = Budget(1 << 30)
    error = _refusal(path, codec, temp, budget)
    assert error.reason == f"the decompressed data is not a CUDA coredump: {problem}"
    assert budget.decompressed_bytes == budget.stored_bytes == 0


def test_header_check():
    head = OOB.read_bytes()[:64]
    assert core_header_problem(head) is None
    big_endian = head[:5] + b"\x02" + head[6:]
    assert core_header_problem(big_endian) == "ELF class 2, data encoding 2, expected 2 and 1"


def _two_xz_streams(data):
    return lzma.compress(data[:40_000]) + lzma.compress(data[40_000:])


@pytest.mark.parametrize(
    ("codec", "compress", "evidence"),
    [
        ("zstd", zstd.compress, "the first zstd frame header says 87.4 KiB"),
        ("xz", _two_xz_streams, "the xz index says 87.4 KiB"),
        ("gzip", gzip.compress, "its ELF header puts section headers up to byte 89448"),
    ],
    ids=["zstd-frame-header", "xz-index-of-two-streams", "elf-header"],
)  # fmt: skip
def test_a_stated_size_over_the_budget_is_refused_before_decompressing(
    workdir, codec, compress, evidence
):
    tmp_path, temp = workdir
    path = tmp_path / f"oob.{codec}"
    path.write_bytes(compress(OOB.read_bytes()))
    budget = Budget(60_000, "a test limit")
    error = _refusal(path, codec, temp, budget)
    assert error.reason.endswith(evidence)
    assert budget.decompressed_bytes == budget.stored_bytes == 0


def test_a_truncated_gzip_is_called_cut_not_too_large(workdir):
    # its last four bytes are compressed data, not the size trailer
    tmp_path, temp = workdir
    data = _described(8 * MIB + 2000) + os.urandom(8 * MIB + 2000)
    packed = gzip.compress(data)
    cut = tmp_path / "cut.gz"
    cut.write_bytes(packed[: len(packed) - 1000])
    error = _refusal(cut, "gzip", temp, Budget(10 * MIB))
    assert error.reason.startswith("the file is cut short")
    assert error.reason.endswith("(after 8388608 decompressed bytes)")


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_behind_a_real_header_stops_where_the_dump_ends(workdir, codec):
    # GIVEN a real dump's ELF header, then 64 MiB of zeros: its section header table (at
    # e_shoff, inside the zeros) is all zeros, so the dump it describes ends right there
    tmp_path, temp = workdir
    bomb = tmp_path / f"bomb.{codec}"
    bomb.write_bytes(_bomb(codec, OOB.read_bytes()[:64], 64))
    budget = Budget(1 << 30, "a test limit")
    # WHEN it is decompressed THEN the rest is never decompressed
    with decompress_to_file(bomb, codec, str(temp), budget=budget) as out:
        assert budget.decompressed_bytes <= 2 * MIB
        assert out.read(4) == b"\x7fELF"


def test_bytes_past_the_end_the_headers_describe_are_left_out(workdir):
    tmp_path, temp = workdir
    data = OOB.read_bytes()
    packed = tmp_path / "tail.zst"
    packed.write_bytes(_compress("zstd", data + os.urandom(3 * MIB)))
    with decompress_to_file(packed, "zstd", str(temp)) as out:
        whole = out.read()
    # one chunk (1 MiB) at most is read past the end the dump's headers describe
    assert whole[: len(data)] == data and len(whole) <= len(data) + MIB


def test_the_disk_room_is_a_limit_too(workdir, monkeypatch):
    tmp_path, temp = workdir
    data = _described(4 * MIB) + os.urandom(4 * MIB)
    path = tmp_path / "big.zst"
    path.write_bytes(zstd.compress(data, 1))
    total = 100 * MIB
    free = 2 * MIB + total // 10  # 2 MiB to spare above the reserve (a tenth of the disk)
    usage = SimpleNamespace(total=total, used=total - free, free=free)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage)
    budget = Budget(1 << 30)
    error = _refusal(path, "zstd", temp, budget)
    assert budget.stored_bytes <= 2 * MIB
    assert "the temporary directory's disk has 2.0 MiB to spare" in error.reason
    assert "TMPDIR" in error.hint


def test_the_default_budget_and_its_environment_variable(monkeypatch):
    monkeypatch.delenv(MAX_DECOMPRESSED_ENV, raising=False)
    assert Budget.for_dump(MIB).limit_bytes == 512 * MIB
    assert Budget.for_dump(100 * MIB).limit_bytes == 20_000 * MIB
    monkeypatch.setenv(MAX_DECOMPRESSED_ENV, "64G")
    assert Budget.for_dump(MIB).limit_bytes == 64 << 30
    assert Budget.for_dump(MIB).source == f"{MAX_DECOMPRESSED_ENV}=64G"
    monkeypatch.setenv(MAX_DECOMPRESSED_ENV, "123456")
    assert Budget.for_dump(MIB).limit_bytes == 123456
    monkeypatch.setenv(MAX_DECOMPRESSED_ENV, "lots")
    with pytest.raises(ValueError, match="not a number of bytes"):
        Budget.for_dump(MIB)


def test_a_bad_environment_variable_is_a_compressed_dump_error(workdir, monkeypatch):
    tmp_path, temp = workdir
    path = tmp_path / "oob.gz"
    path.write_bytes(gzip.compress(OOB.read_bytes()))
    monkeypatch.setenv(MAX_DECOMPRESSED_ENV, "-1")
    error = _refusal(path, "gzip", temp)
    assert MAX_DECOMPRESSED_ENV in error.reason


def test_the_error_names_its_codec_and_stays_a_postmortem_error(tmp_path):
    legacy = CompressedDumpError(tmp_path / "a.gz", "bad")
    assert str(legacy) == f"{tmp_path / 'a.gz'}: cannot decompress gzip dump: bad"
    assert legacy.hint is None
    error = CompressedDumpError(tmp_path / "a.zst", "bad", "zstd", "try this")
    assert isinstance(error, PostmortemError)
    assert str(error).endswith("cannot decompress zstd dump: bad")
    assert error.hint == "try this"


def test_a_missing_file_is_a_compressed_dump_error(workdir):
    tmp_path, temp = workdir
    error = _refusal(tmp_path / "gone.xz", "xz", temp)
    assert error.reason == "No such file or directory"
