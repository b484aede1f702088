"""The coredump variables a captured command runs with: a plan, pure, tested as a table.

What is set is what the crash guides of vLLM ("CUDA Core Dump: An Effective Tool to Debug
Memory Access Issues and Beyond", 2025-08-11, and its hang follow-up of 2025-12-03) and of
SGLang (`python/sglang/srt/debug_utils/cuda_coredump.py`, the kernel API logging tutorial)
prescribe, with the names NVIDIA's cuda-gdb manual gives them:

- `CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1`: a GPU exception writes a dump.
- `CUDA_COREDUMP_SHOW_PROGRESS=1`: the driver says what it writes, among it the line
  ``coredump: Writing ELF file to PATH`` that `host.driver.written_path` reads.
- `CUDA_COREDUMP_GENERATION_FLAGS`: the lightweight dump (no memory, no unrelocated images),
  unless `--full`.
- `CUDA_COREDUMP_FILE=DIR/core_%h.%p.%t.nvcudmp`: ``%h`` host, ``%p`` process id, ``%t`` Unix
  seconds, expanded by the driver.
- `--hang`: `CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1` and `CUDA_COREDUMP_PIPE=DIR/corepipe.%h.%p`,
  the named pipe that `postmortem trigger` writes to.
- `--sglang`: `SGLANG_CUDA_COREDUMP=1` and `SGLANG_CUDA_COREDUMP_DIR=DIR`; SGLang then leaves
  the `CUDA_*` values above alone (it sets only those not already set).
- `--kernel-api-log LEVEL`: `SGLANG_KERNEL_API_LOGLEVEL`, `SGLANG_KERNEL_API_LOGDEST` into DIR
  (SGLang expands ``%i`` to the process id) and, at level 10, `SGLANG_KERNEL_API_DUMP_DIR`.
- `CUDA_LOG_FILE=stderr`: the driver's plain-English error log (CUDA 12.9 and later; "Error
  Log Management" in the CUDA programming guide) on the command's standard error, so it lands
  in the host log beside the rest. A file would do too, but the variable takes no pattern:
  every process of the job would write the one file.
- `PYTHONUNBUFFERED=1`: the driver aborts the process once the dump is written, and a Python
  program's buffered output would be lost with it; unbuffered, its last lines reach the log.

A value the user already exported (non-empty) wins over ours; `Variable.note` says so.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from postmortem.errors import BadOption

LIGHTWEIGHT_FLAGS = ",".join(
    (
        "skip_nonrelocated_elf_images",
        "skip_global_memory",
        "skip_shared_memory",
        "skip_local_memory",
        "skip_constbank_memory",
    )
)
"""`CUDA_COREDUMP_GENERATION_FLAGS` of a lightweight dump: registers, tables and the relocated
images, no memory (seconds to write, megabytes on disk)."""
DUMP_NAME = "core_%h.%p.%t.nvcudmp"
"""The name of each dump in DIR, as a `CUDA_COREDUMP_FILE` pattern."""
PIPE_NAME = "corepipe.%h.%p"
"""The name of each process's trigger pipe in DIR, as a `CUDA_COREDUMP_PIPE` pattern."""
KERNEL_API_LOG_NAME = "kernel_api.%i.log"
"""SGLang's kernel API log in DIR; SGLang replaces ``%i`` with the process id."""
KERNEL_API_DUMPS_NAME = "kernel_api_dumps"
"""SGLang's level-10 input snapshots, a folder in DIR."""
KERNEL_API_LEVELS = ("1", "3", "5", "10")
"""The levels SGLang documents: names, inputs' metadata, tensor statistics, input snapshots."""


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """What `postmortem capture` was asked for."""

    dump_dir: Path
    """Where dumps, pipes and logs go (as the variables will name it)."""
    full: bool = False
    """Dump memory too: leave `CUDA_COREDUMP_GENERATION_FLAGS` unset."""
    hang: bool = False
    """Let a hang be dumped on demand through a named pipe."""
    sglang: bool = False
    """Also switch on SGLang's own coredump support."""
    kernel_api_log: str | None = None
    """SGLang's kernel API log level; None: no log."""


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable of the plan."""

    name: str
    value: str
    """What the command runs with: ours, or the user's when `kept`."""
    proposed: str
    """What capture sets when the user has not."""
    kept: bool
    """The user had exported it (non-empty): their value wins."""

    @property
    def note(self) -> str | None:
        """One line saying that the user's value was kept over ours; None when nothing is to be
        said (ours is used, or theirs is the same)."""
        if not self.kept or self.value == self.proposed:
            return None
        theirs, ours = shlex.quote(self.value), shlex.quote(self.proposed)
        return f"keeping {self.name}={theirs} (already set; capture would set {ours})"


