"""Finding CUDA coredumps in directory trees by their content, whatever their names.

A file is a dump when it starts with an ELF64 header of type ET_CORE for machine EM_CUDA,
or when it is compressed (gzip, zstd, xz) and its first decompressed bytes are such a
header. Only the first bytes are read (and decompressed), and only from regular files:
devices, FIFOs and sockets under a tree are passed over, and one named as a root is an
error row, never opened. Symbolic links that lead out of the trees being scanned are not
followed unless asked; every file is reported once, however many links lead to it, and
every folder is entered once, so a loop of links ends. The walk keeps its own stack, so a
tree thousands of folders deep is walked like any other. A folder that cannot be listed
(no permission, or gone since its parent was listed) is an error row.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from postmortem.coredump.codec import CODEC_MAGIC_BYTES, sniff_codec
from postmortem.coredump.decompress import read_decompressed_head
from postmortem.dumpnames import named_like_a_dump
from postmortem.elf import core_header_problem
from postmortem.errors import CompressedDumpError
from postmortem.scan.discover.remote import ObjectInfo, iter_remote_dumps
from postmortem.urls import DumpUrl

_HEADER_BYTES = 20  # e_ident (16), e_type (2), e_machine (2)
_NOT_REGULAR = "not a regular file"
_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
)  # fmt: skip

_Identity = tuple[int, int]
_Listing = Iterator[os.DirEntry[str]]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file the scan will read, or a path the scan must report as an error row: a file
    named like a dump that could not be read, a root that is no regular file, a folder
    that could not be listed."""

    path: Path
    """The path under the scanned tree (links not resolved), or a `DumpUrl`."""
    unreadable: str | None = None
    """Why it could not be read or listed (it is then an error row); None when readable."""
    stored: ObjectInfo | None = None
    """What the object store says of a dump given by URL (size, time, version tag)."""


def is_dump_header(head: bytes) -> bool:
    """True when `head` starts like a CUDA coredump: ELF64, ET_CORE, EM_CUDA."""
    return core_header_problem(head) is None


