"""Shared test fixtures: where the committed fixtures live and what each dump planted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
DUMPS = FIXTURES / "dumps"


def dump_paths() -> list[Path]:
    """Every committed fixture dump (plain and gzip)."""
    return sorted(
        p for p in DUMPS.iterdir() if ".nvcudmp" in p.name and not p.name.endswith(".json")
    )


def truth_of(dump: Path) -> dict[str, Any]:
    """The builder's record of what it planted in `dump`."""
    name = dump.name.split(".nvcudmp")[0]
    return json.loads((DUMPS / f"{name}.truth.json").read_text())


@pytest.fixture(params=dump_paths(), ids=lambda p: p.name)
def dump(request: pytest.FixtureRequest) -> Path:
    return request.param
