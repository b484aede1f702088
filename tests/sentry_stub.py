"""A stand-in for Sentry's ingestion endpoint on the loopback: it takes the envelopes the real
sentry-sdk sends (``POST /api/<project>/envelope/``) and decodes them.

The envelope format (develop.sentry.dev/sdk/data-model/envelopes/): a JSON header line, then
items, each a JSON header line and a payload of the header's ``length`` bytes (up to the next
newline when it has none), each followed by a newline. The body may be gzip- or
brotli-compressed (``Content-Encoding``).
"""

from __future__ import annotations

import gzip
import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Item:
    headers: dict[str, Any]
    payload: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.payload)


@dataclass
class Envelope:
    path: str
    headers: dict[str, Any]
    items: list[Item]

    def of_type(self, kind: str) -> list[Item]:
        return [item for item in self.items if item.headers.get("type") == kind]


@dataclass
class SentryStub:
    port: int
    envelopes: list[Envelope] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def dsn(self) -> str:
        return f"http://public@127.0.0.1:{self.port}/1"

    def events(self) -> list[tuple[dict[str, Any], list[Item]]]:
        """Each event received, with the attachments of its envelope."""
        with self.lock:
            return [
                (envelope.of_type("event")[0].json, envelope.of_type("attachment"))
                for envelope in self.envelopes
                if envelope.of_type("event")
            ]


def parse_envelope(path: str, body: bytes) -> Envelope:
    head, _, rest = body.partition(b"\n")
    items = []
    while rest.strip():
        line, _, rest = rest.partition(b"\n")
        headers = json.loads(line)
        if "length" in headers:
            payload, rest = rest[: headers["length"]], rest[headers["length"] :]
            rest = rest.removeprefix(b"\n")
        else:
            payload, _, rest = rest.partition(b"\n")
        items.append(Item(headers, payload))
    return Envelope(path, json.loads(head), items)


def _decoded(body: bytes, encoding: str | None) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "br":
        import brotli  # only when the SDK found it installed

        return brotli.decompress(body)
    return body


@contextmanager
def sentry_stub(status: int = 200, delay_s: float = 0.0) -> Iterator[SentryStub]:
    """A stand-in Sentry on 127.0.0.1 that answers every envelope with `status`, after
    `delay_s` seconds."""
    stub = SentryStub(0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            body = _decoded(self.rfile.read(length), self.headers.get("Content-Encoding"))
            with stub.lock:
                stub.envelopes.append(parse_envelope(self.path, body))
            time.sleep(delay_s)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads, server.block_on_close = True, False  # a slow answer holds no one
    stub.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
