"""`postmortem extract`: the cubins of a dump written out, for those who continue by hand.

Each file is named so a person can tell them apart (device, context, module handle, first
kernel, relocated or not); `index.json` and `index.txt` say which kernels each holds and
which one faulted. Existing files are never overwritten unless asked, and a symbolic link
in the output folder is never followed: it is refused, or with `force` replaced by the file
(the link itself is removed; what it pointed to is left alone). The folder may itself be a
link: the user named it.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from postmortem.codemap import CodeMap, find_faults
from postmortem.coredump import Coredump
from postmortem.cubin.inspect import CubinSummary, summarize_cubin
from postmortem.demangle import base_name
from postmortem.errors import OutputExists, OutputIsSymlink, OutputUnwritable
from postmortem.model import Image, Module
from postmortem.report.render import render

_MAX_STEM = 48
# O_EXCL: a file is only ever created, so nothing that appeared in its place (a link, a
# file) is written through; O_NOFOLLOW says the same of links, in case O_EXCL is dropped.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class ExtractedKernel:
    """A function of an extracted cubin."""

    name: str
    demangled: str
    symbol_index: int
    address: int
    size_bytes: int
    is_kernel: bool
    faulted: bool
    """True when a fault in the dump lies inside this function."""


@dataclass(frozen=True, slots=True)
class ExtractedCubin:
    """One file written by `extract`."""

    file: str
    device_index: int | None
    """None (with the context and handle) for a root-level image, which no module row names."""
    context_id: int | None
    module_handle: int | None
    relocated: bool
    size_bytes: int
    abi_version: int | None
    sm_arch: int | None
    functions: tuple[ExtractedKernel, ...]


def extract_cubins(
    core: Coredump, out_dir: Path, *, force: bool = False
) -> tuple[ExtractedCubin, ...]:
    """Write every cubin of `core` (relocated and non-relocated) and an index into `out_dir`.

    Raises:
        OutputIsSymlink: a file to be written is a symbolic link and `force` is False.
        OutputExists: a file to be written exists already and `force` is False.
        OutputUnwritable: `out_dir` or a file in it cannot be created.
    """
    code_map = CodeMap(core)
    faulted = _faulted_ranges(core, code_map)
    plan = []
    for module in core.all_modules():
        for image in (module.relocated_image, module.unrelocated_image):
            if image is not None:
                data = core.image_bytes(image)
                # Locating the faults has read the relocated images already.
                known = code_map.summary(module) if image.relocated else None
                plan.append((module, image, data, known or _summary(data)))
    written = _unique_files(tuple(_describe(m, i, d, s, faulted) for m, i, d, s in plan))
    entries = index_entries(written)
    files = [(e.file, data) for e, (_, _, data, _) in zip(written, plan, strict=True)]
    files.append(("index.json", render("extract", entries, "json").encode()))
    files.append(("index.txt", render("extract", entries, "text").encode()))
    _write_files(out_dir, files, force)
    return written


def index_entries(written: tuple[ExtractedCubin, ...]) -> list[dict[str, Any]]:
    """The extract index's view model (index.json is exactly this)."""
    return [asdict(e) for e in written]


def _write_files(out_dir: Path, files: Sequence[tuple[str, bytes]], force: bool) -> None:
    # Every file is created relative to the folder opened once: a link put in the folder's
    # place later cannot send the files elsewhere.
    folder = _open_folder(out_dir)
    try:
        _check_targets(out_dir, folder, [name for name, _ in files], force)
        for name, data in files:
            _create(out_dir, folder, name, data, force)
    finally:
        os.close(folder)


def _open_folder(out_dir: Path) -> int:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        return os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise OutputUnwritable(out_dir, error.strerror or str(error)) from None


def _check_targets(out_dir: Path, folder: int, names: list[str], force: bool) -> None:
    """Refuse, unless `force`, when a file to be written is there already: links first, for
    they are the surprise (a file written through one lands outside the folder)."""
    links: list[str] = []
    existing: list[str] = []
    for name in names:
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise OutputUnwritable(out_dir / name, error.strerror or str(error)) from None
        (links if stat.S_ISLNK(info.st_mode) else existing).append(name)
    if force:
        return
    if links:
        target = os.readlink(links[0], dir_fd=folder)
        raise OutputIsSymlink(out_dir / links[0], target, len(links))
    if existing:
        raise OutputExists(out_dir / existing[0], len(existing))


def _create(out_dir: Path, folder: int, name: str, data: bytes, replace_old: bool) -> None:
    try:
        if replace_old:  # the entry itself goes, a link included; never what a link points to
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
        fd = os.open(name, _CREATE, 0o666, dir_fd=folder)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
    except FileExistsError:  # it appeared since the check
        raise OutputExists(out_dir / name, 1) from None
    except OSError as error:
        raise OutputUnwritable(out_dir / name, error.strerror or str(error)) from None


def _unique_files(written: tuple[ExtractedCubin, ...]) -> tuple[ExtractedCubin, ...]:
    """Two images described alike (root-level images with the same first kernel) get `.2`,
    `.3`… before `.cubin`: each is written, neither replaces the other."""
    taken: set[str] = set()
    unique = []
    for entry in written:
        name, number = entry.file, 1
        while name in taken:
            number += 1
            name = entry.file.removesuffix(".cubin") + f".{number}.cubin"
        taken.add(name)
        unique.append(replace(entry, file=name) if name != entry.file else entry)
    return tuple(unique)


def _summary(data: bytes) -> CubinSummary | None:
    try:
        return summarize_cubin(data)
    except Exception:  # a corrupt image is still written out; its index entry says unknown
        return None


def _faulted_ranges(core: Coredump, code_map: CodeMap) -> set[tuple[int | None, int]]:
    """(module handle, section address) of every code section holding a fault PC."""
    found = set()
    for fault in find_faults(core, code_map):
        if fault.location is not None:
            found.add((fault.location.module_handle, fault.location.section_address))
    return found


def _part(prefix: str, value: int | None, spec: str) -> str:
    # A root-level image has no module row: its device, context and handle are unknown.
    return f"{prefix}{format(value, spec)}" if value is not None else f"{prefix}-unknown"


def _describe(
    module: Module,
    image: Image,
    data: bytes,
    summary: CubinSummary | None,
    faulted: set[tuple[int | None, int]],
) -> ExtractedCubin:
    functions = () if summary is None else tuple(
        ExtractedKernel(
            f.name, f.demangled, f.symbol_index, f.address, f.size_bytes, f.is_kernel,
            image.relocated and (module.module_handle, f.address) in faulted,
        )
        for f in summary.functions
    )  # fmt: skip
    first = next((f.demangled for f in functions if f.is_kernel), None) or "no-kernels"
    kind = "relocated" if image.relocated else "unrelocated"
    name = (
        f"{_part('dev', module.device_index, 'd')}.{_part('ctx', module.context_id, 'x')}."
        f"{_part('mod', module.module_handle, 'x')}.{_file_stem(first)}.{kind}.cubin"
    )
    return ExtractedCubin(
        name, module.device_index, module.context_id, module.module_handle, image.relocated,
        len(data), summary.abi_version if summary else None, summary.sm_arch if summary else None,
        functions,
    )  # fmt: skip


def _file_stem(demangled: str) -> str:
    """`void ns::gemm<float, 4>(Params)` → `gemm`: short, and safe in a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base_name(demangled))[:_MAX_STEM] or "kernel"
