"""Find the external tools postmortem uses, and their versions.

Search order for a tool (first hit wins):
1. the path given by the caller (a command-line option);
2. the environment variable ``POSTMORTEM_<NAME>`` (``POSTMORTEM_CUDA_GDB`` for cuda-gdb);
3. ``$PATH``;
4. ``$CUDA_HOME/bin``;
5. ``/usr/local/cuda/bin``;
6. ``nvidia/cu13/bin`` inside any ``sys.path`` entry: where the ``nvidia-cuda-nvdisasm`` and
   ``nvidia-cuda-cuobjdump`` wheels put their programs (the `tools` extra).
   The folder is looked up on disk; the ``nvidia`` package is never imported.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeAlias

from postmortem._version import install_extra
from postmortem.errors import ToolFailed, ToolNotFound
from postmortem.toolrun import run_tool

_PIP_HINT = install_extra("tools")
_INSTALL_HINTS: dict[str, str] = {
    "nvdisasm": _PIP_HINT,
    "cuobjdump": _PIP_HINT,
    "cuda-gdb": (
        "on Debian, enable the non-free component and run 'apt-get install nvidia-cuda-gdb'; "
        "elsewhere install the CUDA toolkit (it ships cuda-gdb in its bin folder)"
    ),
}
_WHEEL_BIN = Path("nvidia", "cu13", "bin")
_VERSION_TIMEOUT_S = 20.0


def env_var_name(name: str) -> str:
    """Returns the environment variable that overrides the location of a tool.

    Args:
        name: The tool's program name, e.g. ``cuda-gdb``.

    Returns:
        ``POSTMORTEM_`` plus the name in upper case with ``-`` turned into ``_``.
    """
    return "POSTMORTEM_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def install_hint(name: str) -> str:
    """Returns one line that says how to install a tool.

    Args:
        name: The tool's program name.

    Returns:
        The hint, or a generic one for a tool postmortem does not know.
    """
    return _INSTALL_HINTS.get(name, f"install {name}, or set {env_var_name(name)} to its path")


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """Which executable a tool name resolved to, and what chose it."""

    path: Path
    """The executable that runs."""
    origin: str
    """What chose it: ``--nvdisasm``, ``user config FILE``, ``$POSTMORTEM_NVDISASM``,
    ``$PATH``, ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin`` or ``nvidia wheel``."""


ToolValue: TypeAlias = "Tool | bool | str | os.PathLike[str] | None"
"""What a script may pass for a tool: a `Tool`, False (off), True or None (searched), or the
path of the program."""


@dataclass(frozen=True, slots=True)
class Tool:
    """How one external tool is to be used, as an option, a settings file or a script said:
    not at all, the program someone named, or the first the search finds (module docstring)."""

    run: bool = True
    """False: the tool is not run (`--no-disasm`, `--no-gdb`)."""
    path: str | Path | None = None
    """The program someone named; None: searched for."""
    origin: str | None = None
    """What named `path`: ``--nvdisasm``, ``user config FILE``; None when nobody did."""

    OFF: ClassVar[Tool]
    """Not run."""

    @classmethod
    def of(cls, value: ToolValue) -> Tool:
        """`value` as a `Tool` (see `ToolValue`)."""
        if isinstance(value, Tool):
            return value
        if isinstance(value, bool) or value is None:
            return cls(run=value is not False)
        return cls(path=os.fspath(value))

    def locate(self, name: str) -> ToolChoice:
        """The program `name` runs as, and what chose it (`locate_tool`); raises ToolNotFound."""
        return locate_tool(name, self.path, self.origin)


Tool.OFF = Tool(run=False)


def find_tool(name: str, explicit: str | os.PathLike[str] | None = None) -> Path:
    """Finds an external tool (see the module docstring for the search order).

    Args:
        name: The program name: ``nvdisasm``, ``cuobjdump`` or ``cuda-gdb``.
        explicit: A path the user gave; when set, nothing else is searched.

    Returns:
        The path of an executable file.

    Raises:
        ToolNotFound: No executable was found; it lists every place searched.
    """
    return locate_tool(name, explicit).path


def locate_tool(
    name: str, explicit: str | os.PathLike[str] | None = None, origin: str | None = None
) -> ToolChoice:
    """Finds an external tool like `find_tool`, and says what chose it.

    Args:
        name: The program name.
        explicit: A path the user gave; when set, nothing else is searched.
        origin: Where `explicit` came from (an option, a settings file); "given path" when
            not said.

    Returns:
        The executable and its origin.

    Raises:
        ToolNotFound: No executable was found; it lists every place searched.
    """
    searched: list[str] = []
    if explicit is not None:
        where = origin or "given path"
        return ToolChoice(_explicit(name, os.fspath(explicit), searched, origin=where), where)
    var = env_var_name(name)
    from_env = os.environ.get(var)
    if from_env:
        return ToolChoice(_explicit(name, from_env, searched, origin=f"${var}"), f"${var}")
    searched.append("$PATH")
    on_path = shutil.which(name)
    if on_path is not None:
        return ToolChoice(Path(on_path), "$PATH")
    for folder, label in _fallback_folders():
        candidate = folder / name
        searched.append(str(folder))
        if _is_executable(candidate):
            return ToolChoice(candidate, label)
    raise ToolNotFound(name, tuple(searched), install_hint(name))


def _explicit(name: str, value: str, searched: list[str], *, origin: str) -> Path:
    searched.append(f"{origin} {value}")
    candidate = Path(value).expanduser()
    if _is_executable(candidate):
        return candidate.absolute()  # tools run in a scratch directory, not ours
    if os.sep not in value:
        found = shutil.which(value)
        if found is not None:
            return Path(found)
    raise ToolNotFound(name, tuple(searched), install_hint(name))


def _fallback_folders() -> list[tuple[Path, str]]:
    folders: list[tuple[Path, str]] = []
    cuda_home = os.environ.get("CUDA_HOME")
    if cuda_home:
        folders.append((Path(cuda_home) / "bin", "$CUDA_HOME/bin"))
    folders.append((Path("/usr/local/cuda/bin"), "/usr/local/cuda/bin"))
    folders += [
        (Path(entry) / _WHEEL_BIN, "nvidia wheel")
        for entry in sys.path
        if entry and (Path(entry) / _WHEEL_BIN).is_dir()
    ]
    return folders


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def tool_version(path: str | os.PathLike[str]) -> str | None:
    """Returns the version a tool reports with ``--version``, cached per file.

    Args:
        path: The tool's executable.

    Returns:
        The version, e.g. ``13.0.88`` (nvdisasm) or ``11.8`` (cuda-gdb); None when the
        tool cannot be run or prints nothing that looks like a version.
    """
    resolved = Path(path)
    try:
        stamp = resolved.stat().st_mtime_ns
    except OSError:
        return None
    return _cached_version(str(resolved), stamp)


@functools.lru_cache(maxsize=32)
def _cached_version(path: str, mtime_ns: int) -> str | None:
    del mtime_ns  # part of the cache key only: a reinstalled tool is asked again
    try:
        run = run_tool([path, "--version"], timeout=_VERSION_TIMEOUT_S, merge_stderr=True)
    except (ToolFailed, ToolNotFound):
        return None
    return parse_version_text(run.stdout)


# nvdisasm/cuobjdump/nvcc: "Cuda compilation tools, release 13.0, V13.0.88".
_RELEASE_V = re.compile(r"release (\d+\.\d+), V(\d+\.\d+(?:\.\d+)*)")
# cuda-gdb 11.8: "NVIDIA (R) CUDA Debugger" then "11.8 release";
# cuda-gdb 12.1: "NVIDIA (R) CUDA Debugger" then "CUDA Toolkit 12.1 release".
_GDB_RELEASE = re.compile(r"^(?:CUDA Toolkit )?(\d+\.\d+(?:\.\d+)*) release\b", re.MULTILINE)
_RELEASE_ONLY = re.compile(r"\brelease (\d+\.\d+(?:\.\d+)*)")
_CUDA_GDB_NAMED = re.compile(r"\bcuda-gdb\)? (\d+\.\d+(?:\.\d+)*)", re.IGNORECASE)
_DEBUGGER_LINE = re.compile(r"CUDA Debugger\D{0,40}?(\d+\.\d+(?:\.\d+)*)")


def parse_version_text(text: str) -> str | None:
    """Finds the version in what a CUDA tool prints for ``--version``.

    Args:
        text: The tool's output.

    Returns:
        The most precise version found (``13.0.88`` over ``13.0``), or None.
    """
    for pattern, group in (
        (_RELEASE_V, 2),
        (_GDB_RELEASE, 1),
        (_CUDA_GDB_NAMED, 1),
        (_DEBUGGER_LINE, 1),
        (_RELEASE_ONLY, 1),
    ):
        match = pattern.search(text)
        if match:
            return match.group(group)
    return None
