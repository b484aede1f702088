"""Which SASS opcodes touch memory, and which exceptions only a memory access can raise."""

from __future__ import annotations

# Exceptions a memory access raises: an illegal-address or misaligned error reported at an
# instruction that touches no memory means the PC is imprecise.
MEMORY_EXCEPTIONS = frozenset({1, 5, 6, 7, 10, 11, 14, 15, 16, 17})

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
