"""The driver's Xid lines of host logs (`scan --host-log`), for the fleet's GPUs.

A kernel log (``dmesg``, ``journalctl -k``, a syslog file) holds one ``NVRM: Xid`` line
per event, naming the GPU by its PCI address: ``NVRM: Xid (PCI:0000:3b:00): 79, …``. The
Xids that bear on hardware or code (13 graphics engine exception, 31 MMU fault, 43 a
stopped channel, 79 fallen off the bus) are joined to the GPUs of the fleet's verdict
(`postmortem.scan.fleet.join_xids`) by PCI bus and device, and by host where both the
line (its syslog prefix) and the dump's file name give one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.errors import UnreadableFile
from postmortem.host.driver import parse_driver_log

JOINED_XIDS = (13, 31, 43, 79)
"""The Xids a GPU's verdict is shown with."""

# "Nov 20 10:00:01 gpu-node-7 kernel: …" (syslog) or "2026-11-20T10:00:01+0000 gpu-node-7
# kernel: …" (journalctl -o short-iso)
_SYSLOG_HOST = re.compile(r"^(?:\w{3} +\d{1,2} [\d:]{8}|\d{4}-\d\d-\d\dT\S+) (\S+) kernel:")


@dataclass(frozen=True, slots=True)
class HostXid:
    """One Xid line of a host log."""

    xid: int
    pci_bus_id: int
    pci_dev_id: int | None
    """None when the line gives the bus only."""
    host: str | None
    """The host of the line's syslog prefix; None without one."""
    path: str
    """The log it was read from."""
    line: int
    """Its line number there (from 1)."""


def read_host_xids(paths: Sequence[Path]) -> tuple[HostXid, ...]:
    """The Xid lines of `JOINED_XIDS` in the logs at `paths`, in the order read.

    Raises:
        UnreadableFile: a log cannot be read.
    """
    return tuple(xid for path in paths for xid in _read(path))


def _read(path: Path) -> list[HostXid]:
    found: list[HostXid] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            for number, text in enumerate(log, 1):
                if "NVRM: Xid" in text:
                    found.extend(_xid(text, str(path), number))
    except OSError as error:
        raise UnreadableFile(path, error.strerror or str(error)) from None
    return found


def _xid(text: str, path: str, number: int) -> list[HostXid]:
    parsed = parse_driver_log([text.rstrip("\n")])
    if parsed is None or not parsed.xids or parsed.xids[0].xid not in JOINED_XIDS:
        return []
    event = parsed.xids[0]
    pci = _pci(event.pci)
    if pci is None:
        return []
    host = _SYSLOG_HOST.match(text)
    return [HostXid(event.xid, pci[0], pci[1], host.group(1) if host else None, path, number)]


def _pci(text: str) -> tuple[int, int | None] | None:
    # "0000:3b:00" (domain, bus, device), "0000:3b:00.0", or "3b:00"
    parts = text.split(".")[0].split(":")
    try:
        if len(parts) == 3:
            return int(parts[1], 16), int(parts[2], 16)
        if len(parts) == 2:
            return int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None
    return None
