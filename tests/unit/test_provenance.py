"""Provenance: how each module was built, and which tool gave which facts (or why not)."""

from __future__ import annotations

from dataclasses import replace

from postmortem import open_coredump
from postmortem.analysis.crosscheck import CrossCheck
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.analysis.hang.hang import HangAnalysis
from postmortem.analysis.provenance import BuildInfo, build_provenance, tool_uses
from postmortem.codemap import CodeMap
from postmortem.cubin.nvdisasm import Disassembly
from postmortem.cubin.nvinfo import ToolkitInfo
from postmortem.cubin.sass import SassListing
from postmortem.findings import Finding, FindingCode, Severity
from tests.tinydump import (
    HANDLE,
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    write_tiny_dump,
)

OOB = "_Z10oob_kernelPfif"


def test_each_module_build_is_read_from_its_cubin_once_in_the_order_given(tmp_path):
    # GIVEN a v7 cubin with line info and a v8 one compiled without -lineinfo
    with_lines, without = ModuleSpec("oob_store"), ModuleSpec("oob_store_nolineinfo", "v8")
    grids = [GridSpec(1, with_lines), GridSpec(2, without)]
    spec = DumpSpec([DeviceSpec([with_lines, without], grids)])
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", spec)) as core:
        code_map = CodeMap(core)
        first, second = (m.module for m in code_map.modules())
        # WHEN asked for the second, the first, and the second again
        builds = build_provenance(code_map, [second, first, second])
    # THEN each is listed once, with what its cubin says
    assert [(b.module_handle, b.kernels, b.abi_version, b.sm_arch) for b in builds] == [
        (HANDLE + 0x1000, (OOB,), 8, 90),
        (HANDLE, (OOB,), 7, 90),
    ]
    assert builds[0].line_info == "compiled without -lineinfo"
    assert builds[0].toolkit is not None and builds[0].toolkit.has_lineinfo_option is False
    assert (builds[1].has_line_info, builds[1].line_info) == (True, "line info present")


def _toolkit(options):
    return ToolkitInfo("ptxas", None, None, options, None, 2, "sm_90", (13, 5))


def test_line_info_phrase_tells_stripped_from_never_compiled():
    build = BuildInfo(HANDLE, (OOB,), 8, 90, _toolkit("-lineinfo -arch sm_90"), False)
    assert build.line_info == "line info removed after compilation (compiled with -lineinfo)"
    unknown = replace(build, toolkit=None)
    assert unknown.line_info == "no line info; the cubin does not record how it was compiled"


def _sites(tmp_path, options):
    module = ModuleSpec("oob_store")
    block = BlockSpec(1, [WarpSpec([LaneSpec(0xD0, 14)])])
    spec = DumpSpec([DeviceSpec([module], [GridSpec(1, module)], [block])])
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", spec)) as core:
        return localize(core, options)


def test_without_sites_tools_say_why_they_gave_nothing():
    native, nvdisasm, gdb = tool_uses("0.1.0", (), None, None, "cuda-gdb not run (--no-gdb)")
    assert (native.source, native.version, native.used) == ("native reader", "0.1.0", True)
    assert (nvdisasm.used, nvdisasm.note, nvdisasm.image) == (
        False, "no fault to disassemble", None,
    )  # fmt: skip
    assert (gdb.used, gdb.note) == (False, "cuda-gdb not run (--no-gdb)")


def test_a_missing_nvdisasm_is_the_reason_there_is_no_listing(tmp_path):
    sites = _sites(tmp_path, LocalizeOptions(nvdisasm="/nonexistent/nvdisasm"))
    nvdisasm = tool_uses("0.1.0", sites, None, None, None)[1]
    assert (nvdisasm.used, nvdisasm.note) == (
        False, "nvdisasm is not installed: no SASS instructions; native facts and the cubin's line "
        "table only",
    )  # fmt: skip
    skipped = tool_uses(
        "0.1.0", _sites(tmp_path, LocalizeOptions(nvdisasm=False)), None, None, None
    )
    assert skipped[1].note == "not run"


def test_a_hang_listing_names_the_nvdisasm_version_and_copy():
    listing = Disassembly(
        SassListing(OOB, f".text.{OOB}", (), (), False), "13.5.37", (), 0.1, "", "relocated image"
    )
    hang = HangAnalysis((), (), (), (listing,))
    nvdisasm = tool_uses("0.1.0", (), hang, None, None)[1]
    assert (nvdisasm.used, nvdisasm.version, nvdisasm.note, nvdisasm.image) == (
        True, "13.5.37", None, "relocated image",
    )  # fmt: skip


def test_cuda_gdb_is_used_only_when_it_opened_the_dump():
    refusal = Finding(FindingCode.GDB_COREDUMP_REFUSED, Severity.ERROR, "it refused the dump")
    refused = CrossCheck("11.8", (), False, (), (refusal,))
    gdb = tool_uses("0.1.0", (), None, refused, None)[2]
    assert (gdb.version, gdb.used, gdb.note) == ("11.8", False, "it refused the dump")
    silent = tool_uses("0.1.0", (), None, replace(refused, notes=()), None)[2]
    assert silent.note == "could not read the dump"
    opened = tool_uses("0.1.0", (), None, replace(refused, opened=True), None)[2]
    assert (opened.used, opened.note) == (True, None)