def open_regular_file(path: Path) -> BinaryIO:
    """`path` open for reading, refused unless it is a regular file.

    It is opened with O_NONBLOCK, so a FIFO (even one put in the file's place since it
    was listed) never blocks the open, and then checked on the open descriptor.

    Raises:
        OSError: It cannot be opened, or is not a regular file ("not a regular file").
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, _NOT_REGULAR, str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def sniff(path: Path) -> bool:
    """True when the file at `path` holds a CUDA coredump, plain or compressed; raises OSError
    (also when it is no regular file)."""
    with open_regular_file(path) as file:
        head = file.read(max(_HEADER_BYTES, CODEC_MAGIC_BYTES))
    codec = sniff_codec(head)
    if codec is None:
        return is_dump_header(head)
    try:
        return is_dump_header(read_decompressed_head(path, codec, _HEADER_BYTES))
    except CompressedDumpError:
        return False


def iter_dumps(
    roots: Sequence[Path],
    *,
    follow_symlinks: bool = False,
    unfollowed: list[Path] | None = None,
) -> Iterator[Candidate]:
    """Every dump under `roots`, in a stable order (sorted names, depth first).

    A root that is a regular file is taken as it is (an error row later if it is no dump);
    one that is missing or not a regular file (a device, a FIFO) is an error row at once.
    A `DumpUrl` root is an object-store prefix (or one object), listed first. The links left
    unfollowed (they lead out of the trees) are added to `unfollowed`, when given.
    """
    urls = [root for root in roots if isinstance(root, DumpUrl)]
    roots = [root for root in roots if not isinstance(root, DumpUrl)]
    for url in urls:
        for found, stored, problem in iter_remote_dumps(url):
            yield Candidate(found, problem, stored)
    trees = [Path(os.path.realpath(root)) for root in roots if root.is_dir()]
    # Files and directories are told apart by (device, inode): links never yield a file twice
    # and a link back up the tree ends there.
    seen: set[_Identity] = {_identity(os.stat(tree)) for tree in trees}
    for root in roots:
        if root.is_dir():
            yield from _walk(root, trees, seen, follow_symlinks, unfollowed)
        else:
            yield from _file_root(root, seen)


def _file_root(root: Path, seen: set[_Identity]) -> Iterator[Candidate]:
    try:
        info = os.stat(root)
    except OSError as error:
        yield Candidate(root, f"cannot read: {_reason(error)}")
        return
    if _identity(info) in seen:
        return
    seen.add(_identity(info))
    if stat.S_ISREG(info.st_mode):
        yield Candidate(root)
    else:
        yield Candidate(root, f"cannot read: {_NOT_REGULAR} ({_kind(info.st_mode)})")


def _identity(info: os.stat_result) -> _Identity:
    return info.st_dev, info.st_ino


def _walk(
    tree: Path,
    trees: list[Path],
    seen: set[_Identity],
    follow: bool,
    unfollowed: list[Path] | None,
) -> Iterator[Candidate]:
    # One sorted listing per open folder, on a stack of our own rather than Python's: the
    # order is a recursive walk's, and a tree 1,000 folders deep needs no recursion limit.
    stack: list[_Listing] = []
    failed = _enter(tree, stack)
    if failed is not None:
        yield failed
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        path = Path(entry.path)
        info = _target(entry, path, trees, follow)
        if info is _UNFOLLOWED:
            if unfollowed is not None:
                unfollowed.append(path)
        elif isinstance(info, Candidate):
            yield info
        elif info is not None and _identity(info) not in seen:
            found = _visit(path, info, seen, stack)
            if found is not None:
                yield found


def _enter(directory: Path, stack: list[_Listing]) -> Candidate | None:
    """Push the sorted listing of `directory`; an error row when it cannot be listed."""
    try:
        with os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as error:
        return Candidate(directory, f"cannot list folder: {_reason(error)}")
    stack.append(iter(entries))
    return None


_UNFOLLOWED = Candidate(Path(), "a link out of the trees, not followed")
"""What `_target` says of a link to something outside the trees that is not to be followed."""


def _target(
    entry: os.DirEntry[str], path: Path, trees: list[Path], follow: bool
) -> os.stat_result | Candidate | None:
    """What `entry` (at `path`) is, its link followed; `_UNFOLLOWED` for a link out of the
    trees not to be followed; None when it is left out (a dangling link, a loop of links, a
    file gone since it was listed)."""
    try:
        if entry.is_symlink() and not _link_allowed(path, trees, follow):
            os.stat(entry.path)  # a dangling link or a loop is no dump left behind
            return _UNFOLLOWED
        return os.stat(entry.path)
    except OSError as error:
        if _listed_as_folder(entry):  # a folder gone or out of reach: its dumps would be lost
            return Candidate(path, f"cannot list folder: {_reason(error)}")
        return None


def _listed_as_folder(entry: os.DirEntry[str]) -> bool:
    try:  # the type the listing gave, without a new stat on Linux
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _visit(
    path: Path, info: os.stat_result, seen: set[_Identity], stack: list[_Listing]
) -> Candidate | None:
    """Enter a folder (an error row if it cannot be listed), or sniff a regular file; any
    other kind (device, FIFO, socket) is passed over unread."""
    if stat.S_ISDIR(info.st_mode):
        seen.add(_identity(info))
        return _enter(path, stack)
    if not stat.S_ISREG(info.st_mode):
        return None
    candidate = _candidate(path)
    if candidate is not None:  # a file that is no dump stays free to be named a root
        seen.add(_identity(info))
    return candidate


def _link_allowed(path: Path, trees: list[Path], follow: bool) -> bool:
    if follow:
        return True
    # realpath, unlike Path.resolve on Python 3.11, does not raise on a loop of links.
    real = Path(os.path.realpath(path))
    return any(real == tree or real.is_relative_to(tree) for tree in trees)


def _candidate(path: Path) -> Candidate | None:
    # A file named like a dump is scanned even when its content is not one (empty, cut
    # short, overwritten): the analysis then says why, in an error row.
    named_like_one = named_like_a_dump(path.name)
    try:
        return Candidate(path) if sniff(path) or named_like_one else None
    except OSError as error:
        return Candidate(path, _reason(error)) if named_like_one else None


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "of an unknown kind")
