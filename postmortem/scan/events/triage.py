"""A dump as a crash-triage system's event: plain data, made from its row and its report.

Sentry groups the events by their `fingerprint`, which is our signature key, so Sentry's
issues are our groups. The tags are the facets to search by (exception, kernel, driver,
GPU, host, quality), the verdict and the signature are contexts, and the Markdown report is
an attachment, cut to stay within Sentry's limits. The dump itself is never sent. The event
id is derived from the dump's content and signature: sent again after a delivery that
failed, the event is the same event.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from postmortem.analysis.fleet.signature import Signature
from postmortem.scan.row import DumpRow, Triage, dump_id

# "Sentry allows at most 20MB for a compressed request, and at most 100MB of uncompressed
# attachments per event" (docs.sentry.io/platforms/python/enriching-events/attachments/).
# Cut at 16 MiB, a Markdown report fits the first even when it does not compress at all,
# with room left for the event.
ATTACHMENT_LIMIT_BYTES = 16 * 1024 * 1024
# Tag values have at most 200 characters and no newline (docs.sentry.io, "Tags").
_TAG_MAX = 200
_CONTROLS = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True, slots=True)
class TriageEvent:
    """One dump's event, ready for a crash-triage system's client."""

    event_id: str
    """32 hex digits, stable for the same dump content and signature."""
    event: dict[str, Any]
    """The event payload (Sentry's event format), JSON types only."""
    attachment: bytes
    """The Markdown report, cut to the limit with a note when larger."""
    attachment_name: str


def triage_event(
    row: DumpRow, triage: Triage, limit_bytes: int = ATTACHMENT_LIMIT_BYTES
) -> TriageEvent:
    """The event of a dump analyzed with its triage facts; `row.signature` must be set."""
    signature = row.signature
    assert signature is not None, "an error row has no event"
    name = Path(row.path).name
    event_id = hashlib.sha256(f"{dump_id(row)}\0{signature.key}".encode()).hexdigest()[:32]
    headline = triage.verdict.get("headline") or signature.exception
    exception: dict[str, Any] = {
        "type": signature.exception, "value": headline,
        "mechanism": {"type": "cuda_coredump", "handled": False},
    }  # fmt: skip
    frames = _frames(signature)
    if frames:
        exception["stacktrace"] = {"frames": frames}
    event: dict[str, Any] = {
        "event_id": event_id, "level": "fatal", "platform": "native", "logger": "postmortem",
        "timestamp": datetime.fromtimestamp(row.time, tz=timezone.utc).isoformat(),
        "fingerprint": [signature.key], "exception": {"values": [exception]},
        "tags": _tags(row, signature),
        "contexts": {
            "verdict": triage.verdict, "signature": _signature_context(signature),
            "dump": _dump_context(row),
        },
    }  # fmt: skip
    if row.host:
        event["server_name"] = row.host
    attachment = cut_report(triage.markdown, limit_bytes)
    return TriageEvent(event_id, event, attachment, f"{name}.md")


def cut_report(
    markdown: str,
    limit_bytes: int,
    limit: str = "Sentry's attachment limit",
    whole: str = "`postmortem analyze DUMP --format md` writes it whole",
) -> bytes:
    """`markdown` as UTF-8, cut (on a character boundary) to `limit_bytes` with a note saying
    so when it is longer: which `limit` it was cut to fit, and how to get it `whole`."""
    data = markdown.encode("utf-8", "surrogateescape")
    if len(data) <= limit_bytes:
        return data
    note = f"\n\n*Cut to fit {limit}: {len(data):,} bytes in all; {whole}.*\n".encode()
    kept = data[: max(limit_bytes - len(note), 0)].decode("utf-8", "ignore").encode()
    return (kept + note)[:limit_bytes]


def _frames(signature: Signature) -> list[dict[str, Any]]:
    # Sentry lists frames outermost first, the crashing one last; ours are innermost first.
    return [
        {"filename": frame.file, "lineno": frame.line, "in_app": not frame.library}
        for frame in reversed(signature.all_frames)
    ]


def _tag(value: object) -> str | None:
    if value is None or value == "":
        return None
    text = _CONTROLS.sub(" ", str(value)).strip()
    return text if len(text) <= _TAG_MAX else text[: _TAG_MAX - 1] + "…"


def _tags(row: DumpRow, signature: Signature) -> dict[str, str]:
    gpus = ", ".join(dict.fromkeys(row.devices))
    tags = {
        "exception": signature.exception, "kernel": signature.kernel,
        "driver": row.driver_version, "gpu": gpus, "host": row.host,
        "quality": f"{signature.quality.score}/3", "signature": signature.id,
        "grouping": f"v{signature.version}",
    }  # fmt: skip
    return {key: text for key, value in tags.items() if (text := _tag(value)) is not None}


def _signature_context(signature: Signature) -> dict[str, Any]:
    quality = signature.quality
    return {
        "id": signature.id, "key": signature.key, "version": signature.version,
        "rules": signature.rules, "components": list(signature.components),
        "frames": list(signature.frames), "function": signature.function,
        "quality": quality.score, "advice": quality.advice,
    }  # fmt: skip


def _dump_context(row: DumpRow) -> dict[str, Any]:
    return {
        "id": dump_id(row), "path": row.path, "size_bytes": row.size_bytes,
        "fingerprint": row.fingerprint, "kernel": row.kernel, "devices": list(row.devices),
        "pid": row.pid, "fault_sites": row.fault_sites, "time_source": row.time_source,
    }  # fmt: skip
