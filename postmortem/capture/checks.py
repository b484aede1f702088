"""Whether a GPU exception, or a hang, would leave a CUDA coredump: the variables checked.

`check_environment` is pure but for the folder checks (`is_dir`, `os.access`): it reads an
environment and says what would happen on a crash and on a hang, and every problem that loses
a dump. Each rule and where it comes from:

- `CUDA_ENABLE_COREDUMP_ON_EXCEPTION` must be 1 for a GPU exception to be dumped, and the
  other coredump variables do nothing without it (NVIDIA's cuda-gdb manual, "GPU core dump
  support"; the driver API's `CU_COREDUMP_ENABLE_ON_EXCEPTION`, "Coredump Attributes Control
  API"). Only 1 is taken as on here; any other value is said to turn dumps off.
- `CUDA_DEVICE_WAITS_ON_EXCEPTION=1` with coredumps on: the driver prints "CUDA coredump is
  not supported with CUDA attach on exception" and neither dumps nor waits (reported from the
  field: the driver's own message, seen by users who lost a crash to it; NVIDIA documents the
  two variables apart and says nothing of the pair).
- `CUDA_ENABLE_LIGHTWEIGHT_COREDUMP`: "Removed support for CUDA_ENABLE_LIGHTWEIGHT_COREDUMP"
  (CUDA Debugger API release notes, CUDA 13.0, "Major changes"); `CUDA_COREDUMP_GENERATION_FLAGS`
  says the same with flags. Those release notes (CUDA 12.0 to 13.4) name no other coredump
  variable removed or renamed.
- `CUDA_COREDUMP_GENERATION_FLAGS`: the lower-case names of the driver API's
  `CUCoredumpGenerationFlags` (`GENERATION_FLAGS` below says which CUDA documents each).
- `CUDA_COREDUMP_FILE` and `CUDA_COREDUMP_PIPE` may hold ``%h``, ``%p`` and ``%t`` (cuda-gdb
  manual); a relative name is relative to the process's working folder, and the driver makes
  no folder (`--print-env` makes it for that reason). Unset, the dump is the manual's default
  name in the working folder (`DEFAULT_DUMP_NAME`), and the pipe the driver API's default
  ``corepipe.cuda.%h.%p`` (`CU_COREDUMP_PIPE`), there too.
- `CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1`: the pipe through which a hang is dumped on demand
  (cuda-gdb manual; vLLM's hang post of 2025-12-03 sets it beside on-exception).
- `CUDA_COREDUMP_SHOW_PROGRESS=1`: the driver prints ``coredump: Writing ELF file to PATH``
  (vLLM's "CUDA Core Dump" post, 2025-08-11); without it the path is not logged.

Variables such as `CUDA_LAUNCH_BLOCKING` change nothing here and are not looked at. Another
process's environment is read from /proc (`trigger.environ_of_pid`): what it started with,
not what it set in itself later (SGLang's `SGLANG_CUDA_COREDUMP` sets them in the process).
`verdict.py` says the result in words.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from postmortem.capture.environment import LIGHTWEIGHT_FLAGS, PIPE_NAME

ON_EXCEPTION = "CUDA_ENABLE_COREDUMP_ON_EXCEPTION"
USER_TRIGGER = "CUDA_ENABLE_USER_TRIGGERED_COREDUMP"
DUMP_FILE = "CUDA_COREDUMP_FILE"
PIPE = "CUDA_COREDUMP_PIPE"
FLAGS = "CUDA_COREDUMP_GENERATION_FLAGS"
SHOW_PROGRESS = "CUDA_COREDUMP_SHOW_PROGRESS"
LIGHTWEIGHT = "CUDA_ENABLE_LIGHTWEIGHT_COREDUMP"
WAITS = "CUDA_DEVICE_WAITS_ON_EXCEPTION"
COREDUMP_VARIABLES = (USER_TRIGGER, DUMP_FILE, PIPE, FLAGS, SHOW_PROGRESS, LIGHTWEIGHT)
"""The variables that mean nothing without `CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1`."""
DEFAULT_DUMP_NAME = "core_%t_%h_%p.nvcudmp"
"""The dump's name when `CUDA_COREDUMP_FILE` is unset (cuda-gdb's manual; the driver API
gives ``core.cuda.%h.%p``: either way, in the working folder)."""
DEFAULT_PIPE_NAME = "corepipe.cuda.%h.%p"
"""The pipe's name when `CUDA_COREDUMP_PIPE` is unset (the driver API's `CU_COREDUMP_PIPE`)."""


@dataclass(frozen=True, slots=True)
class GenerationFlag:
    """One name `CUDA_COREDUMP_GENERATION_FLAGS` takes."""

    name: str
    skips: str | None
    """What the dump leaves out with it, in words; None: it leaves out no state."""
    since: str | None
    """The CUDA release whose documentation first lists it; None: only cuda-python's
    `CoredumpGenerationFlags` lists it, with no meaning given."""


GENERATION_FLAGS = {
    flag.name: flag
    for flag in (
        # The first five: the driver API's CUCoredumpGenerationFlags, which the 12.2 driver API
        # reference lacks; the debugger API's counterpart, CUDBGCoredumpGenerationFlags, comes
        # with generateCoredump in CUDA 12.3 (its release notes).
        GenerationFlag("skip_nonrelocated_elf_images", "the non-relocated ELF images", "12.3"),
        GenerationFlag("skip_global_memory", "global memory", "12.3"),
        GenerationFlag("skip_shared_memory", "shared memory", "12.3"),
        GenerationFlag("skip_local_memory", "local memory", "12.3"),
        GenerationFlag("skip_abort", None, "12.3"),
        # Debugger API release notes, 12.6: constant banks got a flag of their own.
        GenerationFlag("skip_constbank_memory", "the constant banks", "12.6"),
        # Debugger API release notes: CUDBG_COREDUMP_GZIP_COMPRESS in 13.1,
        # CUDBG_COREDUMP_FAULTED_CONTEXTS_ONLY in 13.3.
        GenerationFlag("gzip_compress", None, "13.1"),
        GenerationFlag("faulted_contexts_only", "the contexts that did not fault", "13.3"),
        # Listed by cuda-python's CoredumpGenerationFlags (1 << 30, 1 << 31) with no meaning
        # given: taken as names, and said nothing of.
        GenerationFlag("no_errbar_at_exit", None, None),
        GenerationFlag("log_only", None, None),
    )
}
"""Every flag name NVIDIA lists, by name (`postmortem.model.GENERATION_FLAGS` has their bits)."""
_LIGHTWEIGHT_CORE = frozenset(LIGHTWEIGHT_FLAGS.split(",")) - {"skip_constbank_memory"}
"""What makes a dump lightweight: CU_COREDUMP_LIGHTWEIGHT_FLAGS before CUDA 12.6 (the
constant banks, small, may be kept)."""
_MEMORY_FLAGS = tuple(name for name, flag in GENERATION_FLAGS.items() if flag.skips)


class Severity(Enum):
    """How much a problem costs."""

    ERROR = "error"
    """A dump that was asked for (of a crash, or of a hang) will not be written."""
    WARNING = "warning"
    """A dump is written, but something is lost or not as asked."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing in the environment that loses a dump, or part of one."""

    severity: Severity
    variables: tuple[str, ...]
    """The variables concerned, the one to change first."""
    message: str
    """What is wrong and what it costs, one line."""
    fix: str
    """What to do, one line ("unset CUDA_DEVICE_WAITS_ON_EXCEPTION")."""


