"""`analyze` on corrupted dumps: only our one-line errors may escape, and every format renders.

The reader has its own fuzz test; this one aims at what the forensics read on top of it (the
faulting lanes' registers, uniform registers, parameter memory, warp and lane rows, captured
memory) and runs the whole pipeline, nvdisasm included, on each mutant.
"""

from __future__ import annotations

import random
from io import BytesIO
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.errors import PostmortemError
from postmortem.report.context import build_report
from postmortem.report.render import FORMATS, render
from tests.conftest import DUMPS
from tests.tooling import require_tool

TARGETS = (".cudbg.regs", ".cudbg.uregs", ".cudbg.param", ".cudbg.wp", ".cudbg.ln", ".cudbg.gl")
SOURCES = ("shared_overflow", "oob_store_memory", "oob_store_cbank", "misaligned_load")


def _spans(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every section the forensics read."""
    elf = ELFFile(BytesIO(data))
    return [
        (s["sh_offset"], s["sh_size"])
        for s in elf.iter_sections()
        if s.name.startswith(TARGETS) and s["sh_size"] and s["sh_type"] != "SHT_NOBITS"
    ]


def _mutant(seed: int) -> tuple[str, bytes]:
    rng = random.Random(seed)
    name = rng.choice(SOURCES)
    data = bytearray((DUMPS / f"{name}.nvcudmp").read_bytes())
    spans = _spans(bytes(data))
    for _ in range(rng.choice((1, 3, 8, 32))):
        offset, size = rng.choice(spans)
        data[offset + rng.randrange(size)] = rng.choice((0, 0xFF, rng.randrange(256)))
    return name, bytes(data)


@pytest.mark.parametrize("seed", range(40))
def test_a_corrupted_dump_gives_a_report_or_one_error(seed: int, tmp_path: Path):
    nvdisasm = require_tool("nvdisasm")
    name, data = _mutant(seed)
    path = tmp_path / f"{name}.{seed}.nvcudmp"
    path.write_bytes(data)
    options = AnalyzeOptions(LocalizeOptions(nvdisasm=nvdisasm, timeout=60), cuda_gdb=False)
    try:
        report = build_report(analyze_dump(path, options))
    except PostmortemError as error:
        assert "\n" not in str(error)
        return
    for fmt in FORMATS:
        assert render("analyze", report, fmt)
