"""The HTML report in a real browser (headless Chromium) and under a strict HTML parser.

The page must render with no console error and no network request, put the verdict first,
let long tables be sorted, print cleanly, and show names from a dump (`html::render<
html::script, html::img, &html::onerror>`) as text, never as elements.
"""

from __future__ import annotations

import copy
import html
import re
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fault.source import SourcePaths
from postmortem.report.context import build_report
from postmortem.report.render import render
from tests.conftest import DUMPS, FIXTURES, dump_paths
from tests.tooling import in_ci, require_tool
from tests.tools.browser import find_browser

BROWSER_DUMPS = (
    "oob_store",
    "cutlass_like",
    "hostile_names",
    "hang_barrier",
    "two_devices",
    "oob_store_nolineinfo",
)
HOSTILE_NAME = "html::render<html::script, html::img, &html::onerror>"
# Every element the template writes; anything else in a page came from a dump.
TEMPLATE_TAGS = {
    *("html", "head", "meta", "link", "title", "style", "script", "body", "main", "footer"),
    *("header", "nav", "section", "article", "details", "summary", "div", "p", "span", "a"),
    *("h1", "h2", "h3", "strong", "code", "pre", "dl", "dt", "dd", "ol", "ul", "li", "button"),
    *("table", "thead", "tbody", "tr", "th", "td"),
}


def report_of(dump: Path, *, cuda_gdb: bool = True) -> dict[str, Any]:
    """The report as `postmortem analyze --source-dir fixtures/cu` builds it (once per dump)."""
    return _analyzed(dump, cuda_gdb)[0]


def page_of(dump: Path, *, cuda_gdb: bool = True) -> str:
    return _analyzed(dump, cuda_gdb)[1]


@cache
def _analyzed(dump: Path, cuda_gdb: bool) -> tuple[dict[str, Any], str]:
    options = AnalyzeOptions(
        LocalizeOptions(sources=SourcePaths((FIXTURES / "cu",))), cuda_gdb=cuda_gdb
    )
    report = build_report(analyze_dump(dump, options))
    return report, render("analyze", report, "html")


def dump_named(name: str) -> Path:
    return DUMPS / f"{name}.nvcudmp"


class Page(HTMLParser):
    """Every element, attribute and visible text run of a page, as a browser's parser sees them."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._texts: list[str] = []
        self._inside: list[str] = []
        self.feed(source)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._texts.append(" ")  # cells and blocks are separate words; words never span tags
        if tag in ("script", "style", "title"):
            self._inside.append(tag)

    def handle_endtag(self, tag: str) -> None:
        self._texts.append(" ")
        if self._inside and self._inside[-1] == tag:
            self._inside.pop()

    def handle_data(self, data: str) -> None:
        if not self._inside:
            self._texts.append(data)
        elif self._inside[-1] == "script":
            self.scripts[-1:] = [(self.scripts[-1] if self.scripts else "") + data]

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    @property
    def text(self) -> str:
        return " ".join("".join(self._texts).split())

    def count(self, tag: str) -> int:
        return sum(1 for name, _ in self.tags if name == tag)


def words(text: str) -> str:
    return " ".join(text.split())


def verdict_texts(report: dict[str, Any]) -> list[str]:
    """What the top of the page must say, taken from the report data itself."""
    if not report["sites"]:
        return [report["verdict"]["headline"]]
    site = report["sites"][0]
    texts = [site["exception"]["name"], f"exception {site['exception']['code']}"]
    texts += [site["function"]["demangled"], site["location"], site["error_pc_hex"]]
    if site["instruction"]:
        texts.append(site["instruction"]["text"])
    forensics = site["forensics"]
    if forensics and forensics["lanes"] and forensics["lanes"][0]["address_hex"]:
        texts.append(forensics["lanes"][0]["address_hex"])
        if forensics["arguments"] and forensics["arguments"]["attribution"]:
            texts.append(forensics["arguments"]["attribution"])
    return texts


def title_of(source: str) -> str:
    """The page's <title>, as the browser shows it."""
    match = re.search(r"<title>(.*?)</title>", source, re.DOTALL)
    assert match, "the page has no title"
    return html.unescape(match.group(1))


def verdict_of(source: str) -> str:
    """The visible text of the verdict box at the top of the page."""
    start = source.index('<header class="verdict')
    return Page(source[start : source.index("</header>", start) + len("</header>")]).text


