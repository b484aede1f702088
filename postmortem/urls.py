"""Dumps named by URL (`s3://bucket/core.nvcudmp`, `gs://…`, any fsspec URL).

A URL travels through the library as a `DumpUrl`: a `Path` whose `str()` is the URL, so that
reports, errors and a scan's rows name it as the user wrote it, while `.name` and
`.suffix` work as for a file. It refuses to be opened as a local file (`os.fspath` raises).
`file://` URLs are plain local paths and never become a `DumpUrl`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from postmortem.errors import BadOption

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def _internal(text: str) -> str:
    # s3://bucket/key is held as the path /s3:/bucket/key: the scheme is its first part.
    match = _SCHEME.match(text)
    return f"/{match.group(1)}:/{text[match.end() :]}" if match else text


class DumpUrl(type(Path())):  # type: ignore[misc]
    """A dump in an object store, named by its URL."""

    def __new__(cls, *args: str | Path) -> DumpUrl:
        made: DumpUrl = super().__new__(cls, *(_internal(str(a)) for a in args))
        return made

    if sys.version_info >= (3, 12):

        def __init__(self, *args: str | Path) -> None:
            super().__init__(*(_internal(str(a)) for a in args))

    @property
    def protocol(self) -> str:
        """The URL's scheme: "s3", "gs", "hdfs", …"""
        return str(self.parts[1][:-1])

    def __str__(self) -> str:
        return f"{self.protocol}://" + "/".join(self.parts[2:])

    def __repr__(self) -> str:
        return f"DumpUrl({str(self)!r})"

    def __fspath__(self) -> str:
        raise TypeError(f"{self} is a URL, not a local path")


def is_url(text: str | Path) -> bool:
    """True for `scheme://…` (a `file://` URL included)."""
    return isinstance(text, DumpUrl) or bool(_SCHEME.match(str(text)))


def absolute_path(path: str | Path) -> str:
    """A local path made absolute (links not resolved), a URL as it is: how the scan cache
    and a dump's id know a dump, however its folder was spelled."""
    return str(path) if is_url(path) else os.path.abspath(path)


def as_dump_path(text: str | Path) -> Path:
    """A local `Path`, or a `DumpUrl` for a URL; `file://` URLs become local paths."""
    if isinstance(text, Path):
        return text
    match = _SCHEME.match(text)
    if match is None:
        return Path(text)
    if match.group(1).lower() == "file":
        return Path(text[match.end() :] or "/")
    return DumpUrl(text)


def parse_storage_options(pairs: Iterable[str]) -> dict[str, object]:
    """`KEY=VALUE` pairs as fsspec storage options; a dotted key nests
    (`client_kwargs.region_name=x`), a value that reads as JSON (`true`, `3`) is that value.

    Raises:
        BadOption: A pair without `=`, or a value nested too deeply.
    """
    options: dict[str, object] = {}
    for pair in pairs:
        import json  # here: most commands are given no option, and json costs start-up

        key, equals, raw = pair.partition("=")
        if not equals or not key:
            raise BadOption("--storage-option", f"{pair!r} is not KEY=VALUE")
        try:
            value: object = json.loads(raw)
        except ValueError:
            value = raw
        except RecursionError:  # the JSON decoder recurses once per level of nesting
            raise BadOption("--storage-option", f"{key}: the value is nested too deeply") from None
        *outer, last = key.split(".")
        level = options
        for name in outer:
            nested = level.setdefault(name, {})
            if not isinstance(nested, dict):
                raise BadOption("--storage-option", f"{key}: {name} is set to a value already")
            level = nested
        level[last] = value
    return options


def use_storage_options(protocols: Iterable[str], options: dict[str, object]) -> None:
    """Make `options` the defaults of every filesystem of `protocols`, in this process and
    in the worker processes it starts (through fsspec's `FSSPEC_<PROTOCOL>` variables)."""
    if not options:
        return
    import json

    for protocol in set(protocols):
        name = f"FSSPEC_{protocol.upper()}"
        try:
            current = json.loads(os.environ.get(name, "{}"))
        except (ValueError, RecursionError):
            current = {}
        merged = {**(current if isinstance(current, dict) else {}), **options}
        os.environ[name] = json.dumps(merged)
        fsspec_config = sys.modules.get("fsspec.config")
        if fsspec_config is not None:  # fsspec read the environment when it was imported
            fsspec_config.conf.setdefault(protocol, {}).update(options)
