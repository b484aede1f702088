"""Regenerate docs/report-html.png, the README's picture of the HTML report (run by hand).

Usage: ``python tests/tools/screenshot_report.py [--dump D] [--out PNG] [--first-screen]``

Analyzes a fixture dump (default: cutlass_like.twin_r400, with ``--source-dir fixtures/cu`` and
cuda-gdb when it is installed, so the cross-check shows), renders the HTML report, opens it in
headless Chromium 1280 px wide and saves the whole page, or only the first screen. The dump is named
relative to the repository, so no path of this machine is pictured. Needs chromium and
chromedriver on PATH; nothing is fetched from the network.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump  # noqa: E402
from postmortem.analysis.fault.fault import LocalizeOptions  # noqa: E402
from postmortem.analysis.fault.source import SourcePaths  # noqa: E402
from postmortem.report.context import build_report  # noqa: E402
from postmortem.report.render import render  # noqa: E402
from tests.tools.browser import chromium, find_browser  # noqa: E402

DUMP = Path("fixtures/dumps/cutlass_like.twin_r400.nvcudmp")
OUT = Path("docs/report-html.png")
WIDTH, HEIGHT = 1280, 1000


def html_report(dump: Path) -> str:
    """The HTML report of `dump` (a path relative to the repository)."""
    options = AnalyzeOptions(LocalizeOptions(sources=SourcePaths((Path("fixtures/cu"),))))
    return render("analyze", build_report(analyze_dump(dump, options)), "html")


def screenshot(page: Path, full_page: bool) -> bytes:
    browser, driver = find_browser()
    if browser is None or driver is None:
        raise SystemExit("error: chromium and chromedriver must be on PATH")
    with chromium(browser, driver, WIDTH, HEIGHT) as session:
        metrics = {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}
        session.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        session.get(page.as_uri())
        height = session.execute_script("return document.documentElement.scrollHeight")
        clip = {"x": 0, "y": 0, "width": WIDTH, "height": height if full_page else HEIGHT}
        shot = session.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": full_page, "clip": {**clip, "scale": 1}},
        )
    return base64.b64decode(shot["data"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=DUMP, help="relative to the repository")
    parser.add_argument("--out", type=Path, default=OUT, help="relative to the repository")
    parser.add_argument("--first-screen", action="store_true", help="1280x1000, not the page")
    args = parser.parse_args()
    os.chdir(REPO)
    with tempfile.TemporaryDirectory(prefix="pm-screenshot-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html_report(args.dump), encoding="utf-8")
        png = screenshot(page, full_page=not args.first_screen)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(png)
    print(f"wrote {args.out} ({'the first screen' if args.first_screen else 'the whole page'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
