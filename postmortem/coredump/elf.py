"""The container of a coredump: the file mapped (decompressed first when it has to be),
its ELF header checked for a CUDA core, and its section headers, through `postmortem.elf`.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TypeAlias

from postmortem.coredump.codec import CODEC_MAGIC_BYTES, Codec, sniff_codec
from postmortem.elf import EM_CUDA, ET_CORE, SHT_STRTAB, ElfHeader, ReadInto, Sections, read_header
from postmortem.errors import (
    CorruptSection,
    MalformedElf,
    NotACudaCoredump,
    NotAnElfFile,
    TruncatedDump,
    UnreadableFile,
)
from postmortem.urls import DumpUrl

if TYPE_CHECKING:
    from postmortem.coredump.remote import RemoteFile


class MappedFile:
    """A read-only memory map of a dump, decompressed first when it is compressed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.codec: Codec | None = None
        """"gzip", "zstd" or "xz" when the file was compressed (and decompressed privately)."""
        self._tempdir: str | None = None
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise UnreadableFile(path, "not a regular file")
            self._file: BinaryIO = open(path, "rb")  # noqa: SIM115 - lives as long as the map
        except OSError as error:
            raise UnreadableFile(path, error.strerror or str(error)) from None
        try:
            self.codec = sniff_codec(self._file.read(CODEC_MAGIC_BYTES))
            if self.codec is not None:
                self._file.close()
                # A private directory (mode 0700) and an unlinked file: nobody else can read
                # the decompressed dump, and nothing is left behind if we are killed.
                import tempfile

                from postmortem.coredump.decompress import decompress_to_file

                self._tempdir = tempfile.mkdtemp(prefix="postmortem-")

                self._file = decompress_to_file(path, self.codec, self._tempdir)
            size = os.fstat(self._file.fileno()).st_size
            if size == 0:
                raise NotAnElfFile(path, "the file is empty")
            self.size = size
            self.map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        except BaseException:
            self.close()
            raise

    @property
    def compressed(self) -> bool:
        return self.codec is not None

    sparse = False
    """A file's bytes are all there; `RemoteFile`'s are fetched on demand."""

    def fileno(self) -> int:
        """The descriptor of the (decompressed) file the map is of."""
        return self._file.fileno()

    def child_path(self) -> Path:
        """A path another program (cuda-gdb) can open the dump's bytes by while this file is
        open: the file itself, or for a compressed dump the private decompressed copy, by its
        descriptor (``/proc/PID/fd/N``: the copy has no name of its own). A compressed dump
        on a system without /proc gives its own path, which cuda-gdb cannot read."""
        if self.codec is None:
            return self.path
        by_descriptor = Path(f"/proc/{os.getpid()}/fd/{self.fileno()}")
        return by_descriptor if by_descriptor.exists() else self.path

    def ensure(self, offset: int, size: int) -> None:
        """Nothing to do: a file's bytes are all there (see `RemoteFile.ensure`)."""

    def ensure_ranges(self, ranges: Iterable[tuple[int, int]]) -> None:
        """Nothing to do: a file's bytes are all there."""

    def check_unchanged(self) -> None:
        """Nothing to check: a local file is read through one map (see
        `RemoteFile.check_unchanged` for an object read by ranges)."""

    def close(self) -> None:
        mapping = getattr(self, "map", None)
        if mapping is not None:
            # numpy views still alive: the map closes when they go
            with contextlib.suppress(BufferError):
                mapping.close()
        self._file.close()
        if self._tempdir is not None:
            import shutil

            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None


DumpFile: TypeAlias = "MappedFile | RemoteFile"


def open_dump_file(path: Path) -> DumpFile:
    """The dump at `path` mapped for reading: a local file, or a `DumpUrl`'s object."""
    if isinstance(path, DumpUrl):
        from postmortem.coredump.remote import RemoteFile

        return RemoteFile(path, str(path))
    return MappedFile(path)


def read_identity(mapped: DumpFile) -> ElfHeader:
    """Validate the ELF header of a CUDA coredump and the bounds of its section headers.

    Raises:
        NotAnElfFile: No readable ELF64 little-endian header.
        NotACudaCoredump: An ELF file of another type or machine.
        TruncatedDump: The section header table runs past the end of the file.
        CorruptSection: The header's section fields cannot be right.
    """
    path = mapped.path
    try:
        header = read_header(mapped.map, mapped.size, mapped.ensure)
    except MalformedElf as error:
        if error.past_end_at is not None:
            start = min(error.past_end_at, mapped.size)
            raise TruncatedDump(path, start, 0, f"{error.where}: {error.problem}") from None
        if error.field is not None:
            raise CorruptSection(
                path, error.where, error.field, error.value or 0, error.problem
            ) from None
        raise NotAnElfFile(path, error.problem) from None
    if header.type != ET_CORE:
        raise NotACudaCoredump(path, "e_type", header.type, ET_CORE)
    if header.machine != EM_CUDA:
        raise NotACudaCoredump(path, "e_machine", header.machine, EM_CUDA)
    return header


class SectionTable(Sections):
    """The dump's section headers, with the `.strtab` that table rows index into."""

    def __init__(self, mapped: DumpFile, header: ElfHeader) -> None:
        super().__init__(mapped.map, header, mapped.size, mapped.ensure, _reader(mapped))
        self.path = mapped.path
        self.strtab: int | None = self.find(".strtab", SHT_STRTAB)

    def string(self, offset: int, what: str) -> str:
        """A string from `.strtab` (a device name, an SM type, the generator's name).

        Raises:
            CorruptSection: There is no `.strtab`, or the offset lies past its end.
        """
        if self.strtab is None:
            raise CorruptSection(self.path, ".strtab", what, offset, "no .strtab section")
        size = self.available(self.strtab)
        if offset >= size:
            raise CorruptSection(self.path, ".strtab", what, offset, f"past its end ({size} bytes)")
        return self.string_at(self.strtab, offset)


def _reader(mapped: DumpFile) -> ReadInto:
    # The section header table (35 MB in a full H100 dump) is read with read calls: copying
    # it out of the map costs more, each page faulted in on the way.
    def read_into(offset: int, view: memoryview) -> int:
        mapped.ensure(offset, len(view))
        try:
            return os.preadv(mapped.fileno(), [view], offset)
        except OSError:  # the caller copies out of the map instead
            return 0

    return read_into
