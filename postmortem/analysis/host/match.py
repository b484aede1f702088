"""How a name or an address the host printed is matched to the dump's, and how closely.

Tools spell one kernel differently: compute-sanitizer writes ``const T *`` where the
demangler writes ``T const*``, a device assert prints the bare function name. Each match
therefore says how it was made, from the strongest to the weakest, so a report can tell an
exact match from a guess. These matches serve every kind of log; SGLang's kernel API names
are matched in `sglang.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from postmortem.analysis.forensics.address import LaneAddress
from postmortem.demangle import base_name, demangle, without_parameters
from postmortem.spelling import dim3_text

PAGE_BYTES = 4096
"""The MMU reports a fault at the page's start: 4 KiB, the small page."""
BIG_PAGE_BYTES = 64 << 10
"""GPU big pages, which some faults report instead."""
EXACT = "exact name"
NO_PARAMETERS = "same name, parameters aside"
BASE_NAME = "same base name (namespaces and template arguments aside)"


def match_kernel(host: str, mangled: str) -> str | None:
    """How the kernel name a tool printed (`host`) names the dump's kernel, or None."""
    host = host.strip()
    demangled = demangle(mangled)
    if not host:
        return None
    if host in (mangled, demangled):
        return EXACT
    if _squeeze(without_parameters(host)) == _squeeze(without_parameters(demangled)):
        return NO_PARAMETERS
    base = base_name(demangled)
    if base and base_name(host) == base:
        return BASE_NAME
    return None


def compare_address(
    address: int, lanes: Iterable[LaneAddress], *, exact_only: bool = False
) -> tuple[bool | None, str, LaneAddress | None]:
    """Whether `address` is one the dump's lanes accessed: (agrees, how, the closest lane).

    An MMU fault names the page (`exact_only` False): the same 4 KiB page agrees, and so
    does the same 64 KiB big page. A tool that names the byte must name one a lane did.
    """
    known = [lane for lane in lanes if lane.address is not None]
    if not known:
        return None, "the dump holds no computed address to compare", None
    nearest = min(known, key=lambda lane: abs((lane.address or 0) - address))
    at = nearest.address or 0
    if at == address:
        return True, "same address", nearest
    if not exact_only and at // PAGE_BYTES == address // PAGE_BYTES:
        return True, "same 4 KiB page", nearest
    if not exact_only and at // BIG_PAGE_BYTES == address // BIG_PAGE_BYTES:
        return True, "same 64 KiB big page", nearest
    distance = address - at
    sign = "-" if distance < 0 else "+"
    return False, f"different: {sign}0x{abs(distance):x} bytes from the nearest lane's", nearest


def lane_words(lane: LaneAddress) -> str:
    """``0x7f3b40543000 (block (5,0,0) thread (67,0,0))``: a lane's address for a report."""
    where = f"block {dim3_text(lane.block_idx)} thread {dim3_text(lane.thread_idx)}"
    return f"0x{lane.address or 0:x} ({where})"


def _squeeze(name: str) -> str:
    return re.sub(r"\s+", "", name)
