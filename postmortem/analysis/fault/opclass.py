"""Which SASS opcodes touch memory (which exceptions only a memory access raises is a column
of `postmortem.exceptions`)."""

from __future__ import annotations

_MEMORY_BASES = frozenset(
    {"LD", "LDG", "LDS", "LDL", "LDC", "ULDC", "LDSM", "LDGSTS", "ST", "STG", "STS", "STL",
     "STSM", "ATOM", "ATOMG", "ATOMS", "RED", "CCTL", "SULD", "SUST", "SUATOM", "SURED",
     "UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UBLKCP", "UBLKRED", "UBLKPF", "TLD", "TEX",
     "LDCU", "REDG", "REDAS",
     "LDTM", "STTM"}
)  # fmt: skip


def is_memory_access(base_opcode: str) -> bool:
    """True for loads, stores, atomics and bulk/TMA copies (`STG`, `LDS`, `UTMALDG`, …)."""
    return base_opcode in _MEMORY_BASES
