"""Dumps under an object-store prefix (`s3://bucket/prefix`), found and dated for a scan.

A prefix is listed once (fsspec's `find`, with each object's size, modification time and
version tag); every object's first bytes are read in one batch of ranged requests and it is
a dump when they start like one, plain or compressed, whatever its name. The cache keys an
object by its URL, size and the store's version tag (ETag, generation or mtime): a re-scan
of an unchanged bucket reads nothing but the listing.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from postmortem.coredump.codec import CODEC_MAGIC_BYTES, sniff_codec
from postmortem.coredump.decompress import open_decompressed_stream
from postmortem.coredump.remote import modified_time, version_tag
from postmortem.dumpnames import named_like_a_dump
from postmortem.elf import core_header_problem
from postmortem.urls import DumpUrl

_HEAD_BYTES = 4096  # enough compressed bytes to decompress a dump's first 20
_HEADER_BYTES = 20
_BATCH = 256


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What the store says of one object."""

    size: int
    mtime: float
    """Seconds since the epoch (0.0 when the store gives no time)."""
    version: str | None
    """ETag, generation, version id or mtime; None when the store gives none."""

    def fingerprint(self, url: DumpUrl) -> str:
        """The cache's fingerprint of the object: it changes when the object does."""
        return f"object|{url}|{self.size}|{self.version}"

    def as_stat(self) -> os.stat_result:
        """Its size and time as `os.stat` gives a file's (the other fields 0)."""
        mtime = int(self.mtime)
        return os.stat_result((0, 0, 0, 0, 0, 0, self.size, mtime, mtime, mtime))


def object_info(url: DumpUrl) -> ObjectInfo:
    """The store's facts about the object at `url`.

    Raises:
        OSError: The store cannot be reached, or holds no such object.
    """
    try:
        fs, key = _filesystem(url)
        return _info(fs.info(key))
    except OSError:
        raise
    except Exception as error:  # noqa: BLE001 - each store raises its own errors
        raise OSError(0, f"{type(error).__name__}: {error}", str(url)) from None


def iter_remote_dumps(url: DumpUrl) -> Iterator[tuple[DumpUrl, ObjectInfo | None, str | None]]:
    """Every dump at or under `url`: (its URL, its facts, None), or (url, None, why) when the
    prefix cannot be listed. Objects whose first bytes are not a dump's are passed over."""
    try:
        fs, key = _filesystem(url)
        if fs.isfile(key):
            yield url, _info(fs.info(key)), None
            return
        listing: dict[str, dict[str, Any]] = fs.find(key, detail=True)
    except ImportError:
        yield url, None, "cannot read: a URL needs fsspec: pip install fsspec"
        return
    except Exception as error:  # noqa: BLE001
        yield url, None, f"cannot list: {type(error).__name__}: {error}".rstrip(": ")
        return
    files = sorted(
        (name, details) for name, details in listing.items()
        if details.get("type", "file") == "file"
    )  # fmt: skip
    # An empty object named like a dump is a row (the analysis says it is empty), as an empty
    # file is in a folder; other empty objects are no dumps.
    for name, details in files:
        if int(details.get("size") or 0) == 0 and named_like_a_dump(name.rpartition("/")[2]):
            yield DumpUrl(f"{url.protocol}://{name}"), _info(details), None
    objects = [(n, d) for n, d in files if int(d.get("size") or 0) > 0]
    for start in range(0, len(objects), _BATCH):
        batch = objects[start : start + _BATCH]
        names = [name for name, _ in batch]
        heads = fs.cat_ranges(
            names, [0] * len(names), [_HEAD_BYTES] * len(names), on_error="return"
        )
        for (name, details), head in zip(batch, heads, strict=True):
            found = DumpUrl(f"{url.protocol}://{name}")
            if isinstance(head, bytes) and _is_dump(head):
                yield found, _info(details), None
            elif not isinstance(head, bytes) and named_like_a_dump(name.rpartition("/")[2]):
                yield found, _info(details), f"cannot read: {type(head).__name__}: {head}"


def _is_dump(head: bytes) -> bool:
    codec = sniff_codec(head[:CODEC_MAGIC_BYTES])
    if codec is None:
        return core_header_problem(head) is None
    try:
        with open_decompressed_stream(DumpUrl("memory://head"), codec, io.BytesIO(head)) as stream:
            return core_header_problem(stream.read(_HEADER_BYTES)) is None
    except Exception:  # noqa: BLE001 - a prefix that does not decompress is no dump of ours
        return False


def _filesystem(url: DumpUrl) -> tuple[Any, str]:
    import fsspec  # type: ignore[import-untyped, unused-ignore]

    fs, key = fsspec.core.url_to_fs(str(url))
    return fs, str(key)


def _info(details: dict[str, Any]) -> ObjectInfo:
    return ObjectInfo(
        int(details.get("size") or 0), modified_time(details) or 0.0, version_tag(details)
    )
