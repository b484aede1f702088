"""C++ demangling of kernel names, with a clean fallback to the mangled name.

libstdc++'s `__cxa_demangle` (through the `cxxfilt` package) comes first: it is the
demangler of GNU c++filt and of cuda-gdb, so our names read exactly as the rest of a
user's tools print them. The two differ on function-pointer template arguments:
`&(float relu<float>(float))` there, `&float relu<float>(float)` from cpp_demangle
(fixtures/transcripts/cuda-gdb/11.8/cutlass_like.twin_r400__info-symbol.txt).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache


def _load() -> tuple[Callable[[str], str], ...]:
    found: list[Callable[[str], str]] = []
    try:
        import cxxfilt

        cxxfilt.demangle("_Z1fv")  # fails here when no C++ runtime library can be loaded
        found.append(cxxfilt.demangle)
    except Exception:  # ImportError, or the runtime library is missing
        pass
    try:
        from cpp_demangle import demangle as rust_demangle

        found.append(rust_demangle)
    except ImportError:
        pass
    return tuple(found)


_DEMANGLERS = _load()


@lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The demangled C++ name, or `name` itself when it is not mangled or not understood."""
    if not name.startswith("_Z"):
        return name
    for demangler in _DEMANGLERS:
        result = _try(demangler, name)
        if result is not None:
            return result
    return name


def _try(demangler: Callable[[str], str], name: str) -> str | None:
    try:
        return str(demangler(name))
    except Exception:  # each binding raises its own error types on names it rejects
        return None


def without_parameters(demangled: str) -> str:
    """`void ns::k<int>(float*, int)` → `ns::k<int>`: the name as a backtrace shows it."""
    name = demangled.removeprefix("void ")
    if not name.endswith(")"):
        return name
    depth = 0
    for index in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[index], 0)
        if depth == 0:
            return name[:index]
    return name