@dataclass(frozen=True, slots=True)
class EnvironmentPlan:
    """The variables of a capture, in the order they are printed."""

    variables: tuple[Variable, ...]

    def value(self, name: str) -> str | None:
        """What `name` is in the plan; None when the plan does not hold it."""
        return next((v.value for v in self.variables if v.name == name), None)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` (the current environment) with the plan's values added."""
        return {**base, **{v.name: v.value for v in self.variables}}

    def exports(self) -> str:
        """The plan as POSIX shell lines, ``export NAME=VALUE``, each value quoted."""
        return "".join(f"export {v.name}={shlex.quote(v.value)}\n" for v in self.variables)

    @property
    def notes(self) -> tuple[str, ...]:
        """One line per value kept from the user's environment over ours."""
        return tuple(note for v in self.variables if (note := v.note) is not None)


def plan_environment(settings: CaptureSettings, environ: Mapping[str, str]) -> EnvironmentPlan:
    """The variables a capture sets, with what the user exported (`environ`) winning.

    Raises:
        BadOption: the folder's name holds ``%``, which the driver would read as a pattern.
    """
    if "%" in str(settings.dump_dir):
        raise BadOption("--dir", f"{settings.dump_dir}: holds %, which the driver expands")
    wanted = list(_proposed(settings))
    return EnvironmentPlan(
        tuple(
            Variable(name, environ[name], value, True)
            if environ.get(name)
            else Variable(name, value, value, False)
            for name, value in wanted
        )
    )


def _proposed(settings: CaptureSettings) -> list[tuple[str, str]]:
    folder = settings.dump_dir
    wanted = [("CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "1"), ("CUDA_COREDUMP_SHOW_PROGRESS", "1")]
    if not settings.full:
        wanted.append(("CUDA_COREDUMP_GENERATION_FLAGS", LIGHTWEIGHT_FLAGS))
    wanted.append(("CUDA_COREDUMP_FILE", str(folder / DUMP_NAME)))
    if settings.hang:
        wanted.append(("CUDA_ENABLE_USER_TRIGGERED_COREDUMP", "1"))
        wanted.append(("CUDA_COREDUMP_PIPE", str(folder / PIPE_NAME)))
    if settings.sglang:
        wanted.append(("SGLANG_CUDA_COREDUMP", "1"))
        wanted.append(("SGLANG_CUDA_COREDUMP_DIR", str(folder)))
    level = settings.kernel_api_log
    if level is not None:
        wanted.append(("SGLANG_KERNEL_API_LOGLEVEL", level))
        wanted.append(("SGLANG_KERNEL_API_LOGDEST", str(folder / KERNEL_API_LOG_NAME)))
        if level.isdigit() and int(level) >= 10:
            wanted.append(("SGLANG_KERNEL_API_DUMP_DIR", str(folder / KERNEL_API_DUMPS_NAME)))
    wanted.append(("CUDA_LOG_FILE", "stderr"))
    wanted.append(("PYTHONUNBUFFERED", "1"))
    return wanted


def sanitizer_warning(argv: tuple[str, ...]) -> str | None:
    """A warning when the command runs under compute-sanitizer, which starts the program with
    the coredump variables cleared and reports faults itself; None otherwise."""
    if any(Path(word).name == "compute-sanitizer" for word in argv[:4]):
        return (
            "the command runs under compute-sanitizer, which clears the coredump variables for "
            "the program: expect no dump; its own report, kept in the host log, is the "
            "evidence (`postmortem analyze DUMP --host-log LOG` joins it to a dump of a run "
            "without it)"
        )
    return None
