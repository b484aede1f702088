"""Settings a user or a project keeps, so that every command need not repeat them.

Two files, both optional, in TOML:

- the user's, ``$XDG_CONFIG_HOME/postmortem/postmortem.toml`` (``~/.config`` when unset),
  with the keys at the top level;
- the project's, the ``[tool.postmortem]`` table of the nearest ``pyproject.toml`` from the
  current folder up.

Keys: ``source-dirs`` and ``map-paths`` (lists; a project's add to the user's), ``nvdisasm``,
``cuda-gdb``, ``rules`` and ``known-crashes`` (paths; a project's win). Relative paths are
taken from the folder of the file that names them. An option given on the command line wins
over both files.

A project's file is data, not code: users run postmortem inside the source tree of the
kernel that crashed (``--source-dir .``), which may be anyone's. So the keys that name a
program to run (``nvdisasm``, ``cuda-gdb``) are taken from a project's file only when the
user's own file lists the project's folder in ``trusted-projects``; otherwise they are
ignored and a warning says how to trust them. A project's ``rules`` are taken, with a
warning: they change how crashes group.

Every file is read within a bound: a settings file holds at most 4 MiB (a project's file
that holds more is skipped unread, with a warning) and a list at most `MAX_LIST_ITEMS`
entries (the rest are dropped, with a warning).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postmortem.errors import ConfigError, UnreadableFile
from postmortem.safefile import read_regular, read_within

_LISTS = ("source-dirs", "map-paths", "trusted-projects")
_PATHS = ("nvdisasm", "cuda-gdb", "rules", "known-crashes")
_PROGRAMS = ("nvdisasm", "cuda-gdb")
"""Keys whose value is run: never from a project's file the user has not trusted."""
_USER_ONLY = ("trusted-projects",)
_KEYS = frozenset((*_LISTS, *_PATHS))
_MAX_PARENTS = 64  # how far up a pyproject.toml is looked for
_MAX_FILE_BYTES = 4 << 20  # a settings file is a few lines; a pyproject.toml a few KiB
MAX_LIST_ITEMS = 256
"""The most entries one file's list (``source-dirs``, ``map-paths``, ``trusted-projects``)
may hold: every source file is looked for in each folder and mapped by each prefix."""


@dataclass(frozen=True, slots=True)
class Settings:
    """What the configuration files say, merged: the project's over the user's."""

    source_dirs: tuple[str, ...] = ()
    map_paths: tuple[str, ...] = ()
    """``OLD=NEW`` prefixes, as `--map-path` takes them."""
    nvdisasm: str | None = None
    cuda_gdb: str | None = None
    rules: str | None = None
    known_crashes: str | None = None
    """The repository's known-crashes file, for `scan --known` and `triage --file`."""
    files: tuple[Path, ...] = ()
    """The files read, user's first."""
    origins: tuple[tuple[str, str], ...] = ()
    """(key, "user config FILE" or "project config FILE") for each program setting taken."""
    warnings: tuple[str, ...] = ()
    """One line per setting ignored or cut short (a program named by a project the user has
    not trusted, a list over `MAX_LIST_ITEMS`, a project's file too large), and for rules
    that such a project sets."""

    def origin(self, key: str) -> str | None:
        """Which file the program setting `key` (``nvdisasm``, ``cuda-gdb``) came from."""
        return dict(self.origins).get(key)

    def defaults(self) -> dict[str, dict[str, Any]]:
        """click's `default_map`: each command's option defaults from these settings."""
        tools = {k: v for k, v in (("nvdisasm", self.nvdisasm),) if v is not None}
        paths = {"source_dirs": list(self.source_dirs)} if self.source_dirs else {}
        maps = {"path_maps": list(self.map_paths)} if self.map_paths else {}
        rules = {"rules": self.rules} if self.rules is not None else {}
        gdb = {"cuda_gdb": self.cuda_gdb} if self.cuda_gdb is not None else {}
        known = {"known": self.known_crashes} if self.known_crashes is not None else {}
        file = {"path": self.known_crashes} if self.known_crashes is not None else {}
        return {
            "analyze": {**tools, **gdb, **paths, **maps},
            "scan": {**tools, **gdb, **paths, **maps, **rules, **known},
            "triage": {verb: dict(file) for verb in ("resolve", "ignore", "reopen", "list")},
            "signature": {**tools, **maps, **rules},
            "debug": {**gdb},
        }


def load_settings(cwd: Path | None = None) -> Settings:
    """The user's and the project's settings, merged.

    A project's file larger than a settings file can be is skipped with a warning, and a
    list longer than `MAX_LIST_ITEMS` keeps its first entries, with a warning.

    Raises:
        ConfigError: a file that exists cannot be read, is not TOML, or holds an unknown key
            or a value of the wrong type.
    """
    found: list[tuple[Path, dict[str, Any], str]] = []
    warnings: list[str] = []
    user = _user_file()
    trusted: tuple[Path, ...] = ()
    if user.is_file():
        table = _capped(user, _table(user, _read(user)), warnings)
        found.append((user, table, "user config"))
        trusted = tuple(_folder(user.parent, d) for d in table.get("trusted-projects", ()))
    project = _project_file(cwd or Path.cwd())
    raw = _project_table(project, warnings) if project is not None else None
    if project is not None and raw is not None:
        table = _capped(project, _table(project, raw), warnings)
        if not _is_trusted(project.parent, trusted):
            table = _data_only(project, table, user, warnings)
        found.append((project, table, "project config"))
    settings: dict[str, Any] = {"source_dirs": (), "map_paths": (), "origins": ()}
    for path, table, kind in found:
        base = path.parent
        settings["source_dirs"] += tuple(str(base / d) for d in table.get("source-dirs", ()))
        settings["map_paths"] += tuple(table.get("map-paths", ()))
        for key in _PATHS:
            if key in table:
                settings[key.replace("-", "_")] = str(base / table[key])
                if key in _PROGRAMS:
                    settings["origins"] += ((key, f"{kind} {path}"),)
    return Settings(**settings, files=tuple(path for path, _, _ in found), warnings=tuple(warnings))


