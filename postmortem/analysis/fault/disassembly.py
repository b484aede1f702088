"""A module's function disassembled once per analysis, whatever image nvdisasm refuses.

Fault sites and stuck warps ask for the functions they sit in; each (image, function) runs
nvdisasm once per analysis (one `CodeMap`), however many sites share it. When nvdisasm
refuses the relocated image (other producers give its data sections load addresses, which
nvdisasm 13.5 rejects), normalized copies are tried (`postmortem.cubin.normalize`), then the
module's non-relocated image; the result's `image` says which copy gave the listing, and its
offsets are made relative to the function's code section either way.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from typing import Protocol

from postmortem.analysis.fault import diagnose as dx
from postmortem.analysis.fault.source import QuotedLine, SourcePaths, quote
from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump
from postmortem.cubin.elfimage import ElfImage
from postmortem.cubin.normalize import (
    DATA_CLEARED,
    NON_RELOCATED,
    REBASED,
    RELOCATED,
    clear_data_addresses,
    rebase_to_zero,
)
from postmortem.cubin.nvdisasm import Disassembly, DisassemblyStore, disassemble
from postmortem.cubin.sass import SourceFrame
from postmortem.errors import MalformedElf, ToolFailed, ToolNotFound
from postmortem.findings import Finding
from postmortem.model import Fault, Module
from postmortem.tools import Tool


class ToolOptions(Protocol):
    """Which nvdisasm to run, for how long, and where to remember what it printed (a
    `LocalizeOptions` is one)."""

    @property
    def nvdisasm(self) -> Tool: ...

    @property
    def timeout(self) -> float: ...

    @property
    def store(self) -> DisassemblyStore | None: ...


_Disassembled = tuple[Disassembly | None, Finding | None]
_Copy = tuple[bytes, int]  # a copy of a module's image, and the function's symbol index in it


@dataclass
class _Memo:
    """What one analysis (one CodeMap) works out once, however many sites share it."""

    images: dict[Module, tuple[bytes, str]] = field(default_factory=dict)
    """Module → its relocated image and a digest of it."""
    copies: dict[tuple[str, str], bytes | None] = field(default_factory=dict)
    """(image digest, which copy) → that normalized copy (None: there is nothing to change)."""
    accepted: dict[str, str] = field(default_factory=dict)
    """Image digest → the copy nvdisasm last accepted: the module's next function tries it
    first, rather than being refused again on the copies before it."""
    disassemblies: dict[tuple[str, int, int, str], _Disassembled] = field(default_factory=dict)
    """(image digest, symbol index, section address, nvdisasm option) → the outcome."""
    quotes: dict[tuple[object, ...], tuple[QuotedLine, ...]] = field(default_factory=dict)
    """(chain, source dirs, path maps) → the quoted lines."""
    started: dict[tuple[str, int], Future[Disassembly]] = field(default_factory=dict)
    """(image digest, symbol index) → nvdisasm on the relocated image, started early
    (`start_fault_disassembly`) and not yet taken."""


# One memo per CodeMap, i.e. per analysis: dropped with it.
_MEMOS: weakref.WeakKeyDictionary[CodeMap, _Memo] = weakref.WeakKeyDictionary()


def _memo(code_map: CodeMap) -> _Memo:
    memo = _MEMOS.get(code_map)
    if memo is None:
        memo = _MEMOS[code_map] = _Memo()
    return memo


def quoted(
    code_map: CodeMap,
    chain: tuple[SourceFrame, ...],
    sources: SourcePaths,
) -> tuple[QuotedLine, ...]:
    """The source lines of an inline chain, quoted once per analysis: hundreds of sites of
    one kernel share a handful of chains."""
    quotes = _memo(code_map).quotes
    key = (chain, sources)
    if key not in quotes:
        quotes[key] = quote(chain, sources)
    return quotes[key]


def disassemble_function(
    core: Coredump,
    code_map: CodeMap,
    module: Module,
    symbol_index: int,
    section_address: int,
    options: ToolOptions,
) -> tuple[Disassembly | None, Finding | None]:
    """One function of a module, disassembled, its offsets relative to its code section.

    nvdisasm runs once per function and analysis (`code_map`), however many fault sites or
    stuck warps ask. When it refuses the relocated image, normalized copies are tried
    (`postmortem.cubin.normalize`), then the module's non-relocated image; the result's
    `image` says which copy gave the listing.

    Returns the disassembly, or None and the diagnosis that says why there is none.
    """
    memo = _memo(code_map)
    image, digest = _image(memo, code_map, module)
    key = (digest, symbol_index, section_address, str(options.nvdisasm.path))
    if key not in memo.disassemblies:
        makers: dict[str, Callable[[], _Copy | None]] = {
            RELOCATED: lambda: (image, symbol_index),
            DATA_CLEARED: lambda: _normalized(memo, digest, image, symbol_index, DATA_CLEARED),
            REBASED: lambda: _normalized(memo, digest, image, symbol_index, REBASED),
            NON_RELOCATED: lambda: _unrelocated(core, code_map, module, symbol_index),
        }
        preferred = memo.accepted.get(digest, RELOCATED)
        order = [preferred] + [label for label in makers if label != preferred]
        copies = ((label, makers[label]()) for label in order)
        started = memo.started.pop((digest, symbol_index), None)
        result, note = _first_accepted(copies, section_address, options, started)
        if result is not None and result.image is not None:
            memo.accepted[digest] = result.image
        memo.disassemblies[key] = (result, note)
    return memo.disassemblies[key]


def start_fault_disassembly(
    code_map: CodeMap,
    faults: Sequence[Fault],
    options: ToolOptions,
    pool: Executor,
    cancel: threading.Event,
) -> None:
    """Starts nvdisasm in `pool` on the function of the first fault with a location (the one
    `localize` wants first), on the module's relocated image, so that its fixed cost (most of
    a second, whatever the function) is paid while the warps are read; `disassemble_function`
    takes the outcome. Setting `cancel` kills it."""
    if not options.nvdisasm.run:
        return
    located = next((f for f in faults if f.location is not None and f.error_pc is not None), None)
    if located is None or located.location is None or located.error_pc is None:
        return
    module = located.location.module
    summary = code_map.summary(module)
    function = summary.find_entry(located.error_pc) if summary else None
    if function is None:
        return
    memo = _memo(code_map)
    image, digest = _image(memo, code_map, module)
    memo.started[(digest, function.symbol_index)] = pool.submit(
        disassemble, image, function.symbol_index, nvdisasm=options.nvdisasm.path,
        timeout=options.timeout, store=options.store, cancel=cancel,
    )  # fmt: skip


def _image(memo: _Memo, code_map: CodeMap, module: Module) -> tuple[bytes, str]:
    """The module's relocated image and its digest, read once per analysis."""
    if module not in memo.images:
        image = code_map.image_bytes(module)
        memo.images[module] = (image, hashlib.blake2b(image, digest_size=16).hexdigest())
    return memo.images[module]


