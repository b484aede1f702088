"""Which compression a dump is in, told by its first bytes.

Apart from `decompress.py` so that opening a plain dump (the common case) imports no
decompressor: gzip, lzma and zstd cost a command's start-up several milliseconds.
"""

from __future__ import annotations

from typing import Literal

Codec = Literal["gzip", "zstd", "xz"]

CODEC_MAGIC_BYTES = 6
"""How many leading bytes `sniff_codec` needs to tell every codec."""

XZ_MAGIC = b"\xfd7zXZ\x00"


def sniff_codec(head: bytes) -> Codec | None:
    """The codec whose magic `head` starts with, or None for a plain file.

    gzip `1f 8b`, zstd `28 b5 2f fd` (or a skippable frame, as pzstd writes first), xz
    `fd 37 7a 58 5a 00`. Pass at least `CODEC_MAGIC_BYTES` bytes.
    """
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd" or (head[1:4] == b"\x2a\x4d\x18" and head[0] >> 4 == 5):
        return "zstd"
    if head[:6] == XZ_MAGIC:
        return "xz"
    return None
