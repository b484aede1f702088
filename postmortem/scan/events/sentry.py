"""One Sentry event per dump, through the official SDK (the `sentry` extra).

The events go through a `sentry_sdk.Client` of our own, never `sentry_sdk.init`: the
process' own Sentry (a program that uses postmortem as a library may have one) keeps its
DSN, scopes and integrations, and ours has none of them (no integration is installed, no
scope applied, no release guessed from git). The SDK sends in a background thread; the
events are drained in batches, and at the end with a time limit. An event counts as
delivered when its batch drained with no loss reported for it; a Sentry that cannot be
reached is a warning, never a failed command, and what it did not get is sent again next
time (with the same event id, see `postmortem.scan.events.triage`).

An event leaves the machine for a shared project, so every string it carries, the report
attached included, has its secrets and home folders hidden (`postmortem.host.redact`),
whatever `--no-redact` asked of the report: the dump's path is ``~/…``, not the user's home.
"""

from __future__ import annotations

import hashlib
import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from postmortem.errors import BadOption, MissingExtra
from postmortem.host.redact import redact_strings
from postmortem.scan.events.triage import ATTACHMENT_LIMIT_BYTES, TriageEvent, triage_event
from postmortem.scan.row import DumpRow, Triage

if TYPE_CHECKING:
    import sentry_sdk

    from postmortem.analysis.analyze import Analysis, AnalyzeOptions

FLUSH_TIMEOUT_S = 30.0
"""How long the end of a command waits for Sentry to take the events still queued."""
_BATCH = 256
# The SDK's queue holds this many envelopes; a fuller queue drops them. Batches are drained
# long before it fills.
_QUEUE = 4 * _BATCH
_PROBE_S = 0.1


@dataclass(frozen=True, slots=True)
class SentryTarget:
    """Where the events go, as far as it may be shown and recorded (never the key)."""

    dsn: str
    where: str
    """Host and project, for messages: ``sentry.example.com project 42``."""
    id: str
    """A digest of the scheme, host, port, path and project: what the scan cache records an
    event as sent to."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What became of the events of one command."""

    sent: tuple[str, ...]
    """The ids of the events Sentry took."""
    failed: int
    """Events not delivered (lost, refused, or still queued when the time was up)."""
    reasons: tuple[str, ...]
    """Why, as the SDK says it (``network``, ``status_500``, ``flush timed out``)."""

    def warning(self, target: SentryTarget, next_time: str) -> str | None:
        """One line for standard error when some events were not delivered, else None."""
        if not self.failed:
            return None
        total = self.failed + len(self.sent)
        why = ", ".join(self.reasons) or "unknown"
        return (
            f"Sentry ({target.where}): {self.failed} of {total} event"
            f"{'' if total == 1 else 's'} not delivered ({why}); {next_time}"
        )


def sentry_target(dsn: str) -> SentryTarget:
    """The target of `dsn`.

    Raises:
        MissingExtra: sentry-sdk is not installed.
        BadOption: `dsn` is not a Sentry DSN.
    """
    utils = _sdk("sentry_sdk.utils")
    try:
        parsed = utils.Dsn(dsn)
    except Exception as error:  # BadDsn, or what urlsplit raises
        raise BadOption("--sentry-dsn", f"not a Sentry DSN: {error}") from None
    where = f"{parsed.host}:{parsed.port}{parsed.path}{parsed.project_id}"
    digest = hashlib.sha256(f"{parsed.scheme}://{where}".encode()).hexdigest()[:16]
    return SentryTarget(dsn, f"{parsed.host} project {parsed.project_id}", digest)


def redacted_event(
    row: DumpRow, triage: Triage, limit_bytes: int = ATTACHMENT_LIMIT_BYTES
) -> TriageEvent:
    """The event of `row` (`postmortem.scan.events.triage.triage_event`) with every string it
    carries redacted: the report before it is cut to `limit_bytes`, the dump's path, tags and
    contexts. The event id, a digest of the dump's own path and content, is kept."""
    made = triage_event(row, redact_strings(triage), limit_bytes)
    event = {**redact_strings(made.event), "event_id": made.event_id}
    return TriageEvent(made.event_id, event, made.attachment, redact_strings(made.attachment_name))


def _sdk(module: str) -> Any:
    if importlib.util.find_spec("sentry_sdk") is None:
        raise MissingExtra("--sentry-dsn", "sentry", "sentry-sdk")
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtra("--sentry-dsn", "sentry", f"sentry-sdk ({error})") from None


