"""The HTML report of production dumps in headless Chromium on a phone (360 px), a laptop
(1,280 px) and paper: the page never scrolls sideways (a wide table or SASS listing scrolls in
its own box), names thousands of characters long stay collapsed in tables, and the page is as
tall as its content, not tens of thousands of pixels."""

from __future__ import annotations

import struct
from functools import cache

import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.report.context import build_report
from postmortem.report.render import render
from tests.tinydump import cubin
from tests.tooling import DUMPS, require_tool
from tests.tools.test_html_report import Page, require_browser

PRODUCTION = ("hang_fa3_busy", "cutlass_like", "triton_helper_fault", "two_devices_fault")
SCREENS = {"phone": 360, "laptop": 1280}
TALLEST = {360: 16_000, 1280: 8_000}
"""The tallest page, in CSS pixels, at each width (the largest fixture reports measure about
10,500 and 6,300; FlashAttention-3's hang 7,000 and 3,600)."""
PAPER = 794
"""An A4 page's width at 96 dpi, in CSS pixels."""
LONGEST_CELL = 400
"""The most characters a table cell shows: a long name is short there, whole one click away."""


@cache
def _page(name: str) -> str:
    require_tool("nvdisasm")
    options = AnalyzeOptions(LocalizeOptions(), cuda_gdb=False)
    return render("analyze", build_report(analyze_dump(DUMPS / f"{name}.nvcudmp", options)), "html")


@pytest.fixture(scope="module")
def browser():
    from tests.tools.browser import chromium

    with chromium(*require_browser()) as session:
        yield session


def _open(session, path, width: int, media: str = "") -> None:
    metrics = {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False}
    session.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    session.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": media})
    session.get(path.as_uri())
    assert session.execute_script("return document.readyState") == "complete"


_LAYOUT = """
    const root = document.documentElement;
    return {
      width: root.scrollWidth, viewport: window.innerWidth, height: root.scrollHeight,
      bare_tables: Array.from(document.querySelectorAll('table'))
        .filter(t => !t.closest('.table-wrap')).length,
      longest_cell: Math.max(0, ...Array.from(document.querySelectorAll('td'),
        td => td.innerText.length)),
    };
"""


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("name", PRODUCTION)
def test_the_page_fits_the_screen_and_keeps_names_short(browser, tmp_path, name, screen):
    # GIVEN the HTML report of a production dump
    width = SCREENS[screen]
    page = tmp_path / f"{name}.html"
    page.write_text(_page(name), encoding="utf-8")
    # WHEN it opens on the screen
    _open(browser, page, width)
    layout = browser.execute_script(_LAYOUT)
    # THEN the page does not scroll sideways: every table scrolls in its own box
    assert layout["viewport"] == width
    assert layout["width"] <= layout["viewport"], layout
    assert layout["bare_tables"] == 0
    # AND it is no taller than its content needs, and no cell shows a name whole
    assert layout["height"] <= TALLEST[width], layout
    assert layout["longest_cell"] <= LONGEST_CELL, layout
    # AND a screenshot of it is as wide as the screen
    shot = tmp_path / f"{name}-{width}.png"
    assert browser.save_screenshot(str(shot))
    assert _png_size(shot)[0] == width


@pytest.mark.parametrize("name", PRODUCTION)
def test_the_page_prints_on_a4_without_a_cut_edge(browser, tmp_path, name):
    # GIVEN the report laid out for print (the @media print rules: tables unscrolled, every
    # collapsed section shown)
    page = tmp_path / f"{name}.html"
    page.write_text(_page(name), encoding="utf-8")
    try:
        _open(browser, page, PAPER, "print")
        layout = browser.execute_script(_LAYOUT)
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    # THEN nothing runs past the paper's edge
    assert layout["width"] <= PAPER, layout


@pytest.mark.parametrize("name", PRODUCTION)
def test_the_page_stays_inert(name):
    # the small-screen rules are CSS only: the one script is the template's table sorter
    page = Page(_page(name))
    assert page.count("script") == 1
    assert not any(key.startswith("on") for _, attrs in page.tags for key in attrs)


def test_an_incident_page_of_many_ranks_fits_a_phone_and_paper(browser, tmp_path):
    # GIVEN the incident of 16 ranks faulting in sgl-kernel's CUTLASS GEMMs (3,000-character
    # headlines), as `analyze CORE...` writes it in HTML
    from postmortem.analysis.fleet.analyze import analyze_incident
    from postmortem.report.incident import build_incident_report
    from tests.tools.test_production_reports import T0, _fault_in

    corpus = "sgl_kernel-0.3.21.common_ops.150.sm_90a"
    kernel = cubin(f"corpus/{corpus}", "v8").kernels[0]["name"]
    paths = [
        _fault_in(corpus, kernel, tmp_path / f"core_node.{4000 + n}.{T0 + n}.nvcudmp", T0 + n)
        for n in range(16)
    ]
    options = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)
    page = tmp_path / "incident.html"
    incident = build_incident_report(analyze_incident(paths, options))
    page.write_text(render("incident", incident, "html"), encoding="utf-8")
    for width, media in ((SCREENS["phone"], ""), (PAPER, "print")):
        # WHEN it opens on a phone, and is laid out for print
        try:
            _open(browser, page, width, media)
            layout = browser.execute_script(_LAYOUT)
        finally:
            browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
        # THEN nothing runs past the edge, and each row's headline is short
        assert layout["width"] <= width, (media, layout)
        assert layout["longest_cell"] <= LONGEST_CELL, (media, layout)
    assert Page(page.read_text()).count("script") == 0