class DumpKind(Enum):
    """How much of the GPU's state a dump holds."""

    FULL = "full"
    LIGHTWEIGHT = "lightweight"
    PARTIAL = "partial"
    DRIVER_DEPENDENT = "lightweight before CUDA 13.0, full since"


@dataclass(frozen=True, slots=True)
class DumpContents:
    """What a dump would hold, from `CUDA_COREDUMP_GENERATION_FLAGS`."""

    kind: DumpKind
    kept: tuple[str, ...]
    """What the dump holds, in words."""
    skipped: tuple[str, ...]
    """What it leaves out, in words."""
    flags: tuple[str, ...]
    """The documented flag names given, in their order (misspelled ones are problems)."""
    aborts: bool
    """The driver ends the process once the dump is written (no ``skip_abort``)."""
    compressed: bool
    """Written gzip-compressed (``gzip_compress``)."""


@dataclass(frozen=True, slots=True)
class DumpPlace:
    """Where the driver would write a dump, or make its pipe."""

    variable: str
    """`CUDA_COREDUMP_FILE` or `CUDA_COREDUMP_PIPE`."""
    pattern: str
    """The variable's value, or the default name when it is unset."""
    default: bool
    """The variable is unset: the driver's default name in the working folder."""
    folder: Path | None
    """The folder, absolute, ``%h`` filled in; None when it holds ``%p`` or ``%t``."""