def _normalized(
    memo: _Memo, digest: str, image: bytes, symbol_index: int, label: str
) -> _Copy | None:
    if (digest, label) not in memo.copies:
        normalize = clear_data_addresses if label == DATA_CLEARED else rebase_to_zero
        try:
            memo.copies[(digest, label)] = normalize(image)
        except MalformedElf:
            memo.copies[(digest, label)] = None
    copy = memo.copies[(digest, label)]
    return None if copy is None else (copy, symbol_index)


def _unrelocated(
    core: Coredump, code_map: CodeMap, module: Module, symbol_index: int
) -> _Copy | None:
    """The module's `.cudbg.elfimg` and the function's symbol index in it (found by name:
    the index may differ from the relocated image's)."""
    loaded = code_map.find(module)
    image = loaded.module.unrelocated_image if loaded else None
    if loaded is None or image is None:
        return None
    name = next((f.name for f in loaded.summary.functions if f.symbol_index == symbol_index), None)
    data = core.image_bytes(image)
    try:
        index = ElfImage(data).symbol_index(name) if name is not None else None
    except MalformedElf:
        return None
    return None if index is None else (data, index)


def _first_accepted(
    copies: Iterator[tuple[str, _Copy | None]],
    section_address: int,
    options: ToolOptions,
    started: Future[Disassembly] | None,
) -> _Disassembled:
    """The first copy nvdisasm accepts; `started`: its run on the relocated image, begun
    early (its outcome is taken as that copy's)."""
    refusals: list[tuple[str, str]] = []
    for label, copy in copies:
        if copy is None:
            continue  # nothing to normalize, or no such image in the dump
        try:
            if label == RELOCATED and started is not None:
                result = started.result()
            else:
                result = disassemble(
                    copy[0], copy[1], nvdisasm=options.nvdisasm.path, timeout=options.timeout,
                    store=options.store,
                )  # fmt: skip
        except ToolNotFound as error:
            return None, dx.nvdisasm_missing(error.hint or "")
        except ToolFailed as error:
            if error.returncode is None or error.returncode < 0:
                # Timed out, killed, too much output: another copy would fare no better.
                return None, dx.nvdisasm_failed(error.detail)
            refusals.append((label, error.detail))
            continue
        return _section_relative(replace(result, image=label), section_address), None
    return None, dx.nvdisasm_refused(refusals)


def _section_relative(result: Disassembly, section_address: int) -> Disassembly:
    # nvdisasm prints load addresses for a relocated image: back to section offsets. A copy
    # rebased to 0, or the non-relocated image, prints section offsets already.
    listing = result.listing
    if (
        section_address
        and listing.instructions
        and listing.instructions[0].offset >= section_address
    ):
        return replace(result, listing=listing.rebased(section_address))
    return result
