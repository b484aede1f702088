"""What a kernel parameter's C++ type, as the demangler prints it, says it holds: a pointer
(and the size of what it points to), an integer, a floating-point number, or an aggregate
passed by value. A mangled name spells typedefs as what they name (`size_t` is `unsigned
long`, `int64_t` is `long`, `half` is `__half`), so these are the names to know.
"""

from __future__ import annotations

import re
from typing import Literal

ArgumentKind = Literal["pointer", "integer", "floating", "aggregate", "unknown"]
"""What an argument's type says it holds. ``aggregate`` is a class, struct, union or enum
passed by value; ``unknown``, that no type is known."""

# The sizes of the types a parameter or a pointee is printed as by the demangler (typedefs
# such as `size_t` and `int64_t` are mangled as what they name: `unsigned long`, `long`).
_INTEGER_BYTES = {
    "bool": 1, "char": 1, "signed char": 1, "unsigned char": 1, "char8_t": 1,
    "short": 2, "unsigned short": 2, "char16_t": 2, "wchar_t": 4, "char32_t": 4,
    "int": 4, "unsigned int": 4, "long": 8, "unsigned long": 8,
    "long long": 8, "unsigned long long": 8, "__int128": 16, "unsigned __int128": 16,
}  # fmt: skip
_FLOATING_BYTES = {
    "float": 4, "double": 8, "__half": 2, "__nv_bfloat16": 2, "c10::Half": 2,
    "c10::BFloat16": 2, "cutlass::half_t": 2, "cutlass::bfloat16_t": 2, "__nv_fp8_e4m3": 1,
    "__nv_fp8_e5m2": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "cutlass::float_e4m3_t": 1, "cutlass::float_e5m2_t": 1,
}  # fmt: skip
# CUDA's vector types: by-value aggregates, but a pointer to one says its element size.
_ELEMENT_BYTES = {
    **_INTEGER_BYTES, **_FLOATING_BYTES, "__half2": 4, "__nv_bfloat162": 4, "char4": 4,
    "uchar4": 4, "short2": 4, "int2": 8, "uint2": 8, "float2": 8, "int4": 16, "uint4": 16,
    "float4": 16, "double2": 16,
}  # fmt: skip
_QUALIFIER_WORDS = re.compile(
    r"\b(?:const|volatile|restrict|__restrict__|__restrict|__grid_constant__)\b"
)


def argument_kind(type_name: str | None) -> ArgumentKind:
    """What a parameter of this type, as the demangler prints it, holds: ``float const*`` and
    ``void (*)(int)`` a pointer, ``unsigned long`` an integer, ``c10::Half`` a floating-point
    number, ``hgemm::GemmProblem`` an aggregate; no type, unknown."""
    if type_name is None:
        return "unknown"
    bare = _bare(type_name)
    if bare.endswith("*") or "*)" in bare:
        return "pointer"
    if bare in _INTEGER_BYTES:
        return "integer"
    if bare in _FLOATING_BYTES:
        return "floating"
    if not bare or bare.endswith("&") or bare.startswith("decltype("):
        return "unknown"
    return "aggregate"


def _bare(type_name: str) -> str:
    # The type without cv, restrict and `__grid_constant__` words: `float const* restrict`
    # → `float*`.
    return " ".join(_QUALIFIER_WORDS.sub(" ", type_name).split()).replace(" *", "*")


def pointee(type_name: str | None) -> tuple[str, int] | None:
    """What a pointer type points to and that type's size in bytes, when it is a known
    element type: ``c10::Half const*`` → ``("c10::Half", 2)``; None for ``void*``, a
    struct or no pointer."""
    bare = _bare(type_name or "")
    size = _ELEMENT_BYTES.get(bare[:-1].strip()) if bare.endswith("*") else None
    return None if size is None else (bare[:-1].strip(), size)
