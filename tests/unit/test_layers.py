"""The import layering of postmortem/: no module imports a layer above its own.

The sources are read with `ast`, never imported, so every import counts: at the top of a
module, inside a function, under `if TYPE_CHECKING`, absolute or relative. The layers and
why they are cut where they are: docs/architecture.md.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "postmortem"

BELOW_ANALYSIS = frozenset({"base", "coredump", "cubin", "gdb", "host", "codemap"})
ANALYSIS_WINGS = frozenset(
    {"analysis.state", "analysis.forensics", "analysis.fault", "analysis.hang", "analysis.host"}
)
ANALYSIS = ANALYSIS_WINGS | {"analysis", "analysis.oncall", "analysis.fleet"}

# The row and its keys; finding dumps; one dump's work; where it runs; what the rows mean
# together; what is kept between scans; the triage events the run sends as rows arrive; the
# whole run; what the scan hands on.
SCAN_WINGS = (
    "scan.row", "scan.discover", "scan.work", "scan.engines", "scan.fleet", "scan.store",
    "scan.events", "scan.run", "scan.outputs",
)  # fmt: skip


def _scan_wings(below: frozenset[str]) -> dict[str, frozenset[str]]:
    return {wing: below | set(SCAN_WINGS[:at]) for at, wing in enumerate(SCAN_WINGS)}


LAYERS: dict[str, frozenset[str]] = {
    # layer: the lower layers its modules may import (their own layer is always allowed).
    # Lowest first; a layer may name only layers listed before it.
    "base": frozenset(),
    "coredump": frozenset({"base"}),
    "cubin": frozenset({"base"}),
    "gdb": frozenset({"base"}),
    # What the host printed (logs read and parsed): knows nothing of the dump.
    "host": frozenset({"base"}),
    "codemap": frozenset({"base", "coredump", "cubin"}),
    # The analysis, in wings that follow the pipeline: the GPU state histogram every wing
    # reads; what the faulting instruction touched; where a fault is; why a hang waits; the
    # host logs joined to the dump; the one dump's analysis (analyze, verdict, cross-check,
    # provenance); the on-call block read off it; many dumps (signatures, incidents).
    "analysis.state": BELOW_ANALYSIS,
    "analysis.forensics": BELOW_ANALYSIS | {"analysis.state"},
    "analysis.fault": BELOW_ANALYSIS | {"analysis.state", "analysis.forensics"},
    "analysis.hang": BELOW_ANALYSIS | {"analysis.state", "analysis.forensics", "analysis.fault"},
    "analysis.host": BELOW_ANALYSIS | {"analysis.state", "analysis.forensics", "analysis.fault"},
    "analysis": BELOW_ANALYSIS | ANALYSIS_WINGS,
    "analysis.oncall": BELOW_ANALYSIS | ANALYSIS_WINGS | {"analysis"},
    "analysis.fleet": BELOW_ANALYSIS | ANALYSIS_WINGS | {"analysis", "analysis.oncall"},
    # The public library API re-exports the reader and the analysis, so it sits above both;
    # nothing below it imports it (the version is read from postmortem._version, in base).
    "api": BELOW_ANALYSIS | ANALYSIS,
    # The report projects an analysis; it never reads the dump or runs a tool itself.
    "report": frozenset({"base", "host", "codemap"}) | ANALYSIS,
    # scan/, in wings in the order a scan runs them; each wing may import those before it.
    **_scan_wings(BELOW_ANALYSIS | ANALYSIS | {"api", "report"}),
    "commands": BELOW_ANALYSIS | ANALYSIS | {"api", "report"} | set(SCAN_WINGS),
    "cli": BELOW_ANALYSIS | ANALYSIS | {"api", "report", "commands"} | set(SCAN_WINGS),
}

LAYER_OF: dict[str, str] = {
    # module or package: its layer. A package's entry covers every module under it.
    # Shared by every layer: errors, facts, findings, names, the ELF layer, tool running.
    "postmortem._version": "base",
    "postmortem.errors": "base",
    "postmortem.model": "base",
    "postmortem.exceptions": "base",
    "postmortem.pci": "base",
    "postmortem.findings": "base",
    "postmortem.demangle": "base",
    "postmortem.elf": "base",
    "postmortem.elfcolumns": "base",
    "postmortem.toolrun": "base",
    "postmortem.tools": "base",
    "postmortem.config": "base",
    "postmortem.urls": "base",
    "postmortem.safefile": "base",
    "postmortem.spelling": "base",
    "postmortem.dumpnames": "base",
    # The native reader, the cubin inspector with its nvdisasm adapter, the cuda-gdb adapter:
    # three siblings that know nothing of each other.
    "postmortem.coredump": "coredump",
    "postmortem.cubin": "cubin",
    "postmortem.gdb": "gdb",
    "postmortem.host": "host",
    "postmortem.host.crashpickle": "host",
    # Reader and cubins joined: where code is, and what the native reader found.
    "postmortem.codemap": "codemap",
    "postmortem.summary": "codemap",
    "postmortem.salvage": "codemap",
    # analysis/ itself: analyze (the orchestrator), verdict, crosscheck, provenance.
    "postmortem.analysis": "analysis",
    "postmortem.analysis.state": "analysis.state",
    "postmortem.analysis.forensics": "analysis.forensics",
    "postmortem.analysis.fault": "analysis.fault",
    "postmortem.analysis.hang": "analysis.hang",
    "postmortem.analysis.host": "analysis.host",
    # The on-call summary and the incident of many dumps: what the analysis means, in short.
    "postmortem.analysis.oncall": "analysis.oncall",
    "postmortem.analysis.fleet": "analysis.fleet",
    # postmortem/__init__.py alone (not the modules under it): the public library API, the
    # reader's and the analysis's names (imported on first use, but imported all the same).
    "postmortem": "api",
    "postmortem.report": "report",
    "postmortem.report.oncall": "report",
    "postmortem.report.incident": "report",
    # scan/'s wings (SCAN_WINGS): the row, build key and --since at the bottom, the run
    # (and the package's __init__) above what it gathers, the outputs on top.
    "postmortem.scan": "scan.run",
    "postmortem.scan.row": "scan.row",
    "postmortem.scan.build": "scan.row",
    "postmortem.scan.since": "scan.row",
    "postmortem.scan.discover": "scan.discover",
    "postmortem.scan.work": "scan.work",
    "postmortem.scan.engines": "scan.engines",
    "postmortem.scan.fleet": "scan.fleet",
    "postmortem.scan.store": "scan.store",
    "postmortem.scan.events": "scan.events",
    "postmortem.scan.run": "scan.run",
    "postmortem.scan.progress": "scan.run",
    "postmortem.scan.outputs": "scan.outputs",
    # The work behind the commands that write files: they render through report/.
    "postmortem.scan.request": "commands",
    "postmortem.capture": "commands",
    "postmortem.extract": "commands",
    "postmortem.cli": "cli",
    "postmortem.__main__": "cli",
}

KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {
    # (importer, imported): why it is there and what removes it. Keep this empty if you can;
    # an entry whose import is gone fails `test_known_violations_are_still_there`.
}


@dataclass(frozen=True)
class Import:
    importer: str
    """The importing module, dotted (`postmortem.analysis.fault.fault`)."""
    path: Path
    """Its file."""
    line: int
    imported: str
    """The postmortem module imported: a submodule when `from X import Y` names one."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports_in(module: str, is_package: bool, source: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import of postmortem in `source`, the text of
    `module` (a package's __init__ when `is_package`)."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                origin = f"{base}.{node.module}" if node.module else base
            else:
                origin = node.module or ""
            # `from postmortem.analysis.fault import diagnose` imports the module diagnose.
            targets = [
                f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in MODULES else origin
                for alias in node.names
            ]
        else:
            continue
        found += [
            (node.lineno, target)
            for target in targets
            if target == "postmortem" or target.startswith("postmortem.")
        ]
    return found


def _imports_of(module: str, path: Path) -> list[Import]:
    source = path.read_text(encoding="utf-8")
    found = _imports_in(module, path.name == "__init__.py", source)
    return [Import(module, path, line, imported) for line, imported in found]


IMPORTS: list[Import] = [i for module, path in MODULES.items() for i in _imports_of(module, path)]


def layer_of(module: str) -> str | None:
    """The layer of a module: its own entry, else its nearest package's (bare `postmortem`
    is the package's __init__ only, not a catch-all)."""
    if module in LAYER_OF:
        return LAYER_OF[module]
    parts = module.split(".")
    for end in range(len(parts) - 1, 1, -1):
        layer = LAYER_OF.get(".".join(parts[:end]))
        if layer is not None:
            return layer
    return None


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_every_module_has_a_layer():
    unassigned = [_shown(path) for module, path in MODULES.items() if layer_of(module) is None]
    assert not unassigned, (
        f"modules with no layer (add them to LAYER_OF in {_shown(Path(__file__))} and see "
        f"docs/architecture.md): {', '.join(unassigned)}"
    )


def test_layer_table_names_only_modules_that_exist():
    stale = sorted(name for name in LAYER_OF if name not in MODULES)
    assert not stale, f"LAYER_OF names modules or packages that do not exist: {stale}"


def test_every_layer_is_known_and_may_import_only_layers_below_it():
    order = list(LAYERS)
    for layer, allowed in LAYERS.items():
        above = sorted(a for a in allowed if a not in order[: order.index(layer)])
        assert not above, f"layer {layer} may import {above}, which are not below it"
    assert set(LAYER_OF.values()) <= set(LAYERS)


def test_no_module_imports_a_higher_layer():
    violations = []
    for imp in IMPORTS:
        mine, theirs = layer_of(imp.importer), layer_of(imp.imported)
        if mine is None or theirs == mine or (imp.importer, imp.imported) in KNOWN_VIOLATIONS:
            continue  # an unassigned importer fails test_every_module_has_a_layer
        if theirs is None or theirs not in LAYERS[mine]:
            violations.append(
                f"{_shown(imp.path)} (layer {mine}) imports {imp.imported} (layer {theirs}), "
                f"line {imp.line}"
            )
    assert not violations, "imports against the layering:\n" + "\n".join(sorted(set(violations)))


def test_known_violations_are_still_there():
    present = {(imp.importer, imp.imported) for imp in IMPORTS}
    gone = sorted(f"{a} -> {b}" for a, b in KNOWN_VIOLATIONS if (a, b) not in present)
    assert not gone, f"fixed, so delete them from KNOWN_VIOLATIONS: {gone}"


def test_modules_import_each_other_without_a_cycle():
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for imp in IMPORTS:
        if imp.imported != imp.importer:
            graph[imp.importer].add(imp.imported)
    # Depth-first search; `trail` is the path from the root of the current search.
    done: set[str] = set()
    trail: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in trail:
            return [*trail[trail.index(module) :], module]
        if module in done:
            return None
        trail.append(module)
        for target in sorted(graph.get(module, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        trail.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module)
        assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import postmortem.cubin.sass", "postmortem.cubin.sass"),
        ("from postmortem.analysis.fault import diagnose", "postmortem.analysis.fault.diagnose"),
        ("from postmortem.coredump import Coredump", "postmortem.coredump"),
        ("from postmortem import __version__", "postmortem"),
        ("from .sass import parse_sass", "postmortem.cubin.sass"),
        ("from .. import errors", "postmortem.errors"),
        ("def f():\n    from postmortem.gdb import run\n", "postmortem.gdb.run"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import postmortem.cli\n",
            "postmortem.cli",
        ),
    ],
)
def test_every_form_of_import_is_seen(source, expected):
    # GIVEN the text of a module of postmortem/cubin/ that holds one import
    # WHEN its imports are read
    found = _imports_in("postmortem.cubin.probe", False, source)
    # THEN the import is there, resolved to the module it names
    assert [imported for _, imported in found] == [expected]
