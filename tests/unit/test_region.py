"""Where faulting addresses fall: captured memory, the shared or local window, alignment."""

from __future__ import annotations

from postmortem import open_coredump
from postmortem.analysis.forensics.region import AddressCheck, check_addresses
from postmortem.codemap import find_faults
from postmortem.cubin.operands import decode_access
from postmortem.cubin.sass import parse_sass
from tests.tinydump import (
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    write_tiny_dump,
)

BUFFER = 0x7F00_1000_0000
SHARED_WINDOW, LOCAL_WINDOW = 0x7F10_0000_0000, 0x7F11_0000_0000
SKIP_GLOBAL_MEMORY = 2


def _checks(
    tmp_path, text, addresses, *, exception=14, layout="r400", shared=None, **dump
):  # fmt: skip
    (instruction,) = parse_sass(f"        /*0000*/                   {text} ;").instructions
    module = ModuleSpec("oob_store")
    warp = WarpSpec([LaneSpec(0x10, exception)], shared_mem_size=shared)
    device = DeviceSpec(
        [module], [GridSpec(1, module)], [BlockSpec(1, [warp])],
        shared_window_base=SHARED_WINDOW, local_window_base=LOCAL_WINDOW,
    )  # fmt: skip
    spec = DumpSpec([device], layout=layout, **dump)
    with open_coredump(write_tiny_dump(tmp_path / "t.nvcudmp", spec)) as core:
        return check_addresses(core, decode_access(instruction), find_faults(core), addresses)


def test_a_lightweight_dump_cannot_tell_whether_a_global_address_is_mapped(tmp_path):
    (check,) = _checks(
        tmp_path, "STG.E desc[UR4][R2.64], R7", [BUFFER],
        layout="r565", metadata_flags=SKIP_GLOBAL_MEMORY,
    )  # fmt: skip
    assert (check.check, check.verdict) == ("global-segment", None)
    assert "the dump was written with skip_global_memory" in check.message


def test_global_addresses_inside_and_outside_captured_memory(tmp_path):
    memory = [(BUFFER, bytes(0x1000))]
    (inside,) = _checks(tmp_path, "STG.E desc[UR4][R2.64], R7", [BUFFER + 0xFFC], memory=memory)
    assert inside.verdict is True
    (outside,) = _checks(
        tmp_path, "STG.E desc[UR4][R2.64], R7", [BUFFER + 0x10, BUFFER + 0x2000], memory=memory
    )
    assert outside.verdict is False
    assert outside.message == (
        f"1 of 2 addresses lie outside every captured segment; the nearest segment to "
        f"0x{BUFFER + 0x2000:x} is global [0x{BUFFER:x}, 0x{BUFFER + 0x1000:x})"
    )


def test_a_shared_store_past_the_block_shared_memory_size_overflows(tmp_path):
    # GIVEN a 2 KiB block (r570 warp rows hold sharedMemSize) and 4-byte stores at 2040, 2048
    (check,) = _checks(tmp_path, "STS [R7+0x10], R0", [2040, 2048], layout="r570", shared=2048)
    # THEN the second one ends 4 bytes past the window
    assert check == AddressCheck(
        "shared-size",
        False,
        "shared offset 2,048 (0x800) with a 4-byte access ends 4 bytes past the 2,048-byte "
        "window (the warp row's sharedMemSize); 1 of 2 lanes overflow",
        4,
    )


def test_without_a_shared_memory_size_the_shared_check_cannot_be_made(tmp_path):
    (check,) = _checks(tmp_path, "STS [R7+0x10], R0", [4096])
    assert (check.check, check.verdict) == ("shared-size", None)


def test_without_local_memory_the_local_check_cannot_be_made(tmp_path):
    (check,) = _checks(tmp_path, "STL [R1+0x8], R0", [0x10])
    assert (check.check, check.verdict) == ("local-size", None)


def test_a_generic_address_in_the_shared_window_is_checked_as_a_shared_offset(tmp_path):
    checks = _checks(
        tmp_path, "LD.E R9, desc[UR4][R8.64]", [SHARED_WINDOW + 0x900],
        layout="r570", shared=2048,
    )  # fmt: skip
    assert [(c.check, c.verdict, c.excess_bytes) for c in checks] == [
        ("shared-size", False, 0x904 - 2048)
    ]


def test_a_misaligned_address_is_reported_with_its_remainder(tmp_path):
    checks = _checks(tmp_path, "LDG.E.128 R8, desc[UR4][R2.64+0x4]", [BUFFER + 4], exception=6)
    alignment = checks[-1]
    assert (alignment.check, alignment.verdict, alignment.excess_bytes) == ("alignment", False, 4)
    assert alignment.message.startswith("misaligned by 4 bytes for a 16-byte access")


def test_aligned_addresses_under_a_misaligned_exception_say_the_pc_may_be_imprecise(tmp_path):
    text = "LDG.E.128 R8, desc[UR4][R2.64+0x4]"
    alignment = _checks(tmp_path, text, [BUFFER], exception=6)[-1]
    assert (alignment.check, alignment.verdict) == ("alignment", True)
    assert "the PC is imprecise" in alignment.message
    # AND under another exception, aligned addresses add no alignment check at all
    assert [c.check for c in _checks(tmp_path, text, [BUFFER])] == ["global-segment"]
