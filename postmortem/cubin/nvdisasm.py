"""Disassemble one kernel of a cubin with nvdisasm: the adapter (argv, run, parse).

The argv is built by a pure function, the tool runs through `postmortem.toolrun.run_tool`
(the only caller of subprocess), and its output is parsed by `postmortem.cubin.sass`.
``-fun <symbol index>`` makes nvdisasm decode that one function only, which is what keeps
localizing a fault fast on a cubin of hundreds of kernels (see bench/bench_localize.py).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from postmortem.cubin.sass import SassListing, parse_sass
from postmortem.errors import ToolFailed
from postmortem.toolrun import run_tool
from postmortem.tools import find_tool, tool_version

__all__ = [
    "Disassembly", "DisassemblyStore", "RememberedDisassemblies", "build_nvdisasm_argv",
    "disassemble",
]  # fmt: skip

_TOOL = "nvdisasm"
# -ndf: no dataflow analysis (slow, and only adds comments); -c: code sections only;
# -gi: source lines with the inline chain (from .debug_line; nothing without -lineinfo).
_FLAGS = ("-ndf", "-c", "-gi")
_CUBIN_NAME = "module.cubin"


@dataclass(frozen=True, slots=True)
class Disassembly:
    """What one nvdisasm run on a cubin produced."""

    listing: SassListing
    """The parsed listing."""
    tool_version: str | None
    """nvdisasm's version (``13.5.37``); None when it did not say."""
    argv: tuple[str, ...]
    """The argv nvdisasm ran with (its cubin argument was a temporary file, now removed)."""
    seconds: float
    """Wall-clock time of the nvdisasm run."""
    stderr: str
    """What nvdisasm printed on stderr, e.g. its "switching to Old format" warning on
    ABI v7 cubins, which is not an error."""
    image: str | None = None
    """Which copy of a module's image was disassembled ("relocated image", "non-relocated
    image"…: see `postmortem.cubin.normalize`); None when the caller did not say."""


class DisassemblyStore(Protocol):
    """Where disassemblies are remembered, by a key of cubin content, function and tool."""

    def get(self, key: str) -> Disassembly | None:
        """The disassembly stored under `key`, or None."""

    def put(self, key: str, stdout: str, result: Disassembly) -> None:
        """Remember `result`, made from nvdisasm's `stdout`, under `key`."""


class RememberedDisassemblies:
    """A `DisassemblyStore` in memory, holding the last `limit` disassemblies: the dumps one
    command analyzes (the ranks of one job, a scan worker's dumps) mostly carry the same
    cubins, and nvdisasm costs over half a second a run whatever the function's size."""

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._held: dict[str, Disassembly] = {}

    def get(self, key: str) -> Disassembly | None:
        found = self._held.get(key)
        # A listing found here took no nvdisasm run for this dump.
        return None if found is None else replace(found, seconds=0.0)

    def put(self, key: str, stdout: str, result: Disassembly) -> None:
        if key not in self._held and len(self._held) >= self._limit:
            self._held.pop(next(iter(self._held)))
        self._held[key] = result


def build_nvdisasm_argv(nvdisasm: Path, cubin: Path, symbol_index: int | None) -> list[str]:
    """Returns the argv that disassembles a cubin, or one function of it.

    Args:
        nvdisasm: The nvdisasm executable.
        cubin: The cubin file.
        symbol_index: The function's index in ``.symtab``, for ``-fun``; None for all code.

    Returns:
        ``[nvdisasm, -ndf, -c, -gi, (-fun N,) cubin]``.

    Raises:
        ValueError: `symbol_index` is negative.
    """
    argv = [os.fspath(nvdisasm), *_FLAGS]
    if symbol_index is not None:
        if symbol_index < 0:
            raise ValueError(f"symbol index must not be negative: {symbol_index}")
        argv += ["-fun", str(symbol_index)]
    argv.append(os.fspath(cubin))
    return argv


def disassemble(
    cubin: bytes,
    symbol_index: int | None,
    *,
    nvdisasm: str | os.PathLike[str] | None = None,
    timeout: float = 120.0,
    store: DisassemblyStore | None = None,
    cancel: threading.Event | None = None,
) -> Disassembly:
    """Disassembles a cubin held in memory, or only one function of it.

    The bytes go to a private temporary directory that is removed afterwards.

    Args:
        cubin: The cubin's bytes (e.g. a relocated image from a coredump).
        symbol_index: The ``.symtab`` index of the function to disassemble alone (``-fun``);
            None disassembles every code section (slow on large cubins).
        nvdisasm: The nvdisasm to use; searched for (`postmortem.tools.find_tool`) when None.
        timeout: Seconds before nvdisasm is killed.
        store: Where disassemblies are remembered and looked up (a scan worker's, see
            `postmortem.cubin.disasm_files`): a fleet's dumps often carry identical cubins,
            and with a store each (cubin, function) is disassembled once, not once per dump.
        cancel: Set from another thread to kill nvdisasm early (it runs in a thread of its
            own while the analysis goes on, `postmortem.analysis.fault.disassembly`).

    Returns:
        The parsed listing and how it was obtained.

    Raises:
        ToolNotFound: No nvdisasm was found (the error's hint says how to install it).
        ToolFailed: nvdisasm exited non-zero or timed out, or `symbol_index` named no function.
    """
    tool = find_tool(_TOOL, nvdisasm)
    version = tool_version(tool)
    key = _store_key(cubin, symbol_index, tool, version) if store is not None else ""
    stored = store.get(key) if store is not None else None
    if stored is not None:
        return stored
    with tempfile.TemporaryDirectory(prefix="postmortem-nvdisasm-") as scratch:
        path = Path(scratch) / _CUBIN_NAME
        path.write_bytes(cubin)
        argv = build_nvdisasm_argv(tool, path, symbol_index)
        run = run_tool(argv, timeout=timeout, cancel=cancel)
    if run.returncode != 0:
        detail = _first_message(run.stderr or run.stdout, str(path))
        raise ToolFailed(_TOOL, run.argv, run.returncode, detail)
    listing = parse_sass(run.stdout)
    if symbol_index is not None and listing.function is None:
        # nvdisasm exits 0 and prints no code when -fun names a symbol that is not a function.
        detail = f"symbol index {symbol_index} names no function; nothing was disassembled"
        raise ToolFailed(_TOOL, run.argv, run.returncode, detail)
    result = Disassembly(
        listing=listing,
        tool_version=version,
        argv=run.argv,
        seconds=run.seconds,
        stderr=run.stderr,
    )
    if store is not None:
        store.put(key, run.stdout, result)
    return result


def _store_key(cubin: bytes, symbol_index: int | None, tool: Path, version: str | None) -> str:
    tool_id = hashlib.blake2b(f"{tool}|{version}|{_FLAGS}".encode(), digest_size=6).hexdigest()
    content = hashlib.blake2b(cubin, digest_size=16).hexdigest()
    return f"{content}-{symbol_index if symbol_index is not None else 'all'}-{tool_id}"


def _first_message(output: str, cubin_path: str) -> str:
    """One line for an error: nvdisasm's first fatal/error line, else its first line."""
    lines = [" ".join(line.split()) for line in output.splitlines() if line.strip()]
    chosen = next((line for line in lines if "fatal" in line or "error" in line), None)
    if chosen is None:
        chosen = lines[0] if lines else "no message"
    return chosen.replace(cubin_path, "<cubin>")
