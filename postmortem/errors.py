"""The one exception hierarchy of postmortem, and the exit statuses of its commands.

Every error the library raises on purpose is a `PostmortemError`, and every one of them is
defined here. Its `str()` is one line a user can act on: what is wrong, where, and the
numbers. `hint`, when set, says what to do next. Each class carries the exit status a
command ends with when it stops on it (`exit_status`); `postmortem.cli` reads it from
there, never by testing the class. A foreign exception (an OSError, a decoder's error) is
translated into one of these where it enters, never left to reach the command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import ClassVar

from postmortem._version import install_extra


class ExitStatus(IntEnum):
    """How a command ends (stable: scripts and CI rely on it)."""

    OK = 0
    """Done."""
    INTERNAL = 1
    """A bug of ours (the message says to rerun with --debug and report it)."""
    BAD_INPUT = 2
    """The input is not a readable CUDA coredump, holds no GPU state, or an option or an
    output file cannot be used."""
    TOOL = 3
    """An external tool the command cannot do without failed or is missing."""
    SCAN_ERRORS = 4
    """A scan finished, but some dumps are error rows."""
    TIMED_OUT = 5
    """Waited for something that did not happen in time (a coredump pipe that no process
    reads, a triggered dump that was never written)."""
    CRASHES = 6
    """A scan found crash groups that `--fail-on` counts (new, regressed, or any)."""
    NOT_EXECUTABLE = 126
    """The command `capture` was asked to run exists but cannot be run (as shells say)."""
    COMMAND_NOT_FOUND = 127
    """The command `capture` was asked to run was not found (as shells say)."""
    INTERRUPTED = 130
    """Interrupted (Ctrl-C); what was finished was written."""


class PostmortemError(Exception):
    """Base class of every error postmortem raises on purpose."""

    hint: str | None = None
    exit_status: ClassVar[ExitStatus] = ExitStatus.BAD_INPUT
    """The status a command ends with when it stops on this error."""


@dataclass(eq=False)
class UnreadableFile(PostmortemError):
    """The file could not be opened or read at all (missing, no permission, not a regular
    file, larger than what is read of it)."""

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

    hint = (
        "the dump was cut short (disk full, or the process killed while writing), or it is "
        "still being written (a large dump takes minutes: wait until its size stops growing); "
        "otherwise write it again"
    )


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
    """A compressed dump (gzip, zstd, xz) could not be decompressed, or was refused."""

    path: Path
    reason: str
    codec: str = "gzip"
    """The compression format: "gzip", "zstd" or "xz"."""
    hint: str | None = None
    """What to do next, when there is something (a limit the user may raise)."""

    def __str__(self) -> str:
        return f"{self.path}: cannot decompress {self.codec} dump: {self.reason}"


@dataclass(eq=False)
class ToolNotFound(PostmortemError):
    """An external tool (nvdisasm, cuobjdump, cuda-gdb) is not installed where we looked."""

    exit_status: ClassVar[ExitStatus] = ExitStatus.TOOL

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

    exit_status: ClassVar[ExitStatus] = ExitStatus.TOOL

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


@dataclass(eq=False)
class OutputIsSymlink(PostmortemError):
    """A file we were asked to write is a symbolic link (dangling or not): it is never
    followed, so its target is never written."""

    path: Path
    target: str
    """What the link points to, as it reads."""
    count: int
    """How many of the files to be written are links."""

    def __str__(self) -> str:
        more = f" (and {self.count - 1} more)" if self.count > 1 else ""
        return f"{self.path}: is a symbolic link to {self.target}{more}; not followed"

    hint = "remove the link, or pass --force to replace the link itself (its target is left alone)"


@dataclass(eq=False)
class OutputUnwritable(PostmortemError):
    """A file or folder we were asked to write cannot be created."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: cannot write: {self.reason}"


@dataclass(eq=False)
class MalformedElf(PostmortemError):
    """An ELF header or section header table that cannot be read, or a structure of an
    embedded image that runs out of bounds."""

    where: str
    """The structure: "ELF header", "section header table", a section's name."""
    problem: str
    """What is wrong, with the numbers."""
    field: str | None = None
    """The header field that cannot be right (`e_shentsize`), when one is to blame."""
    value: int | None = None
    """That field's value."""
    past_end_at: int | None = None
    """Where the structure starts, when it runs past the end of the file."""

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


@dataclass(eq=False)
class NoGpuState(PostmortemError):
    """A readable CUDA coredump that holds no GPU state to analyze (no warp, no fault)."""

    path: Path
    holds: str
    """What the dump does hold, in words ("1 device, 2 modules, 0 SMs")."""

    def __str__(self) -> str:
        return (
            f"{self.path}: no GPU state to analyze: no warp and no exception in the dump "
            f"(it holds {self.holds})"
        )

    hint = "a dump written before any kernel ran, or one whose SM, warp and lane tables were lost"


