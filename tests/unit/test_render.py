"""One `render(kind, data, format)` lays out every command's output from its view model."""

from __future__ import annotations

import json

import pytest

from postmortem.report.render import formats, render

CUBIN = {
    "file": "dev0.ctx1.mod2.k.relocated.cubin", "size_bytes": 4736, "abi_version": 7,
    "sm_arch": 90, "device_index": 0, "module_handle": 0x2a,
    "functions": [
        {"symbol_index": 7, "is_kernel": True, "demangled": "k(float*)", "faulted": True},
        {"symbol_index": 8, "is_kernel": False, "demangled": "helper()", "faulted": False},
    ],
}  # fmt: skip


def test_every_kind_renders_json_and_text():
    for kind in ("analyze", "info", "extract", "scan"):
        assert formats(kind)[0] == "text" and formats(kind)[-1] == "json"


def test_the_extract_index_marks_the_faulting_function():
    text = render("extract", [CUBIN], "text")
    assert text.splitlines() == [
        "dev0.ctx1.mod2.k.relocated.cubin: 4736 bytes, ELF ABI v7, sm_90, device 0, module 0x2a",
        "  [7] kernel k(float*)  <-- faulted",
        "  [8] device function helper()",
    ]


def test_unknown_facts_show_as_a_question_mark_never_none():
    cubin = CUBIN | {"device_index": None, "module_handle": None, "sm_arch": None}
    first = render("extract", [cubin], "text").splitlines()[0]
    assert first.endswith("unknown arch, device ?, module ?")


def test_text_output_shows_control_characters_escaped():
    hostile = CUBIN | {"functions": [CUBIN["functions"][0] | {"demangled": "k\x1b[2J\nerror: x"}]}
    text = render("extract", [hostile], "text")
    assert "\x1b" not in text and "k\\x1b[2J\\nerror: x" in text
    assert len(text.splitlines()) == 2


def test_json_is_the_view_model_itself_with_sorted_keys():
    assert json.loads(render("extract", [CUBIN], "json")) == [CUBIN]
    assert render("extract", [CUBIN], "json").endswith("\n")


def test_a_scan_index_in_json_is_one_object_a_line():
    index = {
        "summary": {"type": "scan"}, "dumps": [{"type": "dump", "path": "a"}],
        "groups": [{"type": "group", "id": "g"}], "coarse": [], "errors": [],
    }  # fmt: skip
    lines = render("scan", index, "json").splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["scan", "dump", "group"]


def test_a_format_a_kind_lacks_is_refused():
    assert "html" not in formats("info")
    with pytest.raises(ValueError, match="info output has no html format"):
        render("info", {}, "html")