# ---------------------------------------------------------------- without a browser


@pytest.mark.parametrize("dump", dump_paths(), ids=lambda p: p.name)
def test_every_fixture_dump_renders_a_page_that_opens_with_its_verdict(dump):
    # GIVEN the HTML report of a committed dump (cuda-gdb left out: 35 dumps, kept quick)
    report = report_of(dump, cuda_gdb=False)
    # WHEN a parser reads it
    page = Page(page_of(dump, cuda_gdb=False))
    # THEN it is one page with one verdict, and the verdict comes before the evidence
    assert page.count("html") == page.count("body") == page.count("h1") == 1
    assert page.count("main") == 1
    first_section = page.text.find("Where the warps were" if not report["sites"] else "SASS")
    for expected in verdict_texts(report):
        position = page.text.find(words(expected))
        assert position != -1, f"verdict text missing: {expected!r}"
        assert position < first_section, f"{expected!r} comes after the evidence"


def test_hostile_names_are_escaped_text_not_elements():
    # GIVEN a dump whose kernel is `void html::render<html::script, html::img, &html::onerror>(…)`
    source = page_of(dump_named("hostile_names"))
    # WHEN a parser reads the page
    page = Page(source)
    # THEN the only script is the template's own, and nothing from the dump became markup
    assert page.count("script") == 1
    assert "html::" not in page.scripts[0]
    assert page.count("img") == 0
    handlers = [(tag, name) for tag, attrs in page.tags for name in attrs if name.startswith("on")]
    assert handlers == []
    assert {tag for tag, _ in page.tags} <= TEMPLATE_TAGS
    assert "html::render&lt;html::script, html::img, &amp;html::onerror&gt;" in source
    assert "<html::" not in source and "&html::" not in source
    assert HOSTILE_NAME in page.text


def test_page_loads_nothing_from_outside_itself():
    page = Page(page_of(dump_named("cutlass_like.twin_r400")))
    external = [
        (tag, attrs)
        for tag, attrs in page.tags
        for name in ("src", "href", "action", "poster", "data")
        if (value := attrs.get(name)) and not value.startswith(("#", "data:"))
    ]
    assert external == []
    assert "@import" not in page_of(dump_named("cutlass_like.twin_r400"))


def test_the_verdict_names_the_fault_address_and_the_argument_it_is_relative_to():
    # GIVEN a dump whose faulting address is 0x543000 bytes past the kernel's first argument
    report = report_of(dump_named("oob_store"), cuda_gdb=False)
    forensics = report["sites"][0]["forensics"]
    assert forensics["arguments"]["attribution"] == "fault = arg0 + 0x543000"
    # WHEN its page is rendered
    verdict = verdict_of(page_of(dump_named("oob_store"), cuda_gdb=False))
    # THEN the verdict box says the address and its attribution, as the text header does
    assert "address 0x7f3b40543000 in the first lane" in verdict
    assert "fault = arg0 + 0x543000" in verdict
    assert verdict.index("fault = arg0") - verdict.index("address 0x7f3b40543000") < 60


@pytest.mark.parametrize("dump", dump_paths(), ids=lambda p: p.name)
def test_the_page_title_is_short(dump):
    title = title_of(page_of(dump, cuda_gdb=False))
    assert title.startswith("postmortem: ")
    assert len(title) <= 100, title


def test_a_long_kernel_name_is_short_in_the_title_and_headings_and_whole_one_click_away():
    # GIVEN a kernel whose demangled name is hundreds of characters long
    report = report_of(dump_named("cutlass_like"), cuda_gdb=False)
    full = report["sites"][0]["function"]["demangled"]
    assert len(full) > 500
    # WHEN its page is rendered
    source = page_of(dump_named("cutlass_like"), cuda_gdb=False)
    page = Page(source)
    # THEN the title and the headings show the short form, template arguments collapsed
    assert title_of(source) == (
        "postmortem: Warp Illegal Address in cutlass_like::device_kernel<…>+0x860"
    )
    verdict = source[source.index('<header class="verdict') : source.index("</header>")]
    summary = re.search(r'<div class="kernel">.*?<summary>(.*?)</summary>', verdict).group(1)
    assert html.unescape(re.sub("<[^>]+>", "", summary)) == (
        "void cutlass_like::device_kernel<…>(cutlass_like::gemm::kernel::Gemm<…>::Params) full name"
    )
    short = report["state"][0]["kernel"]["short"]
    headings = [attrs for tag, attrs in page.tags if tag == "code" and "title" in attrs]
    assert {"title": short, "class": "name"} in headings
    # AND the whole name is in the page, in a <details> that one click opens
    assert words(full) in page.text
    assert page.count("details") >= 3


