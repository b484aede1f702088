"""One `render(kind, data, format)` lays out every command's output from its view model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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


def _render_in_a_process(cache_home: str) -> subprocess.CompletedProcess[str]:
    code = (
        "from postmortem.report.render import render\nprint(render('extract', [], 'text') + 'ok')\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": cache_home}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_compiled_templates_are_kept_for_the_next_run(tmp_path):
    first = _render_in_a_process(str(tmp_path))
    kept = list((tmp_path / "postmortem").glob("templates-*/*"))
    second = _render_in_a_process(str(tmp_path))
    assert first.returncode == second.returncode == 0
    assert kept and first.stdout == second.stdout


def test_a_cache_that_cannot_be_written_costs_nothing_but_time(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    result = _render_in_a_process(str(blocked))
    assert result.returncode == 0 and result.stdout.endswith("ok\n"), result.stderr


def test_the_command_line_offers_the_formats_the_renderer_has():
    # The command line lists them without importing jinja2 (report/formats.py).
    from postmortem.report.formats import ANALYZE_FORMATS, SCAN_FORMATS

    assert set(ANALYZE_FORMATS) == set(formats("analyze"))
    assert set(SCAN_FORMATS) == set(formats("scan"))
