"""PCI addresses of GPUs, as the driver prints them and as a dump records them.

A dump's device row holds a GPU's PCI bus and device numbers; the driver's Xid lines name it
``0000:3b:00`` (domain, bus, device; ``.0`` a function may follow), and other logs ``3b:00``.
`format_pci` writes the one, `parse_pci` reads any of the others back, so that a host log's
GPU and a dump's are compared as numbers.
"""

from __future__ import annotations

__all__ = ["format_pci", "parse_pci"]


def format_pci(bus: int, device: int | None) -> str:
    """The PCI address as the driver's Xid lines print it (domain 0, function 0)."""
    return f"0000:{bus:02x}:{device or 0:02x}.0"


def parse_pci(text: str) -> tuple[int, int] | None:
    """(bus, device) of ``0000:3b:00``, ``0000:3b:00.0`` or ``3b:00``; None when `text` is no
    PCI address."""
    fields = text.split(".")[0].split(":")
    if len(fields) < 2:
        return None
    try:
        return int(fields[-2], 16), int(fields[-1], 16)
    except ValueError:
        return None