def test_a_title_stays_short_even_for_a_long_name_without_templates():
    report = copy.deepcopy(report_of(dump_named("oob_store"), cuda_gdb=False))
    report["sites"][0]["location"] = "ns::" * 200 + "k+0xd0"
    title = title_of(render("analyze", report, "html"))
    assert title.startswith("postmortem: Warp Illegal Address in ns::ns::") and title.endswith("…")
    assert len(title) <= 100


def test_each_fault_site_heading_shows_a_long_name_short_with_the_whole_one_click_away():
    # GIVEN a report with two fault sites in a kernel with a long name (no fixture dump has two)
    report = copy.deepcopy(report_of(dump_named("cutlass_like"), cuda_gdb=False))
    report["sites"].append(copy.deepcopy(report["sites"][0]))
    short = report["sites"][0]["function"]["short"]
    # WHEN it is rendered
    source = render("analyze", report, "html")
    # THEN each site's heading names the kernel short, and a <details> after it holds it whole
    for index in (1, 2):
        heading = source[source.index(f'<h2 id="site-{index}-title">') :]
        heading, after = heading.split("</h2>", 1)
        assert "cutlass_like::device_kernel&lt;…&gt;" in heading
        assert Page(heading + "</h2>").tags[-1][1]["title"] == short
        assert after.lstrip().startswith('<details class="long-name"><summary>Full name</summary>')
        assert words(short) in Page(after.split("</details>", 1)[0]).text


def test_a_long_hostile_name_in_a_heading_tooltip_stays_text():
    # GIVEN a report whose kernel has a long name that is markup (no fixture dump has one)
    report = copy.deepcopy(report_of(dump_named("oob_store"), cuda_gdb=False))
    name = "evil::k<" + "evil::Long<int>, " * 8 + "\"'&<img src=x onerror=alert(1)>>"
    report["state"][0]["kernel"]["short"] = name
    report["sites"][0]["function"]["demangled"] = f"void {name}(int)"
    # WHEN it is rendered
    source = render("analyze", report, "html")
    page = Page(source)
    # THEN the title attribute holds it as text, and nothing of it became an element or handler
    assert page.count("img") == 0
    assert {tag for tag, _ in page.tags} <= TEMPLATE_TAGS
    assert [(t, n) for t, attrs in page.tags for n in attrs if n.startswith("on")] == []
    assert any(attrs.get("title") == name for _, attrs in page.tags)
    assert words(name) in page.text and "evil::k<…>" in page.text


def test_no_exception_dump_says_where_the_warps_were():
    report = report_of(dump_named("hang_barrier"))
    page = Page(page_of(dump_named("hang_barrier")))
    assert report["sites"] == []
    assert words(report["verdict"]["headline"]) in page.text
    for pc in report["state"][0]["pcs"]:
        assert f"{pc['offset_hex']} {pc['warps']} {pc['lanes']}" in page.text
    assert "SASS around the fault" not in page.text


def test_a_disagreement_with_cuda_gdb_is_highlighted():
    # GIVEN a report where cuda-gdb names another exception (no fixture dump disagrees)
    report = copy.deepcopy(report_of(dump_named("oob_store")))
    check = report["crosscheck"]
    if not check["ran"] or not check["opened"]:
        require_tool("cuda-gdb")
        pytest.skip(f"cuda-gdb did not read the dump: {check.get('note') or check['notes']}")
    check["checks"][0].update(cuda_gdb="Warp Misaligned Address", agrees=False)
    check["disagreements"] = 1
    # WHEN it is rendered
    page = Page(render("analyze", report, "html"))
    # THEN the disagreement is called out above the table, and its row is marked
    fact = check["checks"][0]
    callout = page.text.partition("The two readers disagree:")[2].partition("Fact by fact")[0]
    assert fact["fact"] in callout and fact["native"] in callout and fact["cuda_gdb"] in callout
    rows = [attrs for tag, attrs in page.tags if tag == "tr" and attrs.get("class") == "disagree"]
    assert len(rows) == 1
    assert "1 disagreement" in page.text and "DISAGREES" in page.text


