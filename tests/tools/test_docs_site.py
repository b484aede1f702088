"""The manual builds as a site, strictly, and the README stays a front page.

`mkdocs build --strict` fails on a warning: a link to a page or an anchor that does not exist,
a page of docs/ left out of the navigation, an image that is not there. The examples in the
pages are run by test_docs_examples.py, the README's install blocks by test_packaging.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.tooling import require_module

ROOT = Path(__file__).resolve().parents[2]
FRONT_PAGE_LINES = 250


def test_the_manual_builds_strictly(tmp_path):
    require_module("mkdocs", "the documentation site is built with it (the dev extra)")
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    built_pages = sorted(
        "index" if p.parent == site else p.parent.name for p in site.rglob("index.html")
        if p.parent == site or p.parent.parent == site
    )  # fmt: skip
    assert [p for p in pages if p not in built_pages] == []
    assert (site / "report-html.png").is_file()


def test_the_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= FRONT_PAGE_LINES
    # what it is, the demo and the tests on the first screen; then how to run it on your dump
    first_screen = "\n".join(text.splitlines()[:24])
    assert "sh dev/demo.sh" in first_screen and "sh dev/test.sh" in first_screen
    assert "Run `postmortem analyze` on your dump" in text


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def test_every_install_block_of_the_manual_is_one_the_packaging_test_runs():
    # test_packaging.py runs the shell blocks of the README's "Installing" section as written;
    # a page that shows how to install shows one of those, word for word.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    installing = readme.split("\n## Installing\n", 1)[1].split("\n## ", 1)[0]
    tested = _sh_blocks(installing)
    shown = [
        (page.name, block)
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for block in _sh_blocks(page.read_text(encoding="utf-8"))
        if re.search(r"pip install|-m venv", block)
    ]
    assert len(tested) == 2
    assert [page for page, block in shown if block not in tested] == []