@dataclass(eq=False)
class NvInfoError(PostmortemError):
    """A cubin, or one of its ``.nv.info`` sections or notes, is malformed."""

    where: str
    """The section or structure that is malformed."""
    problem: str
    """What is wrong with it, with the numbers."""

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


@dataclass(eq=False)
class BadOption(PostmortemError):
    """An option value that cannot be used (a pattern, a date, an output folder)."""

    option: str
    reason: str

    def __str__(self) -> str:
        return f"{self.option}: {self.reason}"


@dataclass(eq=False)
class ScanOutputError(PostmortemError):
    """An index or JSON-lines file of a scan that cannot be written."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: cannot write the scan's output: {self.reason}"


@dataclass(eq=False)
class ScanCacheError(PostmortemError):
    """The scan cache file cannot be opened or written."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: cannot use the scan cache: {self.reason}"

    hint = "pass --cache FILE somewhere writable, or --no-cache"


@dataclass(eq=False)
class MissingExtra(PostmortemError):
    """An option needs an optional part of postmortem (an extra) that is not installed."""

    option: str
    """The option as given, e.g. "--engine dask"."""
    extra: str
    """The extra that brings it, e.g. "dask"."""
    package: str
    """The package found missing, e.g. "distributed"."""

    def __str__(self) -> str:
        return f"{self.option} needs the {self.extra} extra ({self.package} is not installed)"

    @property
    def hint(self) -> str | None:  # type: ignore[override]
        return install_extra(self.extra)


@dataclass(eq=False)
class EngineUnreachable(PostmortemError):
    """The distributed engine a scan was sent to could not be reached."""

    option: str
    """The option that named it, e.g. "--scheduler"."""
    address: str
    reason: str

    def __str__(self) -> str:
        return f"{self.option} {self.address}: cannot reach it: {self.reason}"


@dataclass(eq=False)
class EngineDied(PostmortemError):
    """The distributed engine a scan ran on died before every dump came back."""

    option: str
    """The option that chose it, e.g. "--engine ray"."""
    reason: str
    """What the engine said of its death, e.g. "the task's local raylet died"."""
    done: int
    """Dumps whose rows came back before it died."""
    left: int
    """Dumps whose rows did not."""

    exit_status: ClassVar[ExitStatus] = ExitStatus.TOOL
    hint = "check the cluster, then scan again (the scan cache, when used, keeps the rows done)"

    def __str__(self) -> str:
        return (
            f"{self.option}: the cluster died during the scan ({self.reason}); "
            f"{self.done} dump(s) analyzed, {self.left} not"
        )


@dataclass(eq=False)
class ConfigError(PostmortemError):
    """A settings file (postmortem.toml, or a pyproject.toml's [tool.postmortem]) that cannot
    be used."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    hint = "fix or remove the setting; see docs/settings.md"


@dataclass(eq=False)
class KnownCrashesError(PostmortemError):
    """A known-crashes file (`scan --known`, `postmortem triage`) that cannot be read, used
    or edited."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    hint = "fix the file (see docs/ci.md, The known-crashes file)"


@dataclass(eq=False)
class CommandNotStarted(PostmortemError):
    """The command `capture` was asked to run could not be started."""

    exit_status: ClassVar[ExitStatus] = ExitStatus.COMMAND_NOT_FOUND

    command: str
    reason: str

    def __str__(self) -> str:
        return f"{self.command}: cannot run: {self.reason}"


@dataclass(eq=False)
class CommandNotExecutable(CommandNotStarted):
    """The command exists but cannot be run (no permission, not a program)."""

    exit_status: ClassVar[ExitStatus] = ExitStatus.NOT_EXECUTABLE


@dataclass(eq=False)
class NotAFifo(PostmortemError):
    """A coredump pipe (`CUDA_COREDUMP_PIPE`) that is something other than a named pipe."""

    path: Path
    found: str
    """What the path is instead ("a regular file", "a folder")."""

    def __str__(self) -> str:
        return f"{self.path}: not a coredump pipe (a FIFO): it is {self.found}"


@dataclass(eq=False)
class PipeNotFound(PostmortemError):
    """No coredump pipe of a process was found where the driver makes one."""

    pid: int
    searched: tuple[str, ...]

    def __str__(self) -> str:
        return f"no coredump pipe of process {self.pid} (looked for: {', '.join(self.searched)})"

    hint = (
        "the process must start with CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1 (`postmortem capture "
        "--hang`); pass the pipe itself, or --dir where it was captured"
    )


@dataclass(eq=False)
class TriggerTimedOut(PostmortemError):
    """A coredump trigger that no process took, or a triggered dump that never appeared."""

    exit_status: ClassVar[ExitStatus] = ExitStatus.TIMED_OUT

    path: Path
    """The pipe written to, or the dump pattern waited on."""
    seconds: float
    what: str
    """What did not happen ("no process reads the pipe")."""

    def __str__(self) -> str:
        return f"{self.path}: {self.what} (waited {self.seconds:g} s)"
