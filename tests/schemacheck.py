"""Every JSON document the code under test writes in this process follows its shipped schema.

tests/conftest.py takes in this module's hooks. Installed once per test process, it wraps
`postmortem.report.render.render` (format "json": `analyze`'s report, an incident, `info`'s
summary, a scan's JSON lines) and each `signature_text` the command layer defines (what
`postmortem signature --json` prints), wherever that module lives, as the modules are
imported. Each document is validated against the schema the package ships for it
(dev/schemas generates them), with the compiled validators cached. A document that breaks
its schema fails the test that made it (in setup, call or teardown, whichever made it), and
the message names the test, the schema and the path of the offending value. Documents made
in subprocesses (`python -m postmortem`) are not seen here: their tests validate them.

POSTMORTEM_SCHEMA_STATS=FILE appends, per test process, how many documents were validated
and the seconds it took.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from importlib import resources
from types import ModuleType
from typing import Any

import jsonschema
import pytest

SCHEMAS = {
    "analyze": ("postmortem.report", "report.schema.json"),
    "incident": ("postmortem.report", "incident.schema.json"),
    "info": ("postmortem.report", "info.schema.json"),
    "scan": ("postmortem.scan", "scan-line.schema.json"),
    "signature": ("postmortem.scan", "signature.schema.json"),
}
"""What each kind of output is validated against: package and file."""

UNCHECKED = {
    "tests/unit/test_render.py::test_a_scan_index_in_json_is_one_object_a_line": (
        "renders a stub index ({'type': 'scan'}, ...) to test the JSON lines layout, not data "
        "the code made"
    ),
}
"""Tests whose JSON outputs are not checked, each with the reason: they render stand-in data."""

_RENDER_MODULE = "postmortem.report.render"
_violations: list[str] = []
_stats = {"documents": 0, "seconds": 0.0}


@functools.cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    package, name = SCHEMAS[kind]
    schema = json.loads(resources.files(package).joinpath(name).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def check(kind: str, text: str) -> None:
    """Validate the JSON `text` (JSON lines for a scan) of an output of `kind`; a violation is
    kept for the running test to fail with."""
    started = time.perf_counter()
    lines = text.splitlines() if kind in ("scan", "signature") else [text]
    validator = _validator(kind)
    for line in lines:
        if not line.strip():
            continue
        document = json.loads(line)
        _stats["documents"] += 1
        error = jsonschema.exceptions.best_match(validator.iter_errors(document))
        if error is not None:
            package, name = SCHEMAS[kind]
            _violations.append(
                f"{kind} JSON output breaks {package.replace('.', '/')}/{name} "
                f"({validator.schema.get('$id')}) at {error.json_path}: {error.message[:400]}"
            )
    _stats["seconds"] += time.perf_counter() - started


def _checked_render(render: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(render)
    def checked(kind: str, data: Any, fmt: str, **options: Any) -> str:
        text = render(kind, data, fmt, **options)
        if fmt == "json" and kind in SCHEMAS:
            check(kind, text)
        return text

    checked.__schema_checked__ = True  # type: ignore[attr-defined]
    return checked


def _checked_signature_text(signature_text: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(signature_text)
    def checked(core: Any, request: Any, *args: Any, **kwargs: Any) -> str:
        text = signature_text(core, request, *args, **kwargs)
        if getattr(request, "as_json", False):
            check("signature", text)
        return text

    checked.__schema_checked__ = True  # type: ignore[attr-defined]
    return checked


def _patch(module: ModuleType) -> None:
    """Wrap what `module` defines that writes JSON, once."""
    name = module.__name__
    wanted: dict[str, Callable[[Callable[..., str]], Callable[..., str]]] = {
        "signature_text": _checked_signature_text
    }
    if name == _RENDER_MODULE:
        wanted["render"] = _checked_render
    for attribute, wrap in wanted.items():
        found = getattr(module, attribute, None)
        if (
            callable(found)
            and getattr(found, "__module__", None) == name
            and not getattr(found, "__schema_checked__", False)
        ):
            checked = wrap(found)
            setattr(module, attribute, checked)
            # Modules that imported it by name before it was wrapped.
            for other in list(sys.modules.values()):
                if getattr(other, attribute, None) is found:
                    setattr(other, attribute, checked)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds postmortem's modules as the path finder does, and patches each once it ran."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("postmortem."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Patch the modules already imported and every postmortem module imported later."""
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
    for name, module in list(sys.modules.items()):
        if name.startswith("postmortem.") and module is not None:
            _patch(module)


def _fail_on_violations(item: pytest.Item, phase: str) -> None:
    if _violations and item.nodeid in UNCHECKED:
        _violations.clear()
    if _violations:
        found = list(_violations)
        _violations.clear()
        pytest.fail(
            f"{item.nodeid} ({phase}): " + f"\n{item.nodeid} ({phase}): ".join(found),
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    _violations.clear()
    result = yield
    _fail_on_violations(item, "setup")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    result = yield
    _fail_on_violations(item, "call")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    result = yield
    _fail_on_violations(item, "teardown")
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    stats = os.environ.get("POSTMORTEM_SCHEMA_STATS")
    if stats:
        with open(stats, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} {_stats['documents']} {_stats['seconds']:.3f}\n")


install()
