"""disassemble_function where no nvdisasm can run, and the per-analysis memo of quotes."""

from __future__ import annotations

from postmortem import open_coredump
from postmortem.analysis.fault.disassembly import disassemble_function, quoted
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.analysis.fault.source import SourcePaths
from postmortem.codemap import CodeMap
from postmortem.cubin.sass import SourceFrame
from postmortem.findings import FindingCode
from tests.tinydump import DeviceSpec, DumpSpec, GridSpec, ModuleSpec, cubin, write_tiny_dump


def test_a_missing_nvdisasm_gives_no_listing_and_the_install_hint(tmp_path):
    # GIVEN a dump of oob_store and an nvdisasm path that does not exist
    module = ModuleSpec("oob_store")
    spec = DumpSpec([DeviceSpec([module], [GridSpec(1, module)])])
    kernel = cubin("oob_store").kernels[0]
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", spec)) as core:
        code_map = CodeMap(core)
        (loaded,) = code_map.modules()
        function = loaded.summary.kernels[0]
        # WHEN its kernel is disassembled
        result, note = disassemble_function(
            core, code_map, loaded.module, function.symbol_index, function.address,
            LocalizeOptions(nvdisasm="/nonexistent/nvdisasm"),
        )  # fmt: skip
    # THEN there is no listing, and the diagnosis says nvdisasm is missing
    assert function.symbol_index == kernel["symbol_index"]
    assert result is None
    assert note.code is FindingCode.NVDISASM_MISSING
    assert note.remedy == "pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump"


def test_quotes_are_worked_out_once_per_code_map(tmp_path):
    (tmp_path / "k.cu").write_text("one\ntwo\n")
    module = ModuleSpec("oob_store")
    spec = DumpSpec([DeviceSpec([module], [GridSpec(1, module)])])
    chain = (SourceFrame("k.cu", 2),)
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", spec)) as core:
        code_map = CodeMap(core)
        first = quoted(code_map, chain, SourcePaths((tmp_path,)))
        assert [q.text for q in first] == ["two"]
        (tmp_path / "k.cu").write_text("changed\nsince\n")
        assert quoted(code_map, chain, SourcePaths((tmp_path,))) is first
        assert [q.text for q in quoted(CodeMap(core), chain, SourcePaths((tmp_path,)))] == ["since"]
