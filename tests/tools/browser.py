"""Headless Chromium for the HTML report tests and the README screenshot, offline only.

Chromium runs with everything that phones home switched off and a throw-away profile, and
selenium is handed the chromedriver on PATH, so Selenium Manager never downloads a driver.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVER = "chromedriver"
_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--hide-scrollbars",
)


def find_browser() -> tuple[Path | None, Path | None]:
    """The Chromium and chromedriver executables on PATH (None for each one missing)."""
    browser = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    driver = shutil.which(DRIVER)
    return (Path(browser) if browser else None, Path(driver) if driver else None)


@contextmanager
def chromium(browser: Path, driver: Path, width: int = 1280, height: int = 900) -> Iterator[object]:
    """A headless Chromium webdriver with browser console logging on; quit on exit."""
    os.environ["SE_OFFLINE"] = "true"  # never let Selenium Manager look for a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="pm-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(browser)
        for flag in _FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument(f"--window-size={width},{height}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        session = webdriver.Chrome(service=Service(str(driver)), options=options)
        try:
            yield session
        finally:
            session.quit()
