"""The code map: PC → module, section and function, per device, over tiny dumps."""

from __future__ import annotations

from postmortem import open_coredump
from postmortem.codemap import CodeMap, find_faults
from postmortem.model import FaultSource
from tests.tinydump import (
    CONTEXT_ID,
    WARP_ILLEGAL_ADDRESS,
    BlockSpec,
    DeviceSpec,
    DumpSpec,
    GridSpec,
    LaneSpec,
    ModuleSpec,
    WarpSpec,
    cubin,
    kernel_text,
    patch_section,
    relocated,
    write_tiny_dump,
)

OOB = cubin("oob_store")
MISALIGNED = cubin("misaligned_load")
SHARED_HANDLE = 0x5612_3A40_0000
OTHER_CONTEXT = 0x5612_39F1_0000
OOB_KERNEL = "_Z10oob_kernelPfif"
MISALIGNED_KERNEL = "_Z17misaligned_kernelPKfPfi"


def _faulting_device(name: str, base: int, context_id: int = CONTEXT_ID) -> DeviceSpec:
    """A device with one module of fixture `name` (handle `SHARED_HANDLE`) and one lane
    faulting at the fixture's planted fault."""
    module = ModuleSpec(name, handle=SHARED_HANDLE, base=base, context_id=context_id)
    lane = LaneSpec(cubin(name).fault["offset"], WARP_ILLEGAL_ADDRESS)
    block = BlockSpec(1, [WarpSpec([lane])])
    return DeviceSpec([module], [GridSpec(1, module)], [block])


def _two_devices(tmp_path, second_base=0x7F3C_4A00_0000, second_context=CONTEXT_ID):
    """oob_store on device 0 and misaligned_load on device 1, both with `SHARED_HANDLE`."""
    devices = [
        _faulting_device("oob_store", 0x7F3C_2A00_0000),
        _faulting_device("misaligned_load", second_base, second_context),
    ]
    return devices, write_tiny_dump(tmp_path / "two.nvcudmp", DumpSpec(devices))


def test_two_devices_sharing_a_handle_keep_their_own_kernels(tmp_path):
    # GIVEN two devices whose modules have the same handle but different cubins, addresses
    # and contexts
    devices, path = _two_devices(tmp_path, second_context=OTHER_CONTEXT)
    _, oob_text = kernel_text(devices[0].grids[0])
    _, misaligned_text = kernel_text(devices[1].grids[0])
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        # WHEN each device's PC is located on its own device
        oob = code_map.locate(0, oob_text + 0x10)
        misaligned = code_map.locate(1, misaligned_text + 0x20)
        # THEN each finds its own function, module and offset
        assert (oob.function, oob.module.device_index, oob.offset) == (OOB_KERNEL, 0, 0x10)
        assert (misaligned.function, misaligned.module.device_index) == (MISALIGNED_KERNEL, 1)
        assert misaligned.offset == 0x20
        assert oob.module_handle == misaligned.module_handle == SHARED_HANDLE
        # AND a PC of one device is found on no other device
        assert code_map.locate(1, oob_text + 0x10) is None
        assert code_map.locate(0, misaligned_text + 0x20) is None


def test_module_lookup_by_device_context_and_handle_gives_each_device_its_module(tmp_path):
    _, path = _two_devices(tmp_path, second_context=OTHER_CONTEXT)
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        kernels = {
            (m.module.device_index, m.module.context_id, m.module.module_handle): tuple(
                f.name for f in code_map.summary(m.module).kernels
            )
            for m in code_map.modules()
        }
        assert kernels == {
            (0, CONTEXT_ID, SHARED_HANDLE): (OOB_KERNEL,),
            (1, OTHER_CONTEXT, SHARED_HANDLE): (MISALIGNED_KERNEL,),
        }
        first, second = (m.module for m in code_map.modules())
        assert first != second
        assert code_map.find(second).summary.kernels[0].name == MISALIGNED_KERNEL


def test_faults_on_each_device_are_attributed_to_their_own_kernel(tmp_path):
    # GIVEN the same handle, and this time the same context id, on both devices
    _, path = _two_devices(tmp_path, second_context=CONTEXT_ID)
    with open_coredump(path) as core:
        # WHEN the faults are found
        faults = find_faults(core)
    # THEN each lies in its own device's kernel, at that fixture's planted offset
    located = [(f.device_index, f.location.function, f.location.offset) for f in faults]
    assert located == [
        (0, OOB_KERNEL, OOB.fault["offset"]),
        (1, MISALIGNED_KERNEL, MISALIGNED.fault["offset"]),
    ]
    assert [f.source for f in faults] == [FaultSource.LANE, FaultSource.LANE]


