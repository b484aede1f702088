"""Golden reports: what `analyze` writes for chosen fixture dumps, in text, md and json.

`python -m tests.golden` (or `make golden`) regenerates them; review the diff before
committing. The test (tests/tools/test_golden.py) renders the same cases and
compares byte for byte. Paths are relative to the repository root, so reports are the
same on every machine.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fault.source import SourcePaths
from postmortem.report.context import build_report
from postmortem.report.render import render

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
FORMATS = ("text", "md", "json", "html")
SUFFIXES = {"text": "txt", "md": "md", "json": "json", "html": "html"}


@dataclass(frozen=True)
class Case:
    """One golden report: which dump, and whether cuda-gdb is part of it."""

    dump: str
    cuda_gdb: bool = False

    @property
    def name(self) -> str:
        return self.dump + (".gdb" if self.cuda_gdb else "")


CASES = (
    Case("oob_store", cuda_gdb=True),
    Case("cutlass_like"),
    Case("hostile_names"),
    Case("oob_store_nolineinfo"),
    Case("misaligned_load"),
    Case("device_assert", cuda_gdb=True),
    Case("sm_fault"),
    Case("two_devices"),
    Case("hang_barrier"),
    Case("hang_spin"),
    # A hang cuda-gdb 11.8 reads (r400 rows): hang_spin has r580 rows, as the driver writes.
    Case("hang_barrier.twin_r400", cuda_gdb=True),
    Case("midflight"),
    Case("oob_store_r615", cuda_gdb=True),
    Case("shared_overflow"),
    Case("oob_store_stripped"),
    Case("two_devices_fault"),
)


def render_case(case: Case) -> dict[str, str]:
    """The case's report in every golden format (run from the repository root)."""
    options = AnalyzeOptions(
        LocalizeOptions(window=6, sources=SourcePaths((Path("fixtures/cu"),))),
        cuda_gdb=case.cuda_gdb,
    )
    report = build_report(analyze_dump(Path("fixtures/dumps") / f"{case.dump}.nvcudmp", options))
    for use in report["provenance"]:
        # A tool's time and memory differ from run to run: fixed stand-ins keep the goldens
        # byte-stable while still showing how they are laid out.
        if use["seconds"] is not None:
            use["seconds"] = 1.25
        if use["peak_memory_mib"] is not None:
            use["peak_memory_mib"] = 75.0
        # Which executable ran, and what chose it, depend on the machine's installation.
        if use["path"] is not None:
            use["path"], use["chosen_by"] = f"/opt/cuda/bin/{use['source']}", "$PATH"
    return {fmt: render("analyze", report, fmt) for fmt in FORMATS}


def golden_path(case: Case, fmt: str) -> Path:
    return GOLDEN / f"{case.name}.{SUFFIXES[fmt]}"


def main() -> int:
    os.chdir(ROOT)
    for case in CASES:
        for fmt, text in render_case(case).items():
            golden_path(case, fmt).write_text(text, encoding="utf-8")
            print(f"wrote {golden_path(case, fmt).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
