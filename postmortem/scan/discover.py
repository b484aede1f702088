"""Finding CUDA coredumps in directory trees by their content, whatever their names.

A file is a dump when it starts with an ELF64 header of type ET_CORE for machine EM_CUDA,
or when it is compressed (gzip, zstd, xz) and its first decompressed bytes are such a
header. Only the first bytes are read (and decompressed). Symbolic links that lead out of
the trees being scanned are not followed unless asked; every file is reported once, however
many links lead to it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.coredump.decompress import CODEC_MAGIC_BYTES, read_decompressed_head, sniff_codec
from postmortem.elf import core_header_problem
from postmortem.errors import CompressedDumpError

_HEADER_BYTES = 20  # e_ident (16), e_type (2), e_machine (2)
_DUMP_NAME_HINTS = (".nvcudmp", "cudacore", "cuda_core")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file the scan will read: a dump, or a file named like one that could not be read."""

    path: Path
    """The path under the scanned tree (links not resolved)."""
    unreadable: str | None = None
    """Why its first bytes could not be read (it is then an error row); None when readable."""


def is_dump_header(head: bytes) -> bool:
    """True when `head` starts like a CUDA coredump: ELF64, ET_CORE, EM_CUDA."""
    return core_header_problem(head) is None


def sniff(path: Path) -> bool:
    """True when the file at `path` holds a CUDA coredump, plain or compressed; raises OSError."""
    with open(path, "rb") as file:
        head = file.read(max(_HEADER_BYTES, CODEC_MAGIC_BYTES))
    codec = sniff_codec(head)
    if codec is None:
        return is_dump_header(head)
    try:
        return is_dump_header(read_decompressed_head(path, codec, _HEADER_BYTES))
    except CompressedDumpError:
        return False


def iter_dumps(roots: Sequence[Path], *, follow_symlinks: bool = False) -> Iterator[Candidate]:
    """Every dump under `roots`, in a stable order (sorted names, depth first).

    A root that is a file is taken as it is (an error row later if it is no dump).
    """
    trees = [root.resolve() for root in roots if root.is_dir()]
    # Files and directories are told apart by (device, inode): links never yield a file twice
    # and a link back up the tree ends there.
    seen: set[tuple[int, int]] = {_identity(os.stat(tree)) for tree in trees}
    for root in roots:
        if root.is_dir():
            yield from _walk(root, trees, seen, follow_symlinks)
        else:
            identity = _identity(os.stat(root)) if root.exists() else (-1, hash(str(root)))
            if identity not in seen:
                seen.add(identity)
                yield Candidate(root)


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _walk(
    directory: Path, trees: list[Path], seen: set[tuple[int, int]], follow: bool
) -> Iterator[Candidate]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.is_symlink() and not _link_allowed(path, trees, follow):
            continue
        try:
            info = os.stat(path)
        except OSError:
            continue  # a dangling link
        if _identity(info) in seen:
            continue
        mode = info.st_mode
        if stat.S_ISDIR(mode):
            seen.add(_identity(info))
            yield from _walk(path, trees, seen, follow)
        elif stat.S_ISREG(mode):
            candidate = _candidate(path)
            if candidate is not None:  # a file that is no dump stays free to be named a root
                seen.add(_identity(info))
                yield candidate


def _link_allowed(path: Path, trees: list[Path], follow: bool) -> bool:
    if follow:
        return True
    real = path.resolve()
    return any(real == tree or real.is_relative_to(tree) for tree in trees)


def _candidate(path: Path) -> Candidate | None:
    # A file named like a dump is scanned even when its content is not one (empty, cut
    # short, overwritten): the analysis then says why, in an error row.
    named_like_one = any(hint in path.name.lower() for hint in _DUMP_NAME_HINTS)
    try:
        return Candidate(path) if sniff(path) or named_like_one else None
    except OSError as error:
        return Candidate(path, error.strerror or str(error)) if named_like_one else None