def _capped(path: Path, table: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """`table` with each list cut to `MAX_LIST_ITEMS` entries, and a warning for each cut."""
    long = [key for key in _LISTS if len(table.get(key, ())) > MAX_LIST_ITEMS]
    warnings += [
        f"{path}: {key} has {len(table[key]):,} entries; only the first {MAX_LIST_ITEMS:,} are "
        f"used (the most a settings file may set)"
        for key in long
    ]
    return {**table, **{key: table[key][:MAX_LIST_ITEMS] for key in long}}


def _data_only(
    project: Path, table: dict[str, Any], user: Path, warnings: list[str]
) -> dict[str, Any]:
    """A project's table without the keys that only the user may set; a warning for each
    key dropped, and for rules, which are kept but change how crashes group."""
    dropped = [key for key in (*_PROGRAMS, *_USER_ONLY) if key in table]
    warnings += [
        f"{project}: ignored {key} = {table[key]!r}: a project's settings may not name a "
        f"program to run (trust this project with trusted-projects in {user}, or pass "
        f"--{key})"
        if key in _PROGRAMS
        else f"{project}: ignored {key}: only the user's own settings ({user}) may trust projects"
        for key in dropped
    ]
    if "rules" in table:
        warnings.append(
            f"{project}: rules = {table['rules']!r} from this project's settings change how "
            f"crashes group into signatures (trust this project with trusted-projects in "
            f"{user}, or pass --rules)"
        )
    return {k: v for k, v in table.items() if k not in dropped}


def _folder(base: Path, value: str) -> Path:
    return Path(os.path.abspath(base / Path(value).expanduser()))


def _is_trusted(folder: Path, trusted: tuple[Path, ...]) -> bool:
    # Compared with links resolved: a link into a trusted tree does not carry the trust
    # out of it, nor does a trusted link name point elsewhere than where it resolves.
    here = folder.resolve()
    return any(here == t.resolve() or t.resolve() in here.parents for t in trusted)


def cache_folder() -> Path:
    """Where postmortem keeps what it may rebuild: ``$XDG_CACHE_HOME/postmortem`` (``~/.cache``
    when the variable is unset). The scan cache, compiled templates and the cuda-gdb memo."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "postmortem"


def _user_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "postmortem" / "postmortem.toml"


def _project_file(cwd: Path) -> Path | None:
    folder = cwd.absolute()
    for _ in range(_MAX_PARENTS):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
        if folder.parent == folder:
            return None
        folder = folder.parent
    return None


def _project_table(path: Path, warnings: list[str]) -> Any:
    # Found, not named: read within the bound, and one too large is skipped unread (a
    # sparse file of gigabytes in a folder above costs nothing).
    try:
        data = read_within(path, _MAX_FILE_BYTES)
    except UnreadableFile:
        return None
    if data is None:
        warnings.append(
            f"{path}: skipped: larger than {_MAX_FILE_BYTES:,} bytes, the most a settings "
            f"file may hold"
        )
        return None
    # Another tool's pyproject.toml is none of our business: only one that names
    # [tool.postmortem] is held to being readable TOML. One that never says "postmortem"
    # (whichever way it spells the table) is not parsed at all: TOML costs start-up.
    if b"postmortem" not in data:
        return None
    try:
        table = parse_toml(path, data)
    except ConfigError:
        if b"[tool.postmortem" in data:
            raise
        return None
    tool = table.get("tool")
    return tool.get("postmortem") if isinstance(tool, dict) else None


def _read(path: Path) -> dict[str, Any]:
    try:
        data = read_regular(path, _MAX_FILE_BYTES)
    except UnreadableFile as error:
        raise ConfigError(path, f"cannot read: {error.reason}") from None
    return parse_toml(path, data)


def parse_toml(path: Path, data: bytes) -> dict[str, Any]:
    """`data`, the bytes of the TOML file `path`, as a table; raises ConfigError."""
    # Imported here: most runs find no settings file and never parse TOML.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
    try:
        table: dict[str, Any] = tomllib.loads(data.decode())
        return table
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(path, f"not TOML: {error}") from None
    except RecursionError:  # tomllib's parser recurses once per level of nesting
        raise ConfigError(path, "not TOML: nested too deeply") from None


def _table(path: Path, table: Any) -> dict[str, Any]:
    # Validated before any key is dropped as untrusted: a malformed file is an error either way.
    if not isinstance(table, dict):
        raise ConfigError(path, "the postmortem settings are not a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        known = ", ".join(sorted(_KEYS))
        raise ConfigError(path, f"unknown key {unknown[0]!r} (known: {known})")
    for key in _LISTS:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(path, f"{key} must be a list of strings")
    for key in _PATHS:
        if key in table and not isinstance(table[key], str):
            raise ConfigError(path, f"{key} must be a string (a path)")
    for value in table.get("map-paths", []):
        if "=" not in value:
            raise ConfigError(path, f"map-paths entry {value!r} is not OLD=NEW")
    return table