@dataclass(frozen=True, slots=True)
class EnvironmentCheck:
    """What the CUDA driver would do with an environment, and what is wrong with it."""

    on_exception: bool
    """A GPU exception would write a dump."""
    dump: DumpPlace
    contents: DumpContents
    on_demand: bool
    """A hang could be dumped through the pipe (`postmortem trigger`)."""
    hang_asked: bool
    """`CUDA_ENABLE_USER_TRIGGERED_COREDUMP` is 1 (whether it works: `on_demand`)."""
    pipe: DumpPlace
    shows_progress: bool
    """The driver prints the path of each dump it writes."""
    problems: tuple[Problem, ...]
    """Errors first, then warnings."""

    @property
    def errors(self) -> tuple[Problem, ...]:
        """The problems that cost a dump that was asked for."""
        return tuple(p for p in self.problems if p.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        """The problems that cost part of a dump, or a line of the log."""
        return tuple(p for p in self.problems if p.severity is Severity.WARNING)


def check_environment(
    environ: Mapping[str, str],
    cwd: Path,
    *,
    host: str | None = None,
    made: Collection[Path] = (),
) -> EnvironmentCheck:
    """What a process started with `environ` in the folder `cwd` would leave on a GPU exception
    and on a hang, and every problem found. Folders are checked as this user; `made` are
    folders that will be made before the process starts (capture's own), checked for whether
    they can be; ``%h`` is `host` (this machine's name when None)."""
    host = host if host is not None else socket.gethostname()
    waits = _on(environ, WAITS)
    dump = _place(environ, DUMP_FILE, DEFAULT_DUMP_NAME, cwd, host)
    pipe = _place(environ, PIPE, DEFAULT_PIPE_NAME, cwd, host)
    exception_asked = _on(environ, ON_EXCEPTION) and not waits
    hang_asked = _on(environ, USER_TRIGGER) and not waits
    problems = [*_switch_problems(environ, waits), *_lightweight_problems(environ)]
    flags, flag_problems = _parse_flags(environ.get(FLAGS, ""))
    problems += flag_problems
    dump_problem = _place_problem(dump, "dump", made) if exception_asked or hang_asked else None
    pipe_problem = _place_problem(pipe, "pipe", made) if hang_asked else None
    problems += [p for p in (dump_problem, pipe_problem) if p is not None]
    if hang_asked and not environ.get(PIPE):
        problems.append(_default_pipe_warning(pipe))
    shows_progress = _on(environ, SHOW_PROGRESS)
    if (exception_asked or hang_asked) and not shows_progress:
        problems.append(_progress_warning())
    problems.sort(key=lambda p: p.severity is not Severity.ERROR)
    return EnvironmentCheck(
        on_exception=exception_asked and dump_problem is None,
        dump=dump,
        contents=_contents(environ, flags),
        on_demand=hang_asked and dump_problem is None and pipe_problem is None,
        hang_asked=_on(environ, USER_TRIGGER),
        pipe=pipe,
        shows_progress=shows_progress,
        problems=tuple(problems),
    )


def _on(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip() == "1"


def _switch_problems(environ: Mapping[str, str], waits: bool) -> list[Problem]:
    """The switches: dumps off, or turned off by the wait for a debugger."""
    on_exception = environ.get(ON_EXCEPTION, "").strip()
    others = [name for name in COREDUMP_VARIABLES if environ.get(name)]
    problems = []
    if waits and (on_exception == "1" or _on(environ, USER_TRIGGER)):
        problems.append(
            Problem(
                Severity.ERROR,
                (WAITS, ON_EXCEPTION),
                f'{WAITS}=1 turns GPU coredumps off (the driver prints "CUDA coredump is not '
                'supported with CUDA attach on exception"): no dump is written, and the '
                "process does not wait for a debugger either",
                f"unset {WAITS}",
            )
        )
    if on_exception == "1":
        return problems
    fix = f"export {ON_EXCEPTION}=1"
    if _on(environ, USER_TRIGGER):
        message = f"{USER_TRIGGER}=1 without {ON_EXCEPTION}=1: a hang can be dumped on demand, "
        message += "but a GPU exception writes no dump"
    elif others or on_exception:
        state = f"is {on_exception!r}" if on_exception else "is not set"
        message = f"{ON_EXCEPTION} {state}, not 1: GPU coredumps are off"
        message += f", whatever {', '.join(others)} say" if others else ""
    else:
        message = "no coredump variable is set: a GPU exception writes no dump"
        fix += ", or run the command under `postmortem capture`"
    problems.append(Problem(Severity.ERROR, (ON_EXCEPTION,), message, fix))
    return problems


def _lightweight_problems(environ: Mapping[str, str]) -> list[Problem]:
    """The variable CUDA 13.0 removed, when nothing else asks for a lightweight dump."""
    if not _on(environ, LIGHTWEIGHT) or environ.get(FLAGS, "").strip():
        return []
    return [
        Problem(
            Severity.WARNING,
            (LIGHTWEIGHT, FLAGS),
            f"CUDA 13.0 removed {LIGHTWEIGHT}: a CUDA 13 driver ignores it and writes a full "
            "dump (all of the GPU's memory: minutes and gigabytes); older ones a lightweight one",
            f"use {FLAGS}={LIGHTWEIGHT_FLAGS} instead of {LIGHTWEIGHT}=1",
        )
    ]


def _parse_flags(value: str) -> tuple[tuple[str, ...], list[Problem]]:
    """The documented names in `value`, and a problem for each other one."""
    names = [part.strip() for part in value.split(",") if part.strip()]
    known = tuple(name for name in names if name in GENERATION_FLAGS)
    return known, [_unknown_flag(name) for name in names if name not in GENERATION_FLAGS]


def _unknown_flag(name: str) -> Problem:
    message = (
        f"{FLAGS}: {name!r} is not a flag name the driver documents, so it does not leave "
        "out what it says (what a driver does with an unknown name is not documented)"
    )
    if name.lower() in GENERATION_FLAGS:
        fix = f"write it in lower case, {name.lower()}, as the driver documents it"
    elif close := difflib.get_close_matches(name.lower(), GENERATION_FLAGS, n=1, cutoff=0.6):
        fix = f"did you mean {close[0]}?"
    else:
        fix = f"use only {', '.join(GENERATION_FLAGS)}"
    return Problem(Severity.WARNING, (FLAGS,), message, fix)


def _contents(environ: Mapping[str, str], flags: tuple[str, ...]) -> DumpContents:
    """What the dump holds. The registers, the device tables and the relocated images are
    always written; each memory flag leaves its part out."""
    given = set(flags)
    skipped = tuple(_skips(name) for name in _MEMORY_FLAGS if name in given)
    # The contexts that did not fault are kept unless asked otherwise: not worth a word.
    kept = ("registers and device tables", "the relocated ELF images") + tuple(
        _skips(name) for name in _MEMORY_FLAGS if name not in given | {"faulted_contexts_only"}
    )
    if not environ.get(FLAGS, "").strip() and _on(environ, LIGHTWEIGHT):
        kind = DumpKind.DRIVER_DEPENDENT
    elif given >= _LIGHTWEIGHT_CORE:
        kind = DumpKind.LIGHTWEIGHT
    elif not given & set(_MEMORY_FLAGS):
        kind = DumpKind.FULL
    else:
        kind = DumpKind.PARTIAL
    aborts = "skip_abort" not in given
    return DumpContents(kind, kept, skipped, flags, aborts, "gzip_compress" in given)


def _skips(name: str) -> str:
    return GENERATION_FLAGS[name].skips or name


_PLACEHOLDER = re.compile(r"%(.)", re.DOTALL)


def _place(
    environ: Mapping[str, str], variable: str, default: str, cwd: Path, host: str
) -> DumpPlace:
    pattern = environ.get(variable) or default
    full = pattern if os.path.isabs(pattern) else os.path.join(cwd, pattern)
    head = os.path.dirname(full)
    if any(spec in "pt" for spec in _PLACEHOLDER.findall(head)):
        return DumpPlace(variable, pattern, not environ.get(variable), None)
    fields = {"h": host, "%": "%"}
    folder = _PLACEHOLDER.sub(lambda m: fields.get(m[1], m[0]), head)
    return DumpPlace(variable, pattern, not environ.get(variable), Path(os.path.normpath(folder)))


def _place_problem(place: DumpPlace, what: str, made: Collection[Path]) -> Problem | None:
    """An error when the driver cannot write into the place's folder."""
    name = os.path.basename(place.pattern)
    if place.folder is None:
        return Problem(
            Severity.ERROR,
            (place.variable,),
            f"{place.variable}={place.pattern}: its folder holds %p or %t, a folder per "
            f"process that nobody makes: no {what} is written",
            f"keep %p and %t in the file name: {place.variable}=DIR/{name}",
        )
    reason = _unwritable(place.folder, made)
    if reason is None:
        return None
    where = "the working folder" if place.default else "the folder"
    fix = f"mkdir -p {place.folder}" if reason == "does not exist" else None
    return Problem(
        Severity.ERROR,
        (place.variable,),
        f"{place.variable}: {where} {place.folder} {reason}: no {what} is written (the driver "
        "makes no folder)",
        fix or f"export {place.variable}=DIR/{name} with DIR a folder this user can write",
    )


def _unwritable(folder: Path, made: Collection[Path]) -> str | None:
    """Why the driver could not write into `folder`; None when it could."""
    if folder.is_dir():
        return None if os.access(folder, os.W_OK | os.X_OK) else "is not writable"
    if folder.exists():
        return "is not a folder"
    nearest = next((p for p in folder.parents if p.exists()), None)
    if nearest is not None and not nearest.is_dir():
        return f"cannot exist ({nearest} is not a folder)"
    if folder not in made:
        return "does not exist"
    if nearest is None or os.access(nearest, os.W_OK | os.X_OK):
        return None  # made before the command starts
    return f"cannot be made ({nearest} is not writable)"


def _default_pipe_warning(pipe: DumpPlace) -> Problem:
    return Problem(
        Severity.WARNING,
        (PIPE, USER_TRIGGER),
        f"{USER_TRIGGER}=1 without {PIPE}: the driver makes each process's pipe as "
        f"{DEFAULT_PIPE_NAME} in its working folder ({pipe.folder})",
        f"export {PIPE}=DIR/{PIPE_NAME} to know where it is (`postmortem trigger --pid PID` "
        "looks in both)",
    )


def _progress_warning() -> Problem:
    return Problem(
        Severity.WARNING,
        (SHOW_PROGRESS,),
        # Not the driver's line itself: a log of ours must not read as the driver's.
        f"{SHOW_PROGRESS} is not 1: the driver does not log where it writes a dump (its "
        '"Writing ELF file to" line, by which `capture` finds a worker\'s dump)',
        f"export {SHOW_PROGRESS}=1",
    )