def test_every_fault_site_gets_its_own_section():
    # GIVEN a report with two fault sites (no fixture dump has two)
    report = copy.deepcopy(report_of(dump_named("oob_store_nolineinfo"), cuda_gdb=False))
    report["sites"].append(copy.deepcopy(report["sites"][0]))
    # WHEN it is rendered
    page = Page(render("analyze", report, "html"))
    # THEN each site has a section, and the verdict links to both
    ids = [attrs.get("id") for tag, attrs in page.tags if tag == "section"]
    assert {"site-1", "site-2"} <= set(ids)
    assert "Fault site 2 of 2" in page.text and "2 fault sites in this dump" in page.text
    # (the remedy once per site, and once more as the on-call summary's next step)
    assert report["oncall"]["next_step"]["source"] == "no-line-info"
    assert page.text.count(report["sites"][0]["diagnoses"][0]["remedy"]) == 3


def test_without_nvdisasm_the_page_says_why_there_is_no_sass():
    # GIVEN an analysis whose nvdisasm does not exist
    options = AnalyzeOptions(LocalizeOptions(nvdisasm="/nonexistent/nvdisasm"), cuda_gdb=False)
    report = build_report(analyze_dump(dump_named("oob_store"), options))
    # WHEN it is rendered
    page = Page(render("analyze", report, "html"))
    # THEN the verdict still stands, and the SASS panel gives nvdisasm's reason
    note = next(p["note"] for p in report["provenance"] if p["source"] == "nvdisasm")
    assert note and f"No disassembly: {words(note)}" in page.text
    assert report["sites"][0]["location"] in page.text


def test_a_source_line_not_found_says_why():
    # GIVEN an analysis without --source-dir: the chain's files are not found
    options = AnalyzeOptions(cuda_gdb=False)
    report = build_report(analyze_dump(dump_named("oob_store"), options))
    chain = report["sites"][0]["chain"]
    assert chain and all(frame["source"] is None for frame in chain)
    # WHEN it is rendered
    page = Page(render("analyze", report, "html"))
    # THEN every frame is still there with file:line, and the reason it has no source line
    for frame in chain:
        assert f"{frame['file']}:{frame['line']}" in page.text
        assert f"source line not shown: {words(frame['missing'])}" in page.text
    assert "--source-dir DIR" in page.text


# ---------------------------------------------------------------- in headless Chromium


def require_browser() -> tuple[Path, Path]:
    """Chromium and chromedriver from PATH, or a skip with the reason (a failure under CI)."""
    browser, driver = find_browser()
    missing = [name for name, path in (("chromium", browser), ("chromedriver", driver)) if not path]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if browser and driver and not missing:
        return browser, driver
    message = f"{' and '.join(missing)} not found; hint: apt-get install chromium chromium-driver"
    if in_ci():
        pytest.fail(f"CI=true and the browser tests cannot run: {message}")
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    from tests.tools.browser import chromium

    with chromium(*require_browser()) as session:
        yield session


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("html")
    written = {}
    for name in (*BROWSER_DUMPS, "cutlass_like.twin_r400"):
        path = folder / f"{name}.html"
        path.write_text(page_of(dump_named(name)), encoding="utf-8")
        written[name] = path
    return written


def open_page(session, path: Path) -> None:
    session.get_log("browser")  # drop what earlier pages logged
    session.get(path.as_uri())
    assert session.execute_script("return document.readyState") == "complete"


def visible_text(session) -> str:
    return words(session.execute_script("return document.body.innerText"))


@pytest.mark.parametrize("name", BROWSER_DUMPS)
def test_page_shows_the_kernel_and_the_faulting_instruction(browser, pages, name):
    # GIVEN nvdisasm, so that the report holds the faulting instruction
    require_tool("nvdisasm")
    report = report_of(dump_named(name))
    # WHEN the page opens in Chromium
    open_page(browser, pages[name])
    # THEN the visible text names the kernel, and the faulting SASS line is the highlighted one
    text = visible_text(browser)
    if report["sites"]:
        site = report["sites"][0]
        assert words(site["function"]["demangled"]) in text
        assert site["instruction"]["text"] in text
        marked = browser.execute_script(
            "return Array.from(document.querySelectorAll('pre.sass .ins.fault'), e => e.innerText)"
        )
        assert len(marked) == 1
        assert site["instruction"]["text"] in marked[0]
    else:
        assert report["state"][0]["kernel"]["demangled"] in text
        assert words(report["verdict"]["headline"]) in text


