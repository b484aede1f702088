"""What reading a damaged dump cost, as findings: one per salvage, most serious first."""

from __future__ import annotations

from postmortem import open_coredump
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.codemap import CodeMap
from postmortem.cubin.elfimage import ElfImage
from postmortem.findings import FindingCode, Severity
from postmortem.salvage import dump_findings
from tests.tinydump import (
    HANDLE,
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    patch_section,
    relocated,
    write_tiny_dump,
)


def _dump(tmp_path, *modules):
    modules = modules or (ModuleSpec("oob_store"),)
    grids = [GridSpec(n + 1, m) for n, m in enumerate(modules)]
    block = BlockSpec(1, [WarpSpec([LaneSpec(0x10, 14)])])
    return write_tiny_dump(
        tmp_path / "t.nvcudmp", DumpSpec([DeviceSpec(list(modules), grids, [block])])
    )


def _findings(path):
    with open_coredump(path) as core:
        return dump_findings(core, CodeMap(core))


def test_a_whole_dump_costs_nothing(tmp_path):
    assert _findings(_dump(tmp_path)) == ()


def test_an_image_that_is_not_a_cubin_is_an_unreadable_image_warning(tmp_path):
    # GIVEN a second module whose relocated image is junk
    path = _dump(tmp_path, ModuleSpec("oob_store"), ModuleSpec("two_kernels", image=bytes(64)))
    # THEN one warning names the module by its handle and says its code is unknown
    (finding,) = _findings(path)
    assert (finding.code, finding.severity) == (FindingCode.UNREADABLE_IMAGE, Severity.WARNING)
    assert finding.message.startswith(
        f"partial dump: the relocated image of module 0x{HANDLE + 0x1000:x} is not a readable cubin"
    )
    assert finding.remedy is not None


def test_a_table_with_a_broken_stride_is_a_partial_dump(tmp_path):
    # GIVEN a lane table whose sh_entsize is not a whole fraction of its size
    path = _dump(tmp_path)
    patch_section(path, ".cudbg.lntbl.dev0.sm0.cta0.wp0", sh_entsize=7)
    # THEN the table is set aside, and so are the register and predicate sections under it:
    # three warnings, each with what to do
    table, registers, predicates = _findings(path)
    assert {f.code for f in (table, registers, predicates)} == {FindingCode.PARTIAL_DUMP}
    assert table.message == (
        "partial dump: 1 lane table section has an impossible row size (first: "
        ".cudbg.lntbl.dev0.sm0.cta0.wp0: sh_entsize 7, sh_size 48); those lanes (threads) "
        "are unknown"
    )
    assert "the registers of those lanes are unknown" in registers.message
    assert "the predicates of those lanes are unknown" in predicates.message
    assert table.severity is Severity.WARNING and "write it again" in table.remedy


def test_a_root_level_image_is_information_listed_after_warnings(tmp_path):
    # GIVEN a root-level image (no module row names it) and a junk image
    path = _dump(tmp_path, ModuleSpec("oob_store"), ModuleSpec("two_kernels", image=bytes(64)))
    patch_section(path, ".cudbg.relfimg.dev0.ctx0.mod0", sh_link=0, sh_info=0)
    # THEN the warning comes first, the root-level image is information without remedy
    findings = _findings(path)
    assert [(f.code, f.severity) for f in findings] == [
        (FindingCode.UNREADABLE_IMAGE, Severity.WARNING),
        (FindingCode.ROOT_LEVEL_IMAGE, Severity.INFO),
    ]
    assert findings[1].remedy is None


def test_line_info_that_cannot_be_decoded_is_a_warning_and_the_chain_is_left_out(tmp_path):
    # GIVEN a module whose relocated image has a .debug_line unit longer than its section
    image = bytearray(relocated(ModuleSpec("oob_store")).data)
    section = ElfImage(bytes(image)).find_section(".debug_line")
    assert section is not None
    image[section.offset : section.offset + 4] = (0x7FFFFFF0).to_bytes(4, "little")
    path = _dump(tmp_path, ModuleSpec("oob_store", image=bytes(image)))
    # WHEN the fault is localized (no tool) and the dump's findings are read
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        (site,) = localize(core, LocalizeOptions(nvdisasm=False), code_map)
        findings = dump_findings(core, code_map)
    # THEN the site has no chain rather than a wrong one, and a warning says why
    assert site.chain == () and site.function is not None
    (warning,) = [f for f in findings if "debug line info" in f.message]
    assert warning.code is FindingCode.UNREADABLE_IMAGE and warning.severity is Severity.WARNING
    assert "runs past the section" in warning.message
