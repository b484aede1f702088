"""A signature scan's lean rows against the full analysis: the same signature, the same
facts, and the instruction at the faulting PC that the full analysis shows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fleet.signature import load_rules
from postmortem.scan.work.instruction import InstructionMemo
from postmortem.scan.work.lean import lean_analysis
from postmortem.scan.work.worker import WorkOptions, scan_dump
from tests.tooling import REPO, require_tool

DUMPS = sorted((REPO / "fixtures" / "dumps").glob("*.nvcudmp*"))


@pytest.mark.parametrize("path", DUMPS, ids=[p.name for p in DUMPS])
def test_a_lean_row_signs_as_the_full_analysis_does(path):
    require_tool("nvdisasm")
    lean_options = WorkOptions(AnalyzeOptions(cuda_gdb=False), load_rules())
    assert lean_options.lean
    lean = scan_dump(path, lean_options)
    full = scan_dump(path, replace(lean_options, full_analysis=True))
    assert lean.signature == full.signature
    assert (lean.exception, lean.kernel, lean.fault_sites, lean.devices, lean.time) == (
        full.exception, full.kernel, full.fault_sites, full.devices, full.time,
    )  # fmt: skip
    assert (lean.pci_bus_id, lean.sm) == (full.pci_bus_id, full.sm)
    if lean.exception is not None:
        assert lean.headline == full.headline


@pytest.mark.parametrize("path", DUMPS, ids=[p.name for p in DUMPS])
def test_the_instruction_at_the_pc_is_the_full_analysis_s(path):
    require_tool("nvdisasm")
    options = AnalyzeOptions(cuda_gdb=False)
    site = next(iter(analyze_dump(path, options).sites), None)
    _, at_pc = lean_analysis(path, options, InstructionMemo(None))
    expected = site.instruction.text if site and site.instruction else None
    assert at_pc.instruction == expected


@pytest.mark.parametrize("path", DUMPS[:6], ids=[p.name for p in DUMPS[:6]])
def test_a_full_row_has_the_instruction_a_lean_row_has(path):
    require_tool("nvdisasm")
    lean_options = WorkOptions(AnalyzeOptions(cuda_gdb=False), load_rules())
    full = scan_dump(path, replace(lean_options, full_analysis=True))
    assert full.instruction == scan_dump(path, lean_options).instruction