@pytest.mark.parametrize("name", BROWSER_DUMPS)
def test_page_logs_no_console_error_and_requests_nothing(browser, pages, name):
    open_page(browser, pages[name])
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_clicking_a_header_sorts_the_pc_histogram(browser, pages):
    # GIVEN the PC histogram of the cutlass-like kernel (listed by lanes, most first)
    open_page(browser, pages["cutlass_like.twin_r400"])
    column_of = """
        const table = document.querySelector('#state table.sortable');
        const index = Array.from(table.tHead.rows[0].cells).findIndex(
            th => th.innerText.trim().startsWith(arguments[0]));
        return Array.from(table.tBodies[0].rows, row => row.cells[index].innerText.trim());
    """
    header = "#state table.sortable th:nth-child({})"
    before = browser.execute_script(column_of, "PC offset")
    lanes = [int(x) for x in browser.execute_script(column_of, "lanes")]
    assert lanes == sorted(lanes, reverse=True) and len(set(lanes)) > 1
    # WHEN the "lanes" header is clicked, and clicked again
    browser.find_element("css selector", header.format(3)).click()
    ascending = [int(x) for x in browser.execute_script(column_of, "lanes")]
    browser.find_element("css selector", header.format(3)).click()
    descending = [int(x) for x in browser.execute_script(column_of, "lanes")]
    # THEN the rows follow, both ways; and the hex offsets sort by value
    assert ascending == sorted(lanes)
    assert descending == sorted(lanes, reverse=True)
    browser.find_element("css selector", header.format(1)).click()
    offsets = browser.execute_script(column_of, "PC offset")
    assert offsets == sorted(before, key=lambda x: int(x, 16))
    sorted_by = browser.find_element("css selector", header.format(1)).get_attribute("aria-sort")
    assert sorted_by == "ascending"


def test_a_long_kernel_name_opens_whole_with_one_click(browser, pages):
    # GIVEN the page of a kernel whose name is hundreds of characters long
    full = report_of(dump_named("cutlass_like"))["sites"][0]["function"]["demangled"]
    open_page(browser, pages["cutlass_like"])
    verdict = "return document.querySelector('.verdict').innerText"
    shown = words(browser.execute_script(verdict))
    # THEN the verdict shows its short form only
    assert "cutlass_like::device_kernel<…>(cutlass_like::gemm::kernel::Gemm<…>::Params)" in shown
    assert words(full) not in shown
    # WHEN its summary is clicked, THEN the whole name shows
    browser.find_element("css selector", ".verdict .kernel summary").click()
    assert words(full) in words(browser.execute_script(verdict))


def test_hostile_kernel_name_is_shown_as_text_in_the_browser(browser, pages):
    open_page(browser, pages["hostile_names"])
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    assert browser.execute_script("return document.scripts.length") == 1
    tags = browser.execute_script(
        "return Array.from(new Set(Array.from(document.querySelectorAll('*'), e => e.localName)))"
    )
    assert set(tags) <= TEMPLATE_TAGS
    assert HOSTILE_NAME in visible_text(browser)
    assert browser.title == "postmortem: Warp Illegal Address in html::render<…>+0xd0"


def test_printing_hides_navigation_and_shows_collapsed_sections(browser, pages):
    # GIVEN a page with a collapsed section (the dump's table row sizes)
    open_page(browser, pages["cutlass_like.twin_r400"])
    hidden = "return document.querySelector('#dump details').open"
    assert browser.execute_script(hidden) is False
    visible = "return document.querySelector('#dump details table').checkVisibility()"
    assert browser.execute_script(visible) is False
    # WHEN the page is laid out for print
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        style = browser.execute_script(
            "return [getComputedStyle(document.querySelector('nav.toc')).display,"
            " getComputedStyle(document.querySelector('.verdict')).backgroundColor]"
        )
        shown_in_print = browser.execute_script(visible)
        browser.execute_script("window.dispatchEvent(new Event('beforeprint'))")
        opened = browser.execute_script("return document.querySelectorAll('details:not([open])')")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    # THEN no navigation, no dark background, every section's content is there
    assert style == ["none", "rgb(255, 255, 255)"]
    assert shown_in_print is True
    assert opened == []