class SentrySink:
    """Sends the events of dumps to one Sentry project, and says which it took."""

    def __init__(
        self,
        target: SentryTarget,
        *,
        flush_timeout_s: float = FLUSH_TIMEOUT_S,
        attachment_limit_bytes: int = ATTACHMENT_LIMIT_BYTES,
    ) -> None:
        self.target = target
        self._flush_timeout_s = flush_timeout_s
        self._limit = attachment_limit_bytes
        self._attachment = _sdk("sentry_sdk.attachments").Attachment
        self._lost: set[str] = set()
        self._reasons: dict[str, None] = {}
        self._unsure = False
        self._batch: list[str] = []
        self._sent: list[str] = []
        self._failed = 0
        self._given_up = False
        self._client = _client(target.dsn, self._on_lost, self._on_dropped)

    def send(self, row: DumpRow) -> str | None:
        """Queue the event of `row`; returns its id, or None when it has none to send (an
        error row, a row made without triage facts) or Sentry was given up on."""
        if row.signature is None or row.triage is None:
            return None
        if self._given_up:
            self._failed += 1
            return None
        made = redacted_event(row, row.triage, self._limit)
        attachment = self._attachment(
            bytes=made.attachment, filename=made.attachment_name, content_type="text/markdown"
        )
        # The event is built as plain data; its shape is the SDK's `Event`.
        event: Any = made.event
        if self._client.capture_event(event, hint={"attachments": [attachment]}) is None:
            self._failed += 1  # the SDK dropped it before queueing it
            self._reasons["dropped by sentry-sdk"] = None
            return None
        self._batch.append(made.event_id)
        if len(self._batch) >= _BATCH:
            self._drain(self._flush_timeout_s)
        return made.event_id

    def close(self) -> Delivery:
        """Wait for the queued events (`flush_timeout_s` at most) and say what became of
        them all."""
        if self._batch and not self._given_up:
            self._drain(self._flush_timeout_s)
        self._client.close(timeout=0.0)
        return Delivery(tuple(self._sent), self._failed, tuple(self._reasons))

    def _drain(self, seconds: float) -> None:
        """Wait until the SDK's queue is empty; then the batch's events not reported lost
        are delivered. Past `seconds`, the batch counts as not delivered and the rest of
        the events are not sent."""
        deadline = time.monotonic() + seconds
        waiting: list[int] = []
        while True:
            waiting.clear()
            # The callback is called only when the queue did not empty within the probe.
            self._client.flush(timeout=_PROBE_S, callback=lambda n, _s: waiting.append(n))
            if not waiting:
                break
            if time.monotonic() >= deadline:
                self._reasons[f"no answer within {seconds:g} s"] = None
                self._failed += len(self._batch)
                self._batch.clear()
                self._given_up = True
                return
        for event_id in self._batch:
            if event_id in self._lost or self._unsure:
                self._failed += 1
            else:
                self._sent.append(event_id)
        self._batch.clear()
        self._unsure = False

    def _on_lost(self, _reason: str, event_id: str | None) -> None:
        # The reason is told to `_on_dropped` too, in words of its own ("network").
        if event_id is not None:
            self._lost.add(event_id)

    def _on_dropped(self, reason: str) -> None:
        self._reasons[reason] = None
        if reason == "status_429":  # rate limited: Sentry names no event, so none is sure
            self._unsure = True


def _client(
    dsn: str,
    on_lost: Callable[[str, str | None], None],
    on_dropped: Callable[[str], None],
) -> sentry_sdk.Client:
    sdk = _sdk("sentry_sdk")
    transport = _sdk("sentry_sdk.transport")

    class _Transport(transport.HttpTransport):  # type: ignore[misc, name-defined]
        """The SDK's HTTP transport, telling which events it could not deliver."""

        def record_lost_event(
            self, reason: str, data_category: Any = None, item: Any = None, *, quantity: int = 1
        ) -> None:
            event = item.get_event() if item is not None and item.type == "event" else None
            on_lost(reason, event.get("event_id") if isinstance(event, dict) else None)
            super().record_lost_event(reason, data_category, item, quantity=quantity)

        def on_dropped_event(self, reason: str) -> None:
            on_dropped(reason)
            super().on_dropped_event(reason)

    client: sentry_sdk.Client = sdk.Client(
        dsn=dsn, transport=_Transport, default_integrations=False,
        auto_enabling_integrations=False, integrations=[], send_client_reports=False,
        enable_backpressure_handling=False, max_breadcrumbs=0,
        transport_queue_size=_QUEUE, max_value_length=1_000_000, release="", server_name="",
        before_send=_without_empty_names,
    )  # fmt: skip
    return client


def _without_empty_names(event: Any, _hint: Any) -> Any:
    # release and server_name are "" in the client's options so that the SDK guesses neither
    # (from git, from this machine's name); an event states its own host, or none.
    for key in ("release", "server_name"):
        if not event.get(key):
            event.pop(key, None)
    return event


def send_analysis(
    path: Path, analysis: Analysis, options: AnalyzeOptions, target: SentryTarget
) -> str | None:
    """Send the event of one dump analyzed with `options` (`postmortem analyze
    --sentry-dsn`), signed by the packaged rules; the warning, when Sentry did not take it."""
    from postmortem.analysis.fleet.signature import load_rules
    from postmortem.scan.work.worker import analysis_row

    sink = SentrySink(target)
    sink.send(analysis_row(path, analysis, load_rules(), options.localize.sources.maps))
    return sink.close().warning(target, "run the command again to send it")