def test_same_address_on_two_devices_is_located_per_device(tmp_path):
    # GIVEN both devices load their (different) cubins at the same address
    devices, path = _two_devices(tmp_path, second_base=0x7F3C_2A00_0000)
    _, text = kernel_text(devices[0].grids[0])
    assert kernel_text(devices[1].grids[0])[1] == text
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        # THEN one PC names a different function on each device
        assert code_map.locate(0, text).function == OOB_KERNEL
        assert code_map.locate(1, text).function == MISALIGNED_KERNEL
        faults = find_faults(core, code_map)
    assert [f.location.function for f in faults] == [OOB_KERNEL, MISALIGNED_KERNEL]


def test_a_pc_outside_every_image_or_absent_is_not_located(tmp_path):
    devices, path = _two_devices(tmp_path)
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        assert code_map.locate(0, None) is None
        assert code_map.locate(0, 0x1000) is None
        end = relocated(devices[0].modules[0]).end
        assert code_map.locate(0, end) is None


def test_image_bytes_are_the_relocated_cubin(tmp_path):
    devices, path = _two_devices(tmp_path)
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        images = [code_map.image_bytes(m.module) for m in code_map.modules()]
    assert images == [relocated(d.modules[0]).data for d in devices]


def test_an_unreadable_image_is_set_aside_and_the_rest_still_maps(tmp_path):
    # GIVEN a device whose second module's image is not a cubin
    good = ModuleSpec("oob_store")
    junk = ModuleSpec("misaligned_load", image=b"not an ELF file at all" * 4)
    device = DeviceSpec([good, junk], [GridSpec(1, good), GridSpec(2, junk)])
    path = write_tiny_dump(tmp_path / "junk.nvcudmp", DumpSpec([device]))
    _, text = kernel_text(device.grids[0])
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        # THEN the good module maps, the junk one is listed as unreadable
        assert [m.module.module_handle for m in code_map.modules()] == [0x5612_3A40_0000]
        assert code_map.locate(0, text).function == OOB_KERNEL
        ((module, reason),) = code_map.unreadable
        assert module.module_handle == 0x5612_3A40_1000 and reason
        assert code_map.summary(module) is None and code_map.image_bytes(module) == b""


def test_a_root_level_image_serves_every_device(tmp_path):
    # GIVEN the relocated image of device 0 hung at the root (sh_link 0)
    devices, path = _two_devices(tmp_path)
    patch_section(path, ".cudbg.relfimg.dev0.ctx0.mod0", sh_link=0, sh_info=0)
    _, text = kernel_text(devices[0].grids[0])
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        # THEN its module has no handle, context or device, and any device finds its code
        location = code_map.locate(1, text)
        assert location.function == OOB_KERNEL
        assert (location.module_handle, location.module.device_index) == (None, None)


def test_an_image_larger_than_any_cubin_is_set_aside_not_copied(tmp_path):
    # GIVEN a dump whose relocated image's header points into a 16 GiB hole of zeros at the
    # end of the file (sparse: no disk used)
    import pytest

    from postmortem.coredump.reader import MAX_IMAGE_BYTES
    from postmortem.errors import CorruptSection

    module = ModuleSpec("oob_store")
    lane = LaneSpec(OOB.fault["offset"], exception=WARP_ILLEGAL_ADDRESS)
    device = DeviceSpec([module], [GridSpec(1, module)], [BlockSpec(1, [WarpSpec([lane])])])
    path = write_tiny_dump(tmp_path / "t.nvcudmp", DumpSpec([device]))
    end = path.stat().st_size
    hole = 16 << 30
    name = next(n for n in _section_names(path) if n.startswith(".cudbg.relfimg"))
    patch_section(path, name, sh_offset=end, sh_size=hole)  # reads the file whole: first
    with path.open("r+b") as file:
        file.truncate(end + hole)
    # WHEN it is read
    with open_coredump(path) as core:
        code_map = CodeMap(core)
        # THEN the image is set aside with the reason, and reading it is refused, not copied
        assert code_map.modules() == []
        assert "larger than any cubin" in code_map.unreadable[0][1]
        (image_module,) = core.all_modules()
        assert image_module.relocated_image.size_bytes > MAX_IMAGE_BYTES
        with pytest.raises(CorruptSection):
            core.image_bytes(image_module.relocated_image)


def _section_names(path):
    from io import BytesIO

    from elftools.elf.elffile import ELFFile

    with path.open("rb") as file:
        head = file.read(1 << 20)
    return [s.name for s in ELFFile(BytesIO(head)).iter_sections()]
