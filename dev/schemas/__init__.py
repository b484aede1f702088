"""The JSON Schemas postmortem ships, generated from one source: `python -m dev.schemas`.

Each shipped `*.schema.json` (`postmortem/report/{report,incident,info}.schema.json`,
`postmortem/scan/{signature,scan-line}.schema.json`; the wheel carries them as package data)
is written by this package and never edited by hand. A schema's own parts live in its module
here (`report.py`, `incident.py`, `info.py`, `signature.py`, `scan_line.py`); every definition
that more than one of them carries — the tool, a finding, the on-call summary, the incident,
the signature and its frames, the barrier kinds — is written once in `shared.py`, and every
closed set of values that the code holds as an enum (finding codes, severities, problem
classes, wait kinds, roles, time sources, ...) is read from that enum. The output is
deterministic: `properties`, `$defs` and `required` are sorted, two-space JSON, UTF-8. A copy
in a file that must stand alone (a schema's `$defs` resolve only within its own file) is still
one definition here. `python -m dev.schemas` (or `make schemas`) rewrites the files;
`--check` exits 1 naming each file that differs from what would be written, as
tests/unit/test_schemas_generated.py does. Every JSON document the test suite makes in
process is validated against its schema (tests/schemacheck.py, through tests/conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dev.schemas import incident, info, report, scan_line, signature

ROOT = Path(__file__).resolve().parents[2]

SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "postmortem/report/report.schema.json": report.schema,
    "postmortem/report/incident.schema.json": incident.schema,
    "postmortem/report/info.schema.json": info.schema,
    "postmortem/scan/signature.schema.json": signature.schema,
    "postmortem/scan/scan-line.schema.json": scan_line.schema,
}
"""Each shipped schema, by its path from the repository root, and what builds it."""

_NAMED = ("properties", "$defs", "patternProperties")


def _sorted(node: Any, parent: str | None = None) -> Any:
    # Maps of names sorted, and `required`: the file does not change with the order the
    # source lists them in. Everything else keeps the source's order.
    if isinstance(node, dict):
        items = sorted(node.items()) if parent in _NAMED else node.items()
        return {key: _sorted(value, key) for key, value in items}
    if isinstance(node, list):
        if parent == "required":
            return sorted(node)
        return [_sorted(value) for value in node]
    return node


def render_schema(schema: dict[str, Any]) -> str:
    """A schema as its file holds it."""
    return json.dumps(_sorted(schema), indent=2, ensure_ascii=False) + "\n"


def generate() -> dict[Path, str]:
    """Every shipped schema file and the text it should hold."""
    return {ROOT / path: render_schema(build()) for path, build in SCHEMAS.items()}


def stale() -> list[Path]:
    """The shipped schema files that differ from what `generate` gives."""
    return [
        path
        for path, text in generate().items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def write() -> list[Path]:
    """Rewrite every stale schema file; the files written."""
    written = stale()
    texts = generate()
    for path in written:
        path.write_text(texts[path], encoding="utf-8")
    return written
