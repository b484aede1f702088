"""The cache's content fingerprint: tables count, memory and registers do not."""

from __future__ import annotations

import gzip
import lzma
import sys

import numpy as np
import pytest

from postmortem.coredump import tables as t
from postmortem.elfcolumns import SECTION_DTYPE
from postmortem.scan.work.fingerprint import fingerprint
from tests.conftest import DUMPS

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

OOB = DUMPS / "oob_store.nvcudmp"


def _section_offset(data: bytes, section_type: int) -> int:
    shoff = int.from_bytes(data[0x28:0x30], "little")
    count = int.from_bytes(data[0x3C:0x3E], "little")
    headers = np.frombuffer(data, SECTION_DTYPE, count, shoff)
    index = int(np.flatnonzero(headers["type"] == section_type)[0])
    return int(headers["offset"][index])


def _variant(tmp_path, name, section_type):
    data = bytearray(OOB.read_bytes())
    data[_section_offset(bytes(data), section_type) + 4] ^= 0x01
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return path


def test_tables_change_the_print_registers_do_not(tmp_path):
    table = _variant(tmp_path, "table", t.LN_TABLE)
    registers = _variant(tmp_path, "registers", t.DEV_REGS)
    base = fingerprint(OOB)
    assert fingerprint(table) != base
    assert fingerprint(registers) == base


def _packed(tmp_path):
    data = OOB.read_bytes()
    files = []
    for suffix, compress in (("gz", gzip.compress), ("zst", zstd.compress), ("xz", lzma.compress)):
        files.append(tmp_path / f"packed.{suffix}")
        files[-1].write_bytes(compress(data))
    return files


def test_a_copy_has_the_print_of_its_original(tmp_path):
    dumps = [OOB, DUMPS / "oob_store_extnum.nvcudmp", DUMPS / "oob_store_gzip.nvcudmp.gz"]
    for dump in dumps + _packed(tmp_path):
        copy = tmp_path / f"copy-{dump.name}"
        copy.write_bytes(dump.read_bytes())
        assert fingerprint(copy) == fingerprint(dump)


def test_broken_and_compressed_files_have_prints_too(tmp_path):
    cut = tmp_path / "cut"
    cut.write_bytes(OOB.read_bytes()[:4096])
    prints = {fingerprint(p) for p in (cut, OOB, *_packed(tmp_path))}
    assert len(prints) == 5


@pytest.mark.parametrize("codec", ["zst", "xz"])
def test_zstd_and_xz_are_printed_by_their_edges_without_decompressing(tmp_path, codec):
    # GIVEN a stream that would decompress to 4 GiB (or would fail), 1 MiB of it stored
    magic = b"\x28\xb5\x2f\xfd" if codec == "zst" else b"\xfd7zXZ\x00"
    body = bytearray(magic + bytes(1 << 20))
    path = tmp_path / f"claims.{codec}"
    path.write_bytes(bytes(body))
    # WHEN its middle changes, the print stays; when its head or tail changes, it moves
    first = fingerprint(path)
    body[1 << 19] ^= 1
    path.write_bytes(bytes(body))
    assert fingerprint(path) == first
    body[100] ^= 1
    path.write_bytes(bytes(body))
    second = fingerprint(path)
    assert second != first
    body[-1] ^= 1
    path.write_bytes(bytes(body))
    assert fingerprint(path) != second


def test_a_profiler_holding_its_frames_does_not_keep_the_map_open():
    # GIVEN a profiler that keeps every frame it sees (a Dask worker's samples the stacks of
    # running tasks, and a frame it holds keeps its locals alive after the call returns)
    held = []

    def keep(frame, event, _arg):
        if event == "call":
            held.append(frame)

    # WHEN a dump is fingerprinted under it
    sys.setprofile(keep)
    try:
        digest = fingerprint(DUMPS / "oob_store.nvcudmp")
    finally:
        sys.setprofile(None)
    # THEN the map is closed all the same (no BufferError: no view of it was left alive),
    # and the digest is the one made without the profiler
    assert held and digest == fingerprint(DUMPS / "oob_store.nvcudmp")
