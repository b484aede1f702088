"""One scanned dump: what the scan found in it, or why it could not read it.

Rows travel between processes and into the cache as plain JSON-ready dicts
(`row_to_dict`, `row_from_dict`), so a cache file never holds executable data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from postmortem.analysis.signature import Frame, Quality, Signature

STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_TIMEOUT = "timeout"
STATUS_CRASHED = "crashed"


@dataclass(frozen=True, slots=True)
class DumpRow:
    """One dump of a scan."""

    path: str
    """The path as found under the scanned tree."""
    size_bytes: int
    mtime: float
    """The file's modification time, Unix seconds."""
    status: str
    """"ok"; "error" (unreadable, truncated, corrupt); "timeout"; "crashed" (its worker died)."""
    error: str | None
    """The one-line reason when the status is not "ok"."""
    time: float
    """When the dump was written: metadata timestamp, else the name's %t, else `mtime`."""
    time_source: str
    """"metadata", "name" or "mtime"."""
    host: str | None
    """From the file name (%h), when a known pattern matched."""
    pid: int | None
    """From the file name (%p)."""
    driver_version: str | None
    """From the metadata section (r565+), e.g. "575.51"."""
    devices: tuple[str, ...]
    """Device names, in device order."""
    exception: int | None
    kernel: str | None
    """The faulting kernel, demangled (full name)."""
    fault_sites: int
    """How many distinct faulting PCs the dump holds (the signature uses the first)."""
    signature: Signature | None
    """None for an error row."""
    report: str | None = None
    """The per-dump report written for it (path as given by --reports)."""
    seconds: float = 0.0
    """Time spent analyzing it."""
    cached: bool = False
    """True when this row came from the cache instead of a fresh analysis."""
    degraded: bool = False
    """True when nvdisasm was missing or failed for it: a later scan analyzes it again."""

    @property
    def failed(self) -> bool:
        return self.status != STATUS_OK


def row_to_dict(row: DumpRow) -> dict[str, Any]:
    """A JSON-ready dict of `row`."""
    return asdict(row)


def row_from_dict(data: dict[str, Any]) -> DumpRow:
    """The row `row_to_dict` made; raises KeyError or TypeError on anything else."""
    fields = dict(data)
    fields["devices"] = tuple(fields["devices"])
    signature = fields["signature"]
    if signature is not None:
        sig = dict(signature)
        sig["frames"] = tuple(sig["frames"])
        sig["components"] = tuple(sig["components"])
        sig["all_frames"] = tuple(Frame(**f) for f in sig["all_frames"])
        sig["quality"] = Quality(**sig["quality"])
        fields["signature"] = Signature(**sig)
    return DumpRow(**fields)


def error_row(
    path: str, size_bytes: int, mtime: float, status: str, error: str, seconds: float = 0.0
) -> DumpRow:
    """A row for a dump that could not be analyzed."""
    return DumpRow(
        path, size_bytes, mtime, status, error, mtime, "mtime", None, None, None, (), None, None,
        0, None, None, seconds,
    )  # fmt: skip


def with_report(row: DumpRow, report: str | None) -> DumpRow:
    """`row` with its per-dump report's path."""
    return replace(row, report=report)
