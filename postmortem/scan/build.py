"""Which build of the code crashed: a key of the faulting module's content.

A group of dumps that spans several builds crashed in each of them; the build that crashed
first is that of the group's earliest dump. A fix can be checked by watching a group stop
at a new build. The key is the content of the module's cubin with its load addresses set to
zero (`postmortem.cubin.normalize.rebase_to_zero`): the same cubin loaded at other addresses,
by another process or on another GPU, is the same build.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from postmortem.codemap import CodeMap
from postmortem.cubin.normalize import rebase_to_zero
from postmortem.errors import MalformedElf
from postmortem.model import Module
from postmortem.scan.row import DumpRow


def build_key(code_map: CodeMap, module: Module | None) -> str | None:
    """The key of `module`'s build (16 hex digits); None without a module or its image."""
    if module is None:
        return None
    image = code_map.image_bytes(module)
    if not image:
        return None
    try:
        content = rebase_to_zero(image) or image
    except MalformedElf:
        content = image
    return hashlib.blake2b(content, digest_size=8).hexdigest()


def builds_of(rows: Sequence[DumpRow]) -> tuple[int, str | None]:
    """How many distinct builds `rows` (earliest first) crashed in, and the first of them."""
    keys = [row.build_key for row in rows if row.build_key]
    return len(set(keys)), keys[0] if keys else None
