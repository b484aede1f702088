"""The driver's Xid lines of host logs (`scan --host-log`), for the fleet's GPUs.

A kernel log (``dmesg``, ``journalctl -k``, a syslog file) holds one ``NVRM: Xid`` line
per event, naming the GPU by its PCI address: ``NVRM: Xid (PCI:0000:3b:00): 79, …``. The
Xids that bear on hardware or code (13 graphics engine exception, 31 MMU fault, 43 a
stopped channel, 79 fallen off the bus) are joined to the GPUs of the fleet's verdict
(`postmortem.scan.fleet.hardware.join_xids`) by PCI bus and device, and by host where both the
line (its syslog prefix) and the dump's file name give one.

Each log is read as `postmortem.host.reader.read_log_tail` reads it (its last
`XID_TAIL_BYTES`; a pipe for a few seconds at most) and searched by one regular expression
over the bytes read, newest first, up to `XID_LINES` lines; the lines that say the same
(Xid, GPU and host) are one `HostXid` with their count. A log searched in part is a scan
warning that says which of its bytes were.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from postmortem.host.driver import XID_PREFIX
from postmortem.host.reader import LogTail, read_log_tail
from postmortem.pci import parse_pci

JOINED_XIDS = (13, 31, 43, 79)
"""The Xids a GPU's verdict is shown with."""
XID_TAIL_BYTES = 128 << 20
"""How much of the end of each host log is searched (a kernel log of a million Xids fits)."""
XID_LINES = 1 << 20
"""Xid lines of one log searched at most, the newest: a log of nothing else costs seconds."""
XID_SOURCES = 1 << 16
"""Distinct (Xid, GPU, host) of one log at most."""
XID_PIPE_S = 2.0
"""How long a pipe is read (its search takes as long again at most)."""
_SLICE_BYTES = 1 << 20
"""The log is searched from its end a slice at a time, each slice from its start."""

# The driver's line as `postmortem.host.driver` reads it, of the joined Xids only: the code
# ends the line or is followed by a comma.
_XID = re.compile(
    XID_PREFIX.encode() + rb"0*(%s)(?:,|\r?$)" % "|".join(map(str, JOINED_XIDS)).encode(),
    re.MULTILINE,
)
# "Nov 20 10:00:01 gpu-node-7 kernel: …" (syslog) or "2026-11-20T10:00:01+0000 gpu-node-7
# kernel: …" (journalctl -o short-iso)
_SYSLOG_HOST = re.compile(rb"(?:\w{3} +\d{1,2} [\d:]{8}|\d{4}-\d\d-\d\dT\S+) (\S+) kernel:")

_Key = tuple[bytes, bytes, bytes | None]
"""What an Xid line says, as written: its PCI address, its Xid and its host."""


@dataclass(frozen=True, slots=True)
class HostXid:
    """The Xid lines of a host log that say the same: the Xid, the GPU and the host."""

    xid: int
    pci_bus_id: int
    pci_dev_id: int | None
    """None when the line gives the bus only."""
    host: str | None
    """The host of the line's syslog prefix; None without one."""
    path: str
    """The log it was read from."""
    line: int
    """The line number of the first of them (from 1; of a log read in part, from where
    reading started)."""
    count: int = 1
    """How many lines say it."""


@dataclass(frozen=True, slots=True)
class HostXids:
    """The Xid lines of the host logs, and what was not searched of them."""

    xids: tuple[HostXid, ...]
    """By log, then by the line of their first."""
    warnings: tuple[str, ...]
    """One line per log searched in part."""

    @property
    def lines(self) -> int:
        """The Xid lines counted."""
        return sum(xid.count for xid in self.xids)


@dataclass(slots=True)
class _Search:
    """What a search of one log found so far."""

    counts: dict[_Key, int] = field(default_factory=dict)
    first: dict[_Key, int] = field(default_factory=dict)
    """Where the first line of each key starts."""
    lines: int = 0
    searched_from: int = 0
    """The searched bytes start here: 0 unless a limit stopped the search."""


def read_host_xids(paths: Sequence[Path]) -> tuple[HostXid, ...]:
    """The Xid lines of `JOINED_XIDS` in the logs at `paths` (see `find_host_xids`).

    Raises:
        UnreadableFile: a log cannot be read.
    """
    return find_host_xids(paths).xids


def find_host_xids(paths: Sequence[Path]) -> HostXids:
    """The Xid lines of `JOINED_XIDS` in the logs at `paths`, and a warning per log that was
    searched in part (cut to its tail, a pipe still written to, or over `XID_LINES`).

    Raises:
        UnreadableFile: a log is missing, cannot be read, or is a pipe no process writes to.
    """
    xids: list[HostXid] = []
    warnings: list[str] = []
    for path in paths:
        tail = read_log_tail(path, XID_TAIL_BYTES, pipe_s=XID_PIPE_S)
        found = _search(tail.data)
        xids.extend(_host_xids(tail.data, found, str(path)))
        warning = _partial(path, tail, len(tail.data) - found.searched_from)
        warnings.extend([warning] if warning else [])
    return HostXids(tuple(xids), tuple(warnings))


def _search(data: bytes) -> _Search:
    found = _Search()
    counts, rfind, host_at = found.counts, data.rfind, _SYSLOG_HOST.match
    end = len(data)
    while end > 0:
        if found.lines >= XID_LINES or len(counts) >= XID_SOURCES:
            found.searched_from = end
            break
        start = data.rfind(b"\n", 0, max(end - _SLICE_BYTES, 0)) + 1  # at a line's start
        here: dict[_Key, int] = {}
        prefixed = data.find(b" kernel:", start, end) >= 0  # else no line names its host
        for match in _XID.finditer(data, start, end):
            at = match.start()
            host = host_at(data, rfind(b"\n", 0, at) + 1, at) if prefixed else None
            key = (match[1], match[2], host[1] if host else None)
            counts[key] = counts.get(key, 0) + 1
            here.setdefault(key, at)
            found.lines += 1
        found.first.update(here)  # slices run backwards: an earlier line replaces a later
        end = start
    return found


def _host_xids(data: bytes, found: _Search, path: str) -> list[HostXid]:
    xids: list[HostXid] = []
    line, counted = 1, 0
    for at, key in sorted((at, key) for key, at in found.first.items()):
        line += data.count(b"\n", counted, at)
        counted = at
        pci = parse_pci(key[0].decode("ascii"))
        if pci is None:
            continue
        host = None if key[2] is None else key[2].decode("utf-8", errors="replace")
        xids.append(HostXid(int(key[1]), pci[0], pci[1], host, path, line, found.counts[key]))
    return xids


def _partial(path: Path, tail: LogTail, searched: int) -> str | None:
    """The warning for a log searched in part; None for one searched whole."""
    why = []
    if tail.still_open:
        why.append(f"still written to after {XID_PIPE_S:g} s, {tail.size_bytes:,} bytes read")
    elif tail.read_from:
        why.append(f"{tail.size_bytes:,} bytes")
    if searched < len(tail.data):
        why.append(f"more than {XID_LINES:,} Xid lines or {XID_SOURCES:,} GPUs and hosts")
    if not why:
        return None
    where = f"its last {searched:,} bytes" if searched < tail.size_bytes else "those"
    return f"--host-log {path}: {'; '.join(why)}: Xid lines counted in {where} only"
