"""The text of `postmortem info`, laid out in Python (report/info_text.py): the layout it
had as a template, every value escaped, a fact the dump does not hold shown as `?`."""

from __future__ import annotations

import copy

from postmortem.coredump import open_coredump
from postmortem.report.info import build_info
from postmortem.report.render import render
from postmortem.summary import summarize
from tests.conftest import DUMPS

EXPECTED = """\
fixtures/dumps/oob_store.nvcudmp: CUDA coredump, 87.4 KiB
faults at 1 PC: 5 lanes in 1 warp
  Warp Illegal Address (14) at pc 0x7f3c2a0000d0 = oob_kernel(float*, int, float)+0xd0
    5 lanes; first: block (5,0,0), thread (67,0,0), device 0, sm 3, warp 2, lane 3, grid 7

devices: 1
  0: NVIDIA H100 80GB HBM3 (GH100, sm_90), 132 SMs x 64 warps x 32 lanes, pci 18:00
  captured: 132 SMs, 3 CTAs, 7 warps, 208 lanes
grids: 1
  grid 7 on device 0: oob_kernel(float*, int, float)<<<(64,1,1),(256,1,1)>>>, 10 registers
modules: 1
  0x56123a400000 (context 0x561239f00000, ELF ABI v7, 4.6 KiB): oob_kernel(float*, int, float)
format: ELF ABI v7, 582 sections, rows in the r400 layout
  optional sections present: parameter memory 1, uniform registers 7, uniform predicates 7
  absent: non-relocated image, global memory, managed memory, shared memory, local memory, \
backtrace, constbank table, metadata, convergence barriers
"""


def _view_model():
    with open_coredump(DUMPS / "oob_store.nvcudmp") as core:
        data = build_info(summarize(core))
    data["path"] = "fixtures/dumps/oob_store.nvcudmp"
    return data


def test_the_layout_is_the_one_users_know():
    assert render("info", _view_model(), "text") == EXPECTED


def test_facts_the_dump_does_not_hold_show_as_a_question_mark():
    # GIVEN short rows: no z coordinate, no device index, no register count, no ABI version
    data = copy.deepcopy(_view_model())
    first = data["fault_summary"]["groups"][0]["first"]
    first["thread_idx"][2] = None
    first["device_index"] = None
    data["launches"][0]["grid"]["num_regs"] = None
    data["launches"][0]["grid"]["block_dim"] = None
    data["modules"][0]["abi_version"] = None
    # WHEN laid out
    text = render("info", data, "text")
    # THEN each shows as `?`, never as None
    assert "None" not in text
    assert "thread (67,0,?), device ?, sm 3" in text
    assert "<<<(64,1,1),(?)>>>, ? registers" in text
    assert "ELF ABI v?, 4.6 KiB" in text


def test_names_from_the_dump_cannot_forge_lines_or_move_the_terminal():
    # GIVEN a device name and a fault source holding a newline and an escape sequence
    data = copy.deepcopy(_view_model())
    data["devices"][0]["name"] = "GPU\x1b[2J\nerror: forged"
    data["fault_summary"]["groups"][0]["first"]["source"] = "lane\x1b]0;t\x07"
    text = render("info", data, "text")
    # THEN they are shown escaped, once, and the line count is unchanged
    assert "\x1b" not in text and "\x07" not in text
    assert "GPU\\x1b[2J\\nerror: forged" in text
    assert "5 lane\\x1b]0;t\\x07s; first:" in text
    assert len(text.splitlines()) == len(EXPECTED.splitlines())
