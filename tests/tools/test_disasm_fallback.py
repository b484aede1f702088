"""Disassembly is never lost to an image nvdisasm refuses, and costs one run per function.

Relocated images come in two conventions (docs/coredump-format.md, "Relocated images"):
the committed dumps address only code sections; `--convention alloc` dumps address every
SHF_ALLOC section, which nvdisasm 13.5 refuses as dumped. The real nvdisasm runs on both
(no mocking); a wrapper script that logs each run counts them.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path, PurePosixPath

import jsonschema
import pytest

from postmortem import open_coredump
from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault.fault import FaultSite, LocalizeOptions, localize
from postmortem.analysis.fault.source import SourcePaths
from postmortem.analysis.fleet.signature import load_rules
from postmortem.codemap import CodeMap
from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.normalize import (
    DATA_CLEARED,
    NON_RELOCATED,
    RELOCATED,
    clear_data_addresses,
    rebase_to_zero,
)
from postmortem.cubin.nvdisasm import disassemble
from postmortem.errors import ToolFailed
from postmortem.findings import FindingCode
from postmortem.report.context import build_report
from postmortem.report.render import render
from postmortem.scan.work.worker import WorkOptions, scan_dump
from tests.conftest import DUMPS, FIXTURES, dump_paths, truth_of
from tests.tooling import require_tool

sys.path.insert(0, str(FIXTURES / "builder"))
import gpustate as G  # noqa: E402
from cubin_index import CubinIndex  # noqa: E402
from dumpwriter import DumpWriter  # noqa: E402
from relocate import relocate_cubin  # noqa: E402

PLANTED = [p.name for p in dump_paths() if truth_of(p)["fault"] is not None]
HANGS = [p.name for p in dump_paths() if truth_of(p)["hang"]]
SCHEMA = json.loads((FIXTURES.parent / "postmortem" / "report" / "report.schema.json").read_text())
_SHDR_ADDRALIGN = 48  # byte offset of sh_addralign in an Elf64_Shdr


@pytest.fixture(scope="module")
def nvdisasm():
    return require_tool("nvdisasm")


def _sites(path: Path, nvdisasm, **options) -> tuple[FaultSite, ...]:
    with open_coredump(path) as core:
        return localize(core, LocalizeOptions(nvdisasm=nvdisasm, **options))


def _analyze(path: Path, nvdisasm, **options):
    localize_options = LocalizeOptions(nvdisasm=nvdisasm, **options)
    return analyze_dump(path, AnalyzeOptions(localize_options, cuda_gdb=False))


def _fault_image(path: Path) -> tuple[bytes, str]:
    """The relocated image holding the truth's fault, and the faulting kernel's name."""
    fault = truth_of(path)["fault"]
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        module = next(
            m.module for m in code_map.modules() if m.module.module_handle == fault["module_handle"]
        )
        return code_map.image_bytes(module), fault["kernel"]


def _provenance(report, source: str):
    return next(p for p in report["provenance"] if p["source"] == source)


# --- the alloc convention: nvdisasm refuses it as dumped ---------------------------------


def test_nvdisasm_refuses_an_alloc_image_as_dumped(alloc_dumps, nvdisasm):
    # GIVEN the relocated image of an alloc dump, every SHF_ALLOC section addressed
    image, kernel = _fault_image(alloc_dumps / "oob_store.nvcudmp")
    index = ElfImage(image).symbol_index(kernel)
    # WHEN nvdisasm reads it as it is
    with pytest.raises(ToolFailed) as refused:
        disassemble(image, index, nvdisasm=nvdisasm)
    # THEN it refuses it: the fallback is needed
    assert "Data block for section .nv.constant0._Z10oob_kernelPfif exceeds section size" in (
        refused.value.detail
    )


@pytest.mark.parametrize("name", ["oob_store", "device_assert", "two_modules", "oob_store_v8"])
def test_clearing_data_addresses_gives_back_the_code_only_image(name, alloc_dumps):
    with (
        open_coredump(alloc_dumps / f"{name}.nvcudmp") as alloc,
        open_coredump(DUMPS / f"{name}.nvcudmp") as code,
    ):
        alloc_map, code_map = CodeMap(alloc), CodeMap(code)
        alloc_modules = {m.module.module_handle: m.module for m in alloc_map.modules()}
        for loaded in code_map.modules():
            code_image = code_map.image_bytes(loaded.module)
            alloc_image = alloc_map.image_bytes(alloc_modules[loaded.module.module_handle])
            assert clear_data_addresses(alloc_image) == code_image
            assert clear_data_addresses(code_image) is None  # nothing to clear


@pytest.mark.parametrize("name", ["oob_store", "cutlass_like"])
def test_rebasing_to_zero_gives_back_the_compiled_cubin(name, corpus):
    # The debug relocations are applied again with section-relative values: the very bytes
    # ptxas wrote come back, whichever convention the image was relocated in.
    image, _ = _fault_image(corpus / f"{name}.nvcudmp")
    compiled = (FIXTURES / "cubins" / f"{name}.sm_90.v7.cubin").read_bytes()
    assert rebase_to_zero(image) == compiled
    assert rebase_to_zero(compiled) is None  # nothing is addressed


@pytest.mark.parametrize("name", PLANTED)
def test_an_alloc_image_localizes_like_a_code_image(name, alloc_dumps, nvdisasm):
    # GIVEN the same dump under both conventions
    code = _sites(DUMPS / name, nvdisasm)
    alloc = _sites(alloc_dumps / name, nvdisasm)

    # THEN every site has the same instruction, window, chain and forensics
    def facts(site: FaultSite):
        forensics = site.forensics
        return (
            site.error_pc, site.offset,
            site.instruction.text if site.instruction else None,
            [i.text for i in site.window], site.chain,
            [(a.lane, a.address) for a in forensics.lanes] if forensics else None,
            forensics.arguments.culprit if forensics and forensics.arguments else None,
            [(c.check, c.verdict) for c in forensics.checks] if forensics else None,
        )  # fmt: skip

    assert [facts(s) for s in alloc] == [facts(s) for s in code]
    assert all(s.instruction is not None for s in alloc)
    # AND the copy nvdisasm read is named
    assert {s.disassembly.image for s in code if s.disassembly} == {RELOCATED}
    assert {s.disassembly.image for s in alloc if s.disassembly} == {DATA_CLEARED}


@pytest.mark.parametrize("name", HANGS)
def test_an_alloc_image_gives_the_same_hang_flags(name, alloc_dumps, nvdisasm):
    def facts(analysis):
        hang = analysis.hang
        groups = [(g.offset, g.instruction.text if g.instruction else None, g.chain, g.barrier,
                   g.in_polling_loop) for g in hang.groups]  # fmt: skip
        return groups, [(f.code, f.message, f.evidence) for f in hang.findings]

    code = _analyze(DUMPS / name, nvdisasm)
    alloc = _analyze(alloc_dumps / name, nvdisasm)
    assert facts(alloc) == facts(code)
    assert all(g.instruction is not None for g in alloc.hang.groups)
    assert [d.image for d in alloc.hang.disassemblies] == [DATA_CLEARED]


@pytest.mark.parametrize("name", ["oob_store", "hang_barrier"])
def test_the_report_provenance_names_the_copy_nvdisasm_read(name, corpus, nvdisasm):
    # GIVEN a report of a fault dump and of a hang dump
    report = build_report(_analyze(corpus / f"{name}.nvcudmp", nvdisasm))
    copy = RELOCATED if corpus == DUMPS else DATA_CLEARED
    # THEN the nvdisasm row says which copy it read, in every format
    entry = _provenance(report, "nvdisasm")
    assert (entry["status"], entry["image"]) == ("used", copy)
    jsonschema.validate(report, SCHEMA)
    for fmt in ("text", "md", "html"):
        assert f"used on the {copy}" in render("analyze", report, fmt), fmt


# --- both relocated copies refused: the non-relocated image ------------------------------


def _corrupt_code_alignment(source: Path, target: Path) -> Path:
    """`source` with the faulting kernel's code-section header in its relocated image given
    sh_addralign 3, which nvdisasm refuses in every relocated copy; postmortem's reader does
    not mind, and a `.cudbg.elfimg`, if the dump has one, is left as it was."""
    image, kernel = _fault_image(source)
    data = bytearray(source.read_bytes())
    at = data.find(image)
    assert at > 0 and data.find(image, at + 1) < 0
    text = ElfImage(image).find_section(f".text.{kernel}")
    assert text is not None
    struct.pack_into("<Q", data, at + text.header_offset + _SHDR_ADDRALIGN, 3)
    target.write_bytes(data)
    return target


def test_the_non_relocated_image_is_read_when_every_relocated_copy_is_refused(
    corpus, tmp_path, nvdisasm
):
    # GIVEN oob_store_memory (it holds the non-relocated image) with its relocated image's
    # code-section header damaged
    truth = truth_of(DUMPS / "oob_store_memory.nvcudmp")["fault"]
    dump = _corrupt_code_alignment(corpus / "oob_store_memory.nvcudmp", tmp_path / "c.nvcudmp")
    # WHEN the fault is localized
    (site,) = _sites(dump, nvdisasm, sources=SourcePaths((FIXTURES / "cu",)))
    # THEN the listing comes from the non-relocated image, at function-relative offsets
    assert site.disassembly is not None and site.disassembly.image == NON_RELOCATED
    assert site.instruction is not None and site.offset == truth["offset"]
    assert site.instruction.offset == site.faults[0].function_offset == truth["offset"]
    assert site.instruction.text.rstrip(" ;") == truth["sass"].rstrip(" ;")
    chain = [[PurePosixPath(f.file).name, f.line] for f in site.chain]
    assert chain == truth["expected_chain"]
    assert not [d for d in site.diagnoses if d.code.value.startswith("nvdisasm-")]
    assert site.forensics is not None and site.forensics.lanes
    # AND the report says so
    report = build_report(_analyze(dump, nvdisasm))
    assert _provenance(report, "nvdisasm")["image"] == NON_RELOCATED


def test_when_every_copy_is_refused_the_diagnosis_quotes_nvdisasm(corpus, tmp_path, nvdisasm):
    # GIVEN oob_store (no non-relocated image) with its code-section header damaged
    dump = _corrupt_code_alignment(corpus / "oob_store.nvcudmp", tmp_path / "c.nvcudmp")
    # WHEN it is analyzed
    analysis = _analyze(dump, nvdisasm)
    # THEN there is no disassembly, and the diagnosis quotes nvdisasm's refusal
    (site,) = analysis.sites
    assert site.disassembly is None and site.function is not None
    (refusal,) = [d for d in site.diagnoses if d.code.value.startswith("nvdisasm-")]
    assert refusal.code is FindingCode.NVDISASM_FAILED
    assert refusal.message.startswith("nvdisasm refused the image: ")
    assert "Invalid section alignment of 0x3 for section .text._Z10oob_kernelPfif" in (
        refusal.message
    )
    assert "not installed" not in refusal.message
    note = _provenance(build_report(analysis), "nvdisasm")["note"]
    assert note.startswith("nvdisasm refused the image: ")
    # AND a scan row names the refusal (remembered: the same image is refused every time),
    # and its signature keeps every frame: the chain comes from the cubin's line table
    row = scan_dump(dump, _work(nvdisasm))
    assert row.instruction is None and row.instruction_note
    assert "Invalid section alignment" in row.instruction_note
    assert not row.degraded and row.signature is not None
    assert row.signature.quality.line_info and row.signature.quality.advice is None
    assert row.signature.frames


def test_a_scan_without_nvdisasm_signs_the_dump_as_a_scan_with_it(nvdisasm):
    # GIVEN the same dump scanned without nvdisasm and with it
    row = scan_dump(DUMPS / "oob_store.nvcudmp", _work("/nonexistent/nvdisasm"))
    full = scan_dump(DUMPS / "oob_store.nvcudmp", _work(nvdisasm))
    # THEN the row has no instruction and says why, the signature the same; the scan's
    # cache is keyed by the nvdisasm found, so installing it later redoes the row
    assert (row.instruction, row.instruction_note) == (None, "nvdisasm not found")
    assert full.instruction is not None and not full.degraded
    assert row.signature is not None and full.signature is not None
    assert row.signature.key == full.signature.key and row.signature.frames
    analysis = _analyze(DUMPS / "oob_store.nvcudmp", "/nonexistent/nvdisasm")
    assert FindingCode.NVDISASM_MISSING in {d.code for d in analysis.sites[0].diagnoses}


def _work(nvdisasm) -> WorkOptions:
    return WorkOptions(
        AnalyzeOptions(LocalizeOptions(nvdisasm=nvdisasm), cuda_gdb=False), load_rules()
    )


# --- hundreds of fault sites, one nvdisasm run per function ------------------------------

# Every v7 kernel of these cubins, plus one ABI v8 cubin: 11 functions, 648 instructions.
_MANY_SITE_CUBINS = (
    ("cutlass_like", "v7"), ("second_module", "v7"), ("device_assert", "v7"),
    ("shared_overflow", "v7"), ("two_kernels", "v7"), ("misaligned_load", "v7"),
    ("divergent_barrier", "v7"), ("oob_store", "v7"), ("hostile_names", "v7"),
    ("cutlass_like", "v8"),
)  # fmt: skip
_BASE, _STRIDE = 0x7F3C_2A00_0000, 0x20_0000
_CONTEXT, _HANDLE = 0x5612_39F0_0000, 0x5612_3A40_0000
_INSTRUCTION = 16
_WARP_ILLEGAL_ADDRESS = 14


def _write_many_sites_dump(path: Path, convention: str) -> tuple[int, int, int]:
    """A dump whose faulting lanes sit at every instruction of every kernel of
    `_MANY_SITE_CUBINS`, each kernel in its own grid and block; returns (lanes, distinct
    PCs, functions)."""
    index = CubinIndex(FIXTURES / "cubins" / "index.json")
    modules, grids, sms = [], [], []
    lanes_total = pcs = 0
    for m, (name, abi) in enumerate(_MANY_SITE_CUBINS):
        cubin = index.get(name, abi)
        image = relocate_cubin(cubin.data, _BASE + m * _STRIDE, convention)
        handle = _HANDLE + m * 0x1000
        modules.append(G.Module({"moduleHandle": handle}, image.data))
        for kernel in cubin.kernels:
            text = image.section_addrs[f".text.{kernel['name']}"]
            count = int(kernel["size"]) // _INSTRUCTION
            # A warp more for the first (largest) kernel: 24 warps, 768 faulting lanes in all.
            warps = -(-count // 32) + (1 if not grids else 0)
            grid_id = len(grids) + 1
            grids.append(_grid(grid_id, text, handle, kernel, warps))
            sms.append(G.Sm({"smId": len(sms)}, [_cta(grid_id, text, kernel, count, warps)]))
            lanes_total, pcs = lanes_total + 32 * warps, pcs + count
    context = G.Context({"contextId": _CONTEXT, "deviceIdx": 0}, modules)
    device = G.Device(_device_row(), [context], grids, sms)
    with path.open("wb") as file, DumpWriter(file) as writer:
        G.write_state(writer, G.GpuState([device]), "r400")
    return lanes_total, pcs, len(grids)


def _grid(grid_id: int, text: int, handle: int, kernel, warps: int) -> G.Grid:
    row = {
        "gridId64": grid_id, "contextId": _CONTEXT, "functionEntry": text,
        "moduleHandle": handle, "paramsOffset": 0x210, "kernelType": 2, "gridStatus": 2,
        "numRegs": kernel["num_regs"], "gridDimX": 1, "gridDimY": 1, "gridDimZ": 1,
        "blockDimX": 32 * warps, "blockDimY": 1, "blockDimZ": 1,
    }  # fmt: skip
    params = (0x7F00_0000_0000 + grid_id * 0x1000_0000).to_bytes(8, "little")
    return G.Grid(row, params.ljust(int(kernel["param_size"]), b"\0"))


def _cta(grid_id: int, text: int, kernel, count: int, warps: int) -> G.Cta:
    regs = int(kernel["num_regs"])
    rows = []
    for w in range(warps):
        lanes = []
        for ln in range(32):
            offset = (w * 32 + ln) % count * _INSTRUCTION  # every instruction, then again
            row = {"virtualPC": text + offset, "physPC": offset, "ln": ln,
                   "threadIdxX": 32 * w + ln, "exception": _WARP_ILLEGAL_ADDRESS}  # fmt: skip
            registers = struct.pack(f"<{regs}I", *((grid_id << 24 | w << 16 | ln << 8 | r)
                                                   for r in range(regs)))  # fmt: skip
            lanes.append(G.Lane(row, registers, bytes(28)))
        full = (1 << 32) - 1
        rows.append(G.Warp({"warpId": w, "validLanesMask": full, "activeLanesMask": full}, lanes))
    return G.Cta({"gridId64": grid_id, "blockIdxX": 0}, rows)


def _device_row():
    return {
        "devName": "NVIDIA H100 80GB HBM3", "devType": "GH100", "smType": "sm_90",
        "devId": 0, "pciBusId": 0x18, "numSMs": 132, "numWarpsPerSM": 64,
        "numLanesPerWarp": 32, "numRegsPerLane": 255, "numPredicatesPrLane": 7,
        "smMajor": 9, "smMinor": 0, "instructionSize": _INSTRUCTION,
        "numUniformRegsPrWarp": 63, "numUniformPredicatesPrWarp": 7,
    }  # fmt: skip


def _counting_nvdisasm(tmp_path: Path, nvdisasm: Path) -> tuple[Path, Path]:
    """A wrapper that logs each nvdisasm run, then runs the real one."""
    log = tmp_path / "nvdisasm.log"
    wrapper = tmp_path / "nvdisasm"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{nvdisasm}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


@pytest.mark.parametrize("convention", ["code", "alloc"])
def test_hundreds_of_fault_sites_cost_one_nvdisasm_run_per_function(convention, tmp_path, nvdisasm):
    # GIVEN a dump whose 768-odd faulting lanes sit at some 650 distinct PCs of 11 kernels
    dump = tmp_path / "many_sites.nvcudmp"
    lanes, pcs, functions = _write_many_sites_dump(dump, convention)
    assert lanes == 768 and pcs >= 600
    wrapper, log = _counting_nvdisasm(tmp_path, nvdisasm)
    # WHEN it is analyzed
    started = time.perf_counter()
    analysis = _analyze(dump, wrapper, sources=SourcePaths((FIXTURES / "cu",)))
    seconds = time.perf_counter() - started
    # THEN every PC is a site with its instruction and forensics
    assert len(analysis.sites) == pcs
    assert all(s.instruction is not None and s.forensics is not None for s in analysis.sites)
    # AND nvdisasm ran once per function; under "alloc", each module's relocated image was
    # refused once more before the copy that works was remembered for its other functions
    runs = [line for line in log.read_text().splitlines() if "-fun" in line]
    modules = len(_MANY_SITE_CUBINS)
    assert len(runs) == functions + (modules if convention == "alloc" else 0)
    copies = {s.disassembly.image for s in analysis.sites if s.disassembly}
    assert copies == {RELOCATED if convention == "code" else DATA_CLEARED}
    print(
        f"{convention}: {len(analysis.sites)} sites, {lanes} faulting lanes, "
        f"{functions} functions, {len(runs)} nvdisasm runs, analyzed in {seconds:.2f} s"
    )
