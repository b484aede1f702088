"""A dump in an object store, read by ranges through fsspec into a sparse local mirror.

The mirror is an unlinked temporary file as large as the object and mapped like a local
dump, so the reader above it is the same. Nothing is in it until asked for: the reader
says which byte ranges it is about to read (`ensure`, `ensure_ranges`), and the missing
blocks of those ranges are fetched, neighbours merged, several at once. Reading a dump
costs its ELF header, its section header table, its tables and the one image the fault
needs: megabytes, for a dump of any size. A compressed object cannot be read by ranges: it
is streamed once through the same decompressor, with the same budget, as a local one.

Ranged reads of an object replaced between two of them would mix two dumps into one that
never existed: after each read the object's identity (whatever the store gives of ETag,
version, generation, size, modification time, inode) is asked again and must not have moved.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, BinaryIO

from postmortem.coredump.codec import CODEC_MAGIC_BYTES, Codec, sniff_codec
from postmortem.coredump.decompress import decompress_to_file
from postmortem.errors import NotAnElfFile, UnreadableFile

BLOCK_BYTES = 64 << 10
"""What one fetch covers at least: small reads near each other share a request."""
_GAP_BLOCKS = 8
# Missing runs closer than this many blocks are fetched as one range: reading 512 KiB more
# is cheaper than another round trip to the store.
_BATCH = 64  # ranges per cat_ranges call: concurrent in the async stores (s3fs, gcsfs)
_DELETED = "changed while read (deleted from the store): no report of a mix of two dumps"


class RemoteFile:
    """A dump at a URL, mapped from a sparse local mirror filled on demand."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        self.codec: Codec | None = None
        self.bytes_fetched = 0
        """Bytes read from the store so far (the whole object, for a compressed one)."""
        self.requests = 0
        """Ranged requests made so far."""
        self._tempdir: str | None = None
        self._file: BinaryIO | None = None
        try:
            import fsspec  # type: ignore[import-untyped, unused-ignore] # only for a URL

            self._fs, self._key = fsspec.core.url_to_fs(url)
            info = self._fs.info(self._key)
        except ImportError:
            raise UnreadableFile(path, "reading a URL needs fsspec: pip install fsspec") from None
        except Exception as error:  # noqa: BLE001 - every store raises its own errors
            raise UnreadableFile(path, _describe(error)) from None
        if info.get("type") not in (None, "file"):
            raise UnreadableFile(path, f"not a file (a {info.get('type')})")
        self.stored_size = int(info.get("size") or 0)
        """The object's size in the store (compressed, for a compressed dump)."""
        self.version = version_tag(info)
        """The store's version of the object (ETag, generation, mtime), or None."""
        self.mtime = modified_time(info)
        self._identity = object_identity(info)
        if self.stored_size == 0:
            raise NotAnElfFile(path, "the file is empty")
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        self._tempdir = tempfile.mkdtemp(prefix="postmortem-")
        head = self._fetch_range(0, min(self.stored_size, BLOCK_BYTES))
        self.codec = sniff_codec(head[:CODEC_MAGIC_BYTES])
        if self.codec is not None:
            self._file = decompress_to_file(
                self.path, self.codec, self._tempdir, source=lambda: self._stream(head),
                compressed_bytes=self.stored_size,
            )  # fmt: skip
            self.size = os.fstat(self._file.fileno()).st_size
            self._present: bytearray | None = None  # all of it
        else:
            self._file = tempfile.TemporaryFile(dir=self._tempdir)  # noqa: SIM115
            self._file.truncate(self.stored_size)  # a hole, until blocks are fetched
            self.size = self.stored_size
            self._present = bytearray(-(-self.size // BLOCK_BYTES))
            self._store(0, head)
        if self.size == 0:
            raise NotAnElfFile(self.path, "the file is empty")
        self.map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)

    def _stream(self, head: bytes) -> IO[bytes]:
        # The first block was fetched already: the stream goes on from its end.
        rest = self._fs.open(self._key, "rb", block_size=4 << 20)
        rest.seek(len(head))
        self.requests += 1
        return io.BufferedReader(_Counted(head, rest, self), 1 << 20)

    @property
    def compressed(self) -> bool:
        return self.codec is not None

    @property
    def sparse(self) -> bool:
        """True while blocks may still be missing (False once a compressed dump is whole)."""
        return self._present is not None

    def fileno(self) -> int:
        """The descriptor of the local mirror the map is of."""
        assert self._file is not None  # opened in __init__
        return self._file.fileno()

    def ensure(self, offset: int, size: int) -> None:
        """Make bytes `[offset, offset + size)` of the dump present in the map."""
        self.ensure_ranges(((offset, size),))

    def ensure_ranges(self, ranges: Any) -> None:
        """Make every `(offset, size)` range present, fetching the missing blocks in as
        few requests as the gaps between them allow.

        Raises:
            UnreadableFile: The store failed to return them.
        """
        present = self._present
        if present is None:
            return
        wanted: list[tuple[int, int]] = []
        for offset, size in ranges:
            first, end = int(offset), min(int(offset) + int(size), self.size)
            if size <= 0 or first >= end:
                continue
            lo, hi = first // BLOCK_BYTES, -(-end // BLOCK_BYTES)
            if present.find(0, lo, hi) >= 0:
                wanted.append((lo, hi))
        runs = _merge(_missing_runs(present, sorted(wanted)))
        for batch_start in range(0, len(runs), _BATCH):
            batch = runs[batch_start : batch_start + _BATCH]
            starts = [lo * BLOCK_BYTES for lo, _ in batch]
            ends = [min(hi * BLOCK_BYTES, self.size) for _, hi in batch]
            try:
                chunks = self._fs.cat_ranges([self._key] * len(batch), starts, ends)
            except Exception as error:  # noqa: BLE001
                raise self._failed(error) from None
            for start, end, chunk in zip(starts, ends, chunks, strict=True):
                if isinstance(chunk, BaseException):
                    raise self._failed(chunk)
                self.requests += 1
                self.bytes_fetched += len(chunk)
                if len(chunk) != end - start:
                    self._check_identity()  # names the change when the store says one
                    raise UnreadableFile(
                        self.path, f"changed while read (bytes {start:,}-{end:,} came back "
                        f"as {len(chunk):,} bytes): no report of a mix of two dumps",
                    )  # fmt: skip
                self._store(start, chunk)
        if runs:
            self._check_identity()

    def _failed(self, error: BaseException) -> UnreadableFile:
        # The object was there when opened: gone now, it changed while read.
        if isinstance(error, FileNotFoundError):
            return UnreadableFile(self.path, _DELETED)
        return UnreadableFile(self.path, _describe(error))

    def _fetch_range(self, start: int, end: int) -> bytes:
        try:
            data: bytes = self._fs.cat_file(self._key, start=start, end=end)
        except Exception as error:  # noqa: BLE001
            raise UnreadableFile(self.path, _describe(error)) from None
        self.requests += 1
        self.bytes_fetched += len(data)
        return data

    def check_unchanged(self) -> None:
        """Raise unless the object is still the one first seen: ranged reads of an object
        replaced while it was read would mix two dumps into one that never existed.

        Raises:
            UnreadableFile: the store now holds another object, or cannot say.
        """
        self._check_identity()

    def _check_identity(self) -> None:
        try:
            self._fs.invalidate_cache(self._key)
            now = object_identity(self._fs.info(self._key))
        except FileNotFoundError:
            raise UnreadableFile(self.path, _DELETED) from None
        except Exception as error:  # noqa: BLE001 - every store raises its own errors
            raise UnreadableFile(self.path, _describe(error)) from None
        self.requests += 1
        moved = next((k for k, v in self._identity.items() if now.get(k) != v), None)
        if moved is not None:
            raise UnreadableFile(
                self.path,
                f"changed while read ({moved} {self._identity[moved]} when opened, "
                f"{now.get(moved)} now): no report of a mix of two dumps; read it again once "
                "it is written",
            )

    def _store(self, offset: int, data: bytes) -> None:
        assert self._file is not None
        os.pwrite(self._file.fileno(), data, offset)
        if self._present is not None:
            lo, hi = offset // BLOCK_BYTES, -(-(offset + len(data)) // BLOCK_BYTES)
            self._present[lo:hi] = b"\x01" * (hi - lo)

    def close(self) -> None:
        mapping: mmap.mmap | None = getattr(self, "map", None)
        if mapping is not None:
            with contextlib.suppress(BufferError):
                mapping.close()
        if self._file is not None:
            self._file.close()
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None


class _Counted(io.RawIOBase):
    """The bytes of `head`, then those of `rest`, counted into the file's transfer."""

    def __init__(self, head: bytes, rest: IO[bytes], owner: RemoteFile) -> None:
        self._head, self._rest, self._owner = memoryview(head), rest, owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        self._owner.bytes_fetched += len(data)
        return len(data)

    def close(self) -> None:
        self._rest.close()
        super().close()


def _missing_runs(present: bytearray, wanted: list[tuple[int, int]]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for lo, hi in wanted:
        block = present.find(0, lo, hi)
        while block >= 0:
            end = present.find(1, block, hi)
            end = hi if end < 0 else end
            runs.append((block, end))  # overlaps and near neighbours are joined by `_merge`
            block = present.find(0, end, hi)
    return runs


def _merge(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(runs):
        if merged and lo - merged[-1][1] <= _GAP_BLOCKS:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def stored_mtime(url: str) -> float | None:
    """The modification time the store gives the object at `url`; None when it gives none or
    cannot be asked."""
    try:
        import fsspec  # type: ignore[import-untyped, unused-ignore]

        fs, key = fsspec.core.url_to_fs(url)
        return modified_time(fs.info(key))
    except Exception:  # noqa: BLE001 - each store raises its own errors
        return None


def version_tag(info: dict[str, Any]) -> str | None:
    """The store's version of an object from its `info()`: ETag (S3), generation (GCS),
    version id, or its modification time; None when the store gives none."""
    for key in ("ETag", "etag", "generation", "VersionId", "version_id", "md5Hash"):
        value = info.get(key)
        if value:
            return f"{key}:{str(value).strip(chr(34))}"
    modified = modified_time(info)
    return None if modified is None else f"mtime:{modified}"


_IDENTITY = ("ETag", "etag", "generation", "VersionId", "version_id", "md5Hash", "size",
             "LastModified", "mtime", "updated", "last_modified", "modificationTime",
             "created", "ino")  # fmt: skip
"""What an object's `info()` may say that moves when it is replaced (stores give a few)."""


def object_identity(info: dict[str, Any]) -> dict[str, str]:
    """Whatever of `_IDENTITY` the store gives for an object, as text."""
    return {k: str(info[k]).strip('"') for k in _IDENTITY if info.get(k) is not None}


def modified_time(info: dict[str, Any]) -> float | None:
    """The object's modification time (seconds since the epoch) from its `info()`."""
    for key in ("LastModified", "mtime", "updated", "last_modified", "modificationTime"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        if isinstance(value, (int, float)):
            # HDFS gives milliseconds
            return float(value) / (1000.0 if value > 1e11 else 1.0)
        if isinstance(value, str):
            from datetime import datetime

            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


def _describe(error: BaseException) -> str:
    if isinstance(error, FileNotFoundError):
        return "no such object"
    if isinstance(error, PermissionError):
        return "access denied"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
