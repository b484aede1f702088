"""The cache's content fingerprint: tables count, memory and registers do not."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from postmortem.coredump import tables as t
from postmortem.coredump.elf import SHDR_DTYPE
from postmortem.scan.fingerprint import fingerprint
from tests.conftest import DUMPS

OOB = DUMPS / "oob_store.nvcudmp"


def _section_offset(data: bytes, section_type: int) -> int:
    shoff = int.from_bytes(data[0x28:0x30], "little")
    count = int.from_bytes(data[0x3C:0x3E], "little")
    headers = np.frombuffer(data, SHDR_DTYPE, count, shoff)
    index = int(np.flatnonzero(headers["type"] == section_type)[0])
    return int(headers["offset"][index])


def _variant(tmp_path, name, section_type):
    data = bytearray(OOB.read_bytes())
    data[_section_offset(bytes(data), section_type) + 4] ^= 0x01
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("one_read_below", [0, 1 << 30], ids=["table-by-table", "one-read"])
def test_tables_change_the_print_registers_do_not(tmp_path, one_read_below):
    table = _variant(tmp_path, "table", t.LN_TABLE)
    registers = _variant(tmp_path, "registers", t.DEV_REGS)
    base = fingerprint(OOB, one_read_below)
    assert fingerprint(table, one_read_below) != base
    assert fingerprint(registers, one_read_below) == base


def test_both_ways_of_reading_give_the_same_print():
    for dump in (OOB, DUMPS / "oob_store_extnum.nvcudmp", DUMPS / "oob_store_gzip.nvcudmp.gz"):
        assert fingerprint(dump, 0) == fingerprint(dump)


def test_broken_and_gzip_files_have_prints_too(tmp_path):
    cut = tmp_path / "cut"
    cut.write_bytes(OOB.read_bytes()[:4096])
    packed = tmp_path / "packed.gz"
    packed.write_bytes(gzip.compress(OOB.read_bytes()))
    prints = {fingerprint(p) for p in (cut, packed, OOB)}
    assert len(prints) == 3
