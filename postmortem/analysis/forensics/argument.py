"""One kernel argument as read from the grid's parameter memory: where it sits, its value, its
type from the demangled signature, and the faulting address measured from it."""

from __future__ import annotations

from dataclasses import dataclass

from postmortem.analysis.forensics.paramtypes import ArgumentKind
from postmortem.demangle import short_name

# A longer type is shown with its template arguments collapsed: a CUTLASS kernel's
# `GemmUniversal<…>::Params` runs to 2,000 characters.
_LONGEST_TYPE_SHOWN = 80


@dataclass(frozen=True, slots=True)
class KernelArgument:
    """One parameter (from `.nv.info`) or one 8-byte slot of the parameter memory."""

    ordinal: int | None
    """Its position in the kernel's signature; None when the layout is unknown (a slot)."""
    offset: int
    """Byte offset in the parameter memory."""
    size_bytes: int
    value: int
    """Little-endian value of its first 8 bytes (or fewer, for a smaller parameter)."""
    is_pointer_like: bool
    """A pointer the address is measured from: a value in the pointer range, of a pointer type
    when the types are known."""
    distance: int | None
    """Faulting address minus `value`, for a pointer-like argument."""
    type_name: str | None = None
    """Its type in the demangled signature (``float const*``); None when not known."""
    kind: ArgumentKind = "unknown"
    """What `type_name` says it holds (`argument_kind`)."""
    words: tuple[tuple[int, int], ...] = ()
    """For a by-value struct: its 8-byte-aligned words that hold a value in the pointer range,
    as (offset in the struct, value), at most `_MOST_FIELDS`: pointer fields, perhaps."""

    @property
    def name(self) -> str:
        """``arg0`` (its ordinal), or ``slot 3`` when the layout is unknown."""
        return f"arg{self.ordinal}" if self.ordinal is not None else f"slot {self.offset // 8}"

    @property
    def label(self) -> str:
        """The name with the type: ``arg1 (float const*)``, ``arg4 (hgemm::GemmProblem, 24
        bytes by value)``; the name alone when the type is not known."""
        if self.type_name is None:
            return self.name
        shown = self.type_name
        if len(shown) > _LONGEST_TYPE_SHOWN:
            shown = short_name(shown, _LONGEST_TYPE_SHOWN)
        if self.kind == "aggregate":
            return f"{self.name} ({shown}, {self.size_bytes} bytes by value)"
        return f"{self.name} ({shown})"

    @property
    def relation(self) -> str | None:
        """The faulting address in terms of this argument, ``arg0 + 0x543000``; None when
        it is no pointer the address was measured from."""
        if self.distance is None:
            return None
        sign = "-" if self.distance < 0 else "+"
        return f"{self.name} {sign} 0x{abs(self.distance):x}"
