"""C++ demangling of kernel names, with a clean fallback to the mangled name."""

from __future__ import annotations

from functools import lru_cache

try:  # cpp-demangle: bindings to the Rust cpp_demangle crate, an abi3 wheel
    from cpp_demangle import demangle as _demangle
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    _demangle = None


@lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The demangled C++ name, or `name` itself when it is not mangled or not understood."""
    if _demangle is None or not name.startswith("_Z"):
        return name
    try:
        return str(_demangle(name))
    except Exception:  # the binding raises ValueError and others on names it rejects
        return name
