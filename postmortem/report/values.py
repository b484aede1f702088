"""How report data spells the values every section shares: addresses, kernels, exceptions.

Sizes and 3-D coordinates are spelled by `postmortem.spelling`, below the analysis that
spells them too, and re-exported here with the rest."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from postmortem.demangle import brief_name, demangle, heading_name, without_parameters
from postmortem.exceptions import describe_exception
from postmortem.model import Dim3
from postmortem.spelling import dim3_text, size_text

__all__ = [
    "UNKNOWN",
    "UNKNOWN_KERNEL",
    "Json",
    "dim3_text",
    "dim_or_none",
    "exception_json",
    "hex_or_none",
    "hex_text",
    "kernel_json",
    "size_text",
    "utc_text",
    "version_or_none",
]

Json = dict[str, Any]

UNKNOWN = "?"
UNKNOWN_KERNEL = "<unknown kernel>"
"""What a report shows where the dump names no kernel."""
"""How every format shows a fact the dump does not hold."""


def hex_or_none(value: int | None) -> str | None:
    """``0x1f``, or None."""
    return None if value is None else f"0x{value:x}"


def dim_or_none(value: Dim3 | None) -> list[int] | None:
    """A 3-D coordinate as a list, or None."""
    return None if value is None else list(value)


def version_or_none(value: tuple[int, int] | None) -> str | None:
    """A (major, minor) version as ``580.65``, or None."""
    return None if value is None else f"{value[0]}.{value[1]}"


def hex_text(value: int | None, spec: str = "x", prefix: str = "0x") -> str:
    """An address or id for people (``0x1f``; `spec` and `prefix` as the template asks),
    ``?`` when the dump does not hold it."""
    return UNKNOWN if value is None else f"{prefix}{value:{spec}}"


def utc_text(seconds: float) -> str:
    """Unix seconds as ISO 8601 UTC, to the second: ``2026-01-01T00:00:03Z``."""
    moment = datetime.fromtimestamp(seconds, timezone.utc).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def kernel_json(mangled: str | None) -> Json | None:
    """A kernel's mangled, demangled and short (parameters dropped) names, and the bounded
    one headings show (a wrapper kernel's identity kept)."""
    if mangled is None:
        return None
    full = demangle(mangled)
    return {
        "mangled": mangled,
        "demangled": full,
        "short": without_parameters(full),
        "brief": brief_name(full),
        "heading": heading_name(full),
    }


def exception_json(code: int | None) -> Json | None:
    """An exception code with its name."""
    return None if code is None else {"code": code, "name": describe_exception(code)}
