"""The one exception hierarchy of postmortem.

Every error the library raises on purpose is a `PostmortemError`. Its `str()` is one
line a user can act on: what is wrong, where, and the numbers. `hint`, when set, says
what to do next. Only `postmortem.cli` turns these into exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class PostmortemError(Exception):
    """Base class of every error postmortem raises on purpose."""

    hint: str | None = None


@dataclass(eq=False)
class UnreadableFile(PostmortemError):
    """The file could not be opened or read at all (missing, a directory, no permission)."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: cannot read: {self.reason}"


@dataclass(eq=False)
class NotAnElfFile(PostmortemError):
    """The file does not start with an ELF64 little-endian header."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: not a CUDA coredump: {self.reason}"


@dataclass(eq=False)
class NotACudaCoredump(PostmortemError):
    """An ELF file, but not a CUDA GPU coredump (wrong type or machine)."""

    path: Path
    field: str
    value: int
    expected: int

    def __str__(self) -> str:
        return (
            f"{self.path}: not a CUDA coredump: ELF {self.field} is {self.value}, "
            f"expected {self.expected}"
        )

    @property
    def hint(self) -> str | None:  # type: ignore[override]
        if self.field == "e_type" and self.value == 4:
            return None
        if self.field == "e_type" and self.value == 2:
            return "this is an executable; pass the .nvcudmp file written by the driver"
        if self.field == "e_machine" and self.value == 62:
            return "this is a host (x86-64) core file; the GPU dump is a separate file"
        return None


@dataclass(eq=False)
class TruncatedDump(PostmortemError):
    """Something the dump's headers promise lies beyond the end of the file."""

    path: Path
    offset: int
    needed: int
    what: str

    def __str__(self) -> str:
        return (
            f"{self.path}: truncated at byte {self.offset} ({self.what} needs {self.needed} more)"
        )

    hint = "the dump was cut short (disk full, or the process killed while writing); write it again"


@dataclass(eq=False)
class CorruptSection(PostmortemError):
    """A section header or table row holds a value that cannot be right."""

    path: Path
    section: str
    field: str
    value: int
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.path}: section {self.section}: corrupt {self.field} = {self.value}: "
            f"{self.reason}"
        )


@dataclass(eq=False)
class CompressedDumpError(PostmortemError):
    """A gzip-compressed dump could not be decompressed."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: cannot decompress gzip dump: {self.reason}"


@dataclass(eq=False)
class ToolNotFound(PostmortemError):
    """An external tool (nvdisasm, cuobjdump, cuda-gdb) is not installed where we looked."""

    tool: str
    searched: tuple[str, ...]
    install: str

    def __str__(self) -> str:
        return f"{self.tool} not found (looked in: {', '.join(self.searched) or 'nowhere'})"

    @property
    def hint(self) -> str | None:  # type: ignore[override]
        return self.install


@dataclass(eq=False)
class ToolFailed(PostmortemError):
    """An external tool ran but failed or timed out."""

    tool: str
    argv: tuple[str, ...]
    returncode: int | None
    detail: str

    def __str__(self) -> str:
        status = "timed out" if self.returncode is None else f"exited with {self.returncode}"
        return f"{self.tool} {status}: {self.detail}"


@dataclass(eq=False)
class OutputExists(PostmortemError):
    """A file we were asked to write exists already."""

    path: Path
    count: int

    def __str__(self) -> str:
        more = f" (and {self.count - 1} more)" if self.count > 1 else ""
        return f"{self.path}: exists already{more}; not overwritten"

    hint = "choose another --out directory, or pass --force to overwrite"
