"""One scanned dump: what the scan found in it, or why it could not read it.

Rows travel between processes and into the cache as plain JSON-ready dicts
(`row_to_dict`, `row_from_dict`), so a cache file never holds executable data.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from postmortem.analysis.fleet.signature import Frame, Quality, Signature
from postmortem.model import TextEnum, TimeSource
from postmortem.urls import absolute_path


class RowStatus(TextEnum):
    """How the scan of one dump ended."""

    OK = "ok"
    ERROR = "error"
    """Unreadable, truncated or corrupt."""
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    """Its worker died."""


@dataclass(frozen=True, slots=True)
class Triage:
    """What a crash-triage event of a dump needs beyond its row (`--sentry-dsn`): made by the
    worker that analyzed it, carried to the scan, never cached or written out."""

    verdict: dict[str, Any]
    """The verdict as plain data (`verdict_context`)."""
    markdown: str
    """The dump's report, in Markdown."""


@dataclass(frozen=True, slots=True)
class DumpRow:
    """One dump of a scan."""

    path: str
    """The path as found under the scanned tree."""
    size_bytes: int
    mtime: float
    """The file's modification time, Unix seconds."""
    status: RowStatus
    error: str | None
    """The one-line reason when the status is not "ok"."""
    time: float
    """When the dump was written: metadata timestamp, else the name's %t, else `mtime`."""
    time_source: TimeSource
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
    """True when nvdisasm was missing or failed for it (in a signature scan: timed out or
    was killed working out its instruction): a later scan analyzes it again."""
    fingerprint: str | None = None
    """The content fingerprint of the dump (`postmortem.scan.work.fingerprint`); None when the
    file could not be read."""
    triage: Triage | None = None
    """For a crash-triage event, when one was asked for; never cached."""
    headline: str | None = None
    """The dump's verdict in one line; None for an error row."""
    live_kernels: tuple[str, ...] = ()
    """For a dump without a fault, the kernels (mangled) its live warps are in: what tells a
    collateral dump, waiting in a collective, from a stuck one (`scan --incident`)."""
    no_gpu_state: bool = False
    """An error row of a dump that was read but holds no warp and no exception."""
    instruction: str | None = None
    """The SASS instruction at the faulting PC, as nvdisasm prints it; None when the dump has
    no located fault, nvdisasm gave no listing (`instruction_note`), or none was asked for."""
    instruction_note: str | None = None
    """Why there is no instruction when nvdisasm refused the function or could not run."""
    code_key: str | None = None
    """The faulting function's key in the scan cache's ``code`` table
    (`postmortem.scan.work.instruction.code_key`): its cubin's content and the function."""
    build_key: str | None = None
    """The build of the faulting module (`postmortem.scan.build.build_key`): its cubin's
    content, load addresses aside; None without a located fault or its module's image."""
    pci_bus_id: int | None = None
    """The PCI bus of the GPU that faulted (of a hang dump: of the first device)."""
    pci_dev_id: int | None = None
    """The PCI device number of that GPU on its bus."""
    gpu_name: str | None = None
    """That GPU's name, e.g. "NVIDIA H100 80GB HBM3"."""
    sm: int | None = None
    """The SM of the first fault; None for a dump without a fault."""
    beside: tuple[str, ...] = ()
    """Files in the dump's folder that are not dumps (a crash folder's request pickles,
    py-spy stacks, logs), the first `postmortem.scan.discover.beside.SHOWN` by name."""
    beside_more: int = 0
    """How many more files lie there."""
    engine_trigger: str | None = None
    """``log:line`` of the serving engine's "Triggered CUDA user coredump for PID N" line
    for this dump's process: the engine asked for the dump (a hang it saw)."""

    @property
    def failed(self) -> bool:
        return self.status != RowStatus.OK


def dump_id(row: DumpRow) -> str:
    """A stable id of the dump of `row`: its absolute path and content, hashed. The same file
    with the same bytes has the same id at every scan, however its folder is spelled; a copy
    elsewhere, or new bytes in its place, another."""
    where = os.fsencode(absolute_path(row.path))
    digest = hashlib.sha256(where + b"\0" + (row.fingerprint or "unread").encode())
    return digest.hexdigest()[:32]


def row_to_dict(row: DumpRow) -> dict[str, Any]:
    """A JSON-ready dict of `row`, without its triage facts (which are never cached)."""
    # Neither are the files beside it: they are listed afresh at every scan.
    return asdict(replace(row, triage=None, beside=(), beside_more=0, engine_trigger=None))


def row_from_dict(data: dict[str, Any]) -> DumpRow:
    """The row `row_to_dict` made; raises KeyError, TypeError or ValueError on anything else."""
    fields = dict(data)
    fields["devices"] = tuple(fields["devices"])
    fields["live_kernels"] = tuple(fields["live_kernels"])  # absent: an older row, recomputed
    fields["beside"] = tuple(fields.get("beside", ()))
    if "build_key" not in fields:  # an older row: recomputed
        raise KeyError("build_key")
    fields["triage"] = None  # never cached (`row_to_dict`)
    fields["status"] = RowStatus(fields["status"])  # ValueError on an unknown one
    fields["time_source"] = TimeSource(fields["time_source"])
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
    path: str, size_bytes: int, mtime: float, status: RowStatus, error: str, seconds: float = 0.0
) -> DumpRow:
    """A row for a dump that could not be analyzed."""
    return DumpRow(
        path, size_bytes, mtime, status, error, mtime, TimeSource.MTIME, None, None, None, (),
        None, None, 0, None, None, seconds,
    )  # fmt: skip


def verdict_context(report: dict[str, Any]) -> dict[str, Any]:
    """The verdict of an `analyze` report (`postmortem.report.context.build_report`), with
    where the first fault site is: what a triage system shows beside the event."""
    verdict = report.get("verdict") or {}
    context: dict[str, Any] = {
        "headline": verdict.get("headline"), "kind": verdict.get("kind"),
        "fault_sites": verdict.get("sites"),
    }  # fmt: skip
    sites = report.get("sites") or []
    if sites:
        site = sites[0]
        instruction = site.get("instruction") or {}
        faults = site.get("faults") or []
        context.update(
            location=site.get("location"), error_pc=site.get("error_pc_hex"),
            instruction=instruction.get("text"), first_fault=faults[0] if faults else None,
        )  # fmt: skip
    return {key: value for key, value in context.items() if value is not None}
