"""C++ demangling of kernel names, with a clean fallback to the mangled name.

libstdc++'s `__cxa_demangle` (called through ctypes) comes first: it is the demangler of
GNU c++filt and of cuda-gdb, so our names read exactly as the rest of a user's tools print
them. It gives up on deeply nested CUTLASS names (182 of the production-kernel corpus, sm120
GEMMs: its recursion limit, which `c++filt -r` lifts), which LLVM's demangler reads: LLVM 14's
`llvm::itaniumDemangle`, from Debian's libLLVM-14 (the library of `llvm-cxxfilt`), comes
next. Only LLVM 14's library is loaded: LLVM 15 prints `>>` where 14 and libstdc++ print
`> >`, and from LLVM 17 the function takes a `std::string_view`, which ctypes cannot pass.
cpp_demangle is the last resort. An empty template parameter pack leaves a separator in
libstdc++'s output where it is not the last argument (`f<int, , int>`) and in cpp_demangle's
everywhere (`Sm90TreeVisitor<…::Sm90AccFetch, >`); this module drops it, as LLVM does.

On the corpus (fixtures/corpus, tests/unit/test_demangle_corpus.py) our names equal
`llvm-cxxfilt` 14's but for three kinds of name, where we print what cuda-gdb prints:

- a function's address as a template argument: `&ns::f` where LLVM prints `&(ns::f(int))`;
  and where that function's own template parameter is reused later in the name, LLVM 14 reads
  it in the wrong scope (`device_kernel<…relu<float>…>(float::Params)` for `(Gemm<…>::Params)`);
- a lambda: `…::{lambda(int, auto:1 const&)#1}` where LLVM prints `…::'lambda'(int, auto
  const&)`, with the enclosing function's return type before it;
- an expression: `((0)==(0))||(!x)` where LLVM prints `((0) == (0)) || (!(x))`.

The demanglers differ on function-pointer template arguments too: `&(float relu<float>(float))`
in both, `&float relu<float>(float)` from cpp_demangle
(fixtures/transcripts/cuda-gdb/11.8/cutlass_like.twin_r400__info-symbol.txt). libstdc++ is
loaded on the first name and libLLVM on the first name libstdc++ rejects (loading it takes
15 ms), each by its soname: finding a library by search (`ctypes.util.find_library`) runs
ldconfig, which cost every command 15 ms of start-up.

The driver joins some names with `$` (`$_Z17scatter_survivorsPfi$_Z10write_slotPfi`): no
demangler reads that whole, so each part is demangled on its own and the parts are joined
with ` $ ` (`scatter_survivors(float*, int) $ write_slot(float*, int)`).

Every shorter form of a name is made here, so that a heading, a signature and a match of
names never read one name two ways: the name as a backtrace shows it (`without_parameters`),
the short form for headings (`collapse_templates`, template arguments as `<…>`), the bounded
form that keeps a wrapper kernel's identity (`short_name`), the form signatures group by
(`normalize_name`, `<>`) and the function's own name (`base_name`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

_RUNTIMES = ("libstdc++.so.6", "libc++.so.1", "libc++.1.dylib")
"""The C++ runtime libraries that export `__cxa_demangle`, by the name the loader knows."""

_LLVM_LIBRARIES = ("libLLVM-14.so.1", "libLLVM-14.so")
"""LLVM 14's shared library, by the names Debian's libllvm14 gives it."""
_LLVM_DEMANGLE = "_ZN4llvm15itaniumDemangleEPKcPcPmPi"
"""`char *llvm::itaniumDemangle(const char *, char *, size_t *, int *)`: the signature of
`__cxa_demangle`, and the same demangler as `llvm-cxxfilt`'s."""


class _CxaDemangle:
    """A demangler with `abi::__cxa_demangle`'s signature, as a `str -> str` function."""

    def __init__(self, library: Any, symbol: str = "__cxa_demangle") -> None:
        import ctypes

        self._ctypes = ctypes
        self._demangle = getattr(library, symbol)
        self._demangle.restype = ctypes.c_void_p
        self._demangle.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int),
        ]
        self._free = library.free  # found through the library's own dependencies (libc)
        self._free.argtypes = [ctypes.c_void_p]
        self._free.restype = None

    def __call__(self, name: str) -> str:
        status = self._ctypes.c_int(0)
        result = self._demangle(name.encode(), None, None, self._ctypes.byref(status))
        if status.value != 0 or not result:
            raise ValueError(f"__cxa_demangle status {status.value}")
        try:
            return self._ctypes.string_at(result).decode("utf-8", "replace")
        finally:
            self._free(result)


def _cxa_demangle() -> Callable[[str], str] | None:
    for soname in _RUNTIMES:
        found = _load_runtime(soname)
        if found is not None:
            return found
    import ctypes.util

    searched = ctypes.util.find_library("stdc++")  # an unusual install: search, once
    return _load_runtime(searched) if searched else None


def _load_runtime(name: str, symbol: str = "__cxa_demangle") -> _CxaDemangle | None:
    import ctypes

    try:
        return _CxaDemangle(ctypes.CDLL(name), symbol)
    except (OSError, AttributeError):  # not there, or not a C++ runtime
        return None


@lru_cache(maxsize=1)
def _llvm_library() -> _CxaDemangle | None:
    for soname in _LLVM_LIBRARIES:
        found = _load_runtime(soname, _LLVM_DEMANGLE)
        if found is not None and _try(found, "_Z1fv") == "f()":
            return found
    return None


def _llvm_demangle(name: str) -> str:
    # Loaded on the first name libstdc++ rejects: loading libLLVM costs 15 ms.
    library = _llvm_library()
    if library is None:
        raise ValueError("no LLVM 14 library")
    return library(name)


def _cpp_demangle(name: str) -> str:
    from cpp_demangle import demangle as rust_demangle

    return str(rust_demangle(name))


# An empty template parameter pack (`JE`) leaves its separator in libstdc++'s output where
# it is not the last argument (`f<int, , int>`, `f<, int>`), and in cpp_demangle's everywhere
# (`Sm90TreeVisitor<…::Sm90AccFetch, >`); LLVM prints nothing for it (`f<int, int>`).
_EMPTY_PACK = re.compile(r"(?<!operator), (?=[,>])|(?<=<), (?!\s)")


@lru_cache(maxsize=1)
def _demanglers() -> tuple[tuple[str, Callable[[str], str]], ...]:
    found: list[tuple[str, Callable[[str], str]]] = []
    native = _cxa_demangle()
    if native is not None and _try(native, "_Z1fv") == "f()":
        found.append(("libstdc++", native))
    found.append(("llvm 14", _llvm_demangle))
    try:
        import cpp_demangle  # noqa: F401

        found.append(("cpp_demangle", _cpp_demangle))
    except ImportError:
        pass
    return tuple(found)


def demanglers() -> tuple[str, ...]:
    """The demanglers `demangle` tries, in order: ``libstdc++``, ``llvm 14``, ``cpp_demangle``
    (those found on this machine)."""
    found = (label for label, _ in _demanglers())
    return tuple(label for label in found if label != "llvm 14" or _llvm_library() is not None)


JOIN = " $ "
"""How `demangle` joins the parts of a `$`-joined name once each is demangled."""


@lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The demangled C++ name, or `name` itself when it is not mangled or not understood.

    A name the driver joined with `$` is demangled part by part, the parts joined with
    ` $ `: ``$_Z1av$_Z1bv`` → ``a() $ b()``. A `$`-name none of whose parts is mangled
    (``$__internal_1_$__cuda_sm20_rcp_f64``) is left as it is.
    """
    whole = _demangle_one(name)
    if whole is not None or "$" not in name:
        return name if whole is None else whole
    parts = [part for part in name.split("$") if part]
    shown = [_demangle_one(part) for part in parts]
    if all(result is None for result in shown):
        return name
    return JOIN.join(
        part if result is None else result for part, result in zip(parts, shown, strict=True)
    )


def _demangle_one(name: str) -> str | None:
    # A `$` inside one mangled name is part of an identifier (`_Z3a$bv` is `a$b()`).
    if not name.startswith("_Z"):
        return None
    for _label, demangler in _demanglers():
        result = _try(demangler, name)
        if result is not None:
            return _EMPTY_PACK.sub("", result)
    return None


def _try(demangler: Callable[[str], str], name: str) -> str | None:
    try:
        return str(demangler(name))
    except Exception:  # each binding raises its own error types on names it rejects
        return None


# The short forms of a demangled name. One walk over the template argument lists serves
# them all, and it reads an operator's name (`operator<`, `operator->`, `operator()`) and an
# arrow (`decltype(p->x)`) as one piece, so that their brackets open and close nothing.
_OPERATOR = re.compile(
    r"operator(?:\(\)|\[\]|<=>|<<=|>>=|<<|>>|<=|>=|->\*|->|&&|\|\||\+\+|--|[-+*/%^&|~!=<>,]=?)"
)
_QUALIFIERS = (" const", " volatile")
_OPENING = "<([{"
_CLOSING = ">)]}"
ELLIPSIS = "…"
"""What `collapse_templates` shows in place of a template argument list."""


@lru_cache(maxsize=4096)
def without_parameters(demangled: str) -> str:
    """`void ns::k<int>(float*, int)` → `ns::k<int>`: the name as a backtrace shows it.

    A method's qualifiers go with its parameters (``F<int>::operator()(int) const`` →
    ``F<int>::operator()``). Each part of a `$`-joined name loses its own: ``a(int) $ b()``
    → ``a $ b``.
    """
    return JOIN.join(_drop_parameters(part.removeprefix("void ")) for part in demangled.split(JOIN))


@lru_cache(maxsize=4096)
def collapse_templates(name: str) -> str:
    """`name` with each outermost template argument list shown as `<…>`.

    ``void ns::k<ns::T<4>, 8>(ns::T<4>::Params)`` → ``void ns::k<…>(ns::T<…>::Params)``: the
    short form of a long name, for headings and titles. A name whose angle brackets do not
    pair up (an operator's aside) is returned as it is.
    """
    return _collapse(name, ELLIPSIS)


WRAPPERS = (
    "*::device_kernel",
    "cutlass::Kernel",
    "cutlass::Kernel2",
    "flash::enable_sm80_to_sm89",
    "flash::enable_sm90_or_later",
    "flash::enable_sm100_or_later",
)
"""Kernel templates whose identity is their first template argument: every CUTLASS 2.x
(`Kernel`, `Kernel2`) and 3.x (`device_kernel`) GEMM, and FlashAttention-3's architecture
guards, are launched as `wrapper<Operator>`, so that `wrapper<…>` names none of them.
`*::name` is `name` in any namespace: projects vendor CUTLASS's `device_kernel` under their own."""

SHORT_NAME_LIMIT = 120
"""The longest `short_name`, in characters."""


def short_name(name: str, limit: int = SHORT_NAME_LIMIT) -> str:
    """A short form of a kernel's name that still tells kernels apart, at most `limit` long.

    A wrapper kernel of `WRAPPERS` keeps the wrapper and its identity argument, whose own
    template arguments are collapsed; nested wrappers are kept alike:
    ``void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int>, …>
    >(…::Params)`` → ``cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<…> >``.
    Any other name is shortened as `collapse_templates` does, and each part of a `$`-joined
    name on its own. A result still over `limit` keeps its head and tail around a `…` in the
    middle. The same name always gives the same form; a mangled name is demangled first.
    """
    parts = demangle(name).split(JOIN)
    return _bounded(JOIN.join(_short_part(part) for part in parts), limit)


HEADING_FULL_NAME = 100
"""A demangled name up to this long is shown whole in headings: parameters tell overloads
apart, and only production templates run to thousands of characters."""


# The shorter forms are remembered: a report of a CUTLASS or FlashAttention kernel asks for
# them of one 5,000-character name once per fault site and table row (5 ms a time, uncached).
@lru_cache(maxsize=1024)
def heading_name(name: str) -> str:
    """The name headings, tables and one-line summaries show: the demangled name when it is
    short (`HEADING_FULL_NAME`), else `short_name` of it without return type and parameters
    (``cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<…> > >``)."""
    full = demangle(name)
    return full if len(full) <= HEADING_FULL_NAME else short_name(without_parameters(full))


def brief_name(name: str) -> str:
    """The name tables, locations and call stacks show: `heading_name` without the return
    type and parameters (``two_level``, ``calls::write_slot``, a bounded CUTLASS name)."""
    return heading_name(without_parameters(demangle(name)))


def _short_part(text: str) -> str:
    shown = _wrapped(without_parameters(text))
    return collapse_templates(text) if shown is None else shown


def _wrapped(text: str) -> str | None:
    # `wrapper<identity<…>>` when `text` is a whole `wrapper<…>` of WRAPPERS, else None.
    for pattern in WRAPPERS:
        wrapper = _wrapper_at(text, pattern)
        start = len(wrapper) if wrapper else 0
        if not wrapper or _closing(text, start) != len(text) - 1:
            continue
        arguments = _arguments(text[start + 1 : -1])
        identity = arguments[0].strip()
        inner = _wrapped(identity) or _collapse(identity, ELLIPSIS)
        inner += ", …" if len(arguments) > 1 else ""
        return f"{wrapper}<{inner}{' >' if inner.endswith('>') else '>'}"
    return None


def _wrapper_at(text: str, pattern: str) -> str | None:
    # `*::name` matches `name` in any namespace (vendored copies of CUTLASS rename theirs).
    head = text.split("<", 1)[0]
    if not text.startswith(head + "<"):
        return None
    if pattern.startswith("*::"):
        name = pattern[3:]
        return head if head == name or head.endswith("::" + name) else None
    return head if head == pattern else None


def _closing(text: str, start: int) -> int | None:
    # The index of the bracket that closes the one at `start`, or None.
    depth = 0
    index = start
    while index < len(text):
        end = _piece_end(text, index)
        if end is not None:
            index = end
            continue
        if text[index] in _OPENING:
            depth += 1
        elif text[index] in _CLOSING:
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


def _arguments(text: str) -> list[str]:
    # `text` split at its commas outside every bracket.
    parts: list[str] = []
    depth = 0
    start = 0
    index = 0
    while index < len(text):
        end = _piece_end(text, index)
        if end is not None:
            index = end
            continue
        char = text[index]
        if char in _OPENING:
            depth += 1
        elif char in _CLOSING:
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
        index += 1
    parts.append(text[start:])
    return parts


def _bounded(text: str, limit: int) -> str:
    # `text`, or its head and tail around an ellipsis, `limit` characters in all.
    if len(text) <= limit:
        return text
    kept = max(limit - len(ELLIPSIS), 0)
    head = (kept + 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (kept - head) :]


@lru_cache(maxsize=4096)
def normalize_name(name: str) -> str:
    """A C++ name for grouping: demangled, templates collapsed, parameters and return type gone.

    ``void ns::k<float, 4>(float*, int)`` → ``ns::k<>``; ``float relu<float>(float)`` →
    ``relu<>``. A name given mangled is demangled only when it is one mangled name (``_Z…``).
    Of a `$`-joined name only the last part is kept: the parts before it name its scope
    (``stencil_kernel(float const*, float*, int) $ tile`` → ``tile``).
    """
    text = demangle(name) if name.startswith("_Z") else name
    text = _drop_parameters(text.rpartition(JOIN)[2].strip())
    return _after_last(_collapse(text, ""), " ")


# Remembered: a fleet's dumps name the same few kernels, and a CUTLASS name takes a millisecond.
@lru_cache(maxsize=4096)
def normalize_kernel(name: str) -> str:
    """`normalize_name` that keeps a wrapper kernel's identity (`WRAPPERS`), normalized in
    turn: ``cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<>>`` and
    ``cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<>>>`` are
    different kernels, where `normalize_name` gives both ``cutlass::device_kernel<>``."""
    text = demangle(name) if name.startswith("_Z") else name
    text = _after_last(without_parameters(text.rpartition(JOIN)[2].strip()), " ")
    for pattern in WRAPPERS:
        wrapper = _wrapper_at(text, pattern)
        if wrapper and _closing(text, len(wrapper)) == len(text) - 1:
            identity = _arguments(text[len(wrapper) + 1 : -1])[0].strip()
            return f"{wrapper}<{normalize_kernel(identity)}>"
    return normalize_name(text)


def base_name(name: str) -> str:
    """A function's own name, mangled or not: no return type, scope, template arguments or
    parameters (``void at::native::k<4, F>(int, F)`` → ``k``;
    ``ns::F<int>::operator()(int) const`` → ``operator()``)."""
    return _after_last(normalize_name(demangle(name)), "::").removesuffix("<>").rstrip()


# Words a parameter's type may carry that are no part of the type: CUDA's `__grid_constant__`
# (a cubin's own names do not mangle it; a name written out by hand may show it).
_PARAMETER_NOISE = re.compile(r"\s*\b__grid_constant__\b\s*")


@lru_cache(maxsize=1024)
def parameter_types(demangled: str) -> tuple[str, ...] | None:
    """The types of a demangled function's parameters, one per parameter, in order.

    ``void k<int, 2>(float const*, int, ns::P<a, b>)`` → ``("float const*", "int",
    "ns::P<a, b>")``: commas inside template arguments, function pointer types and
    ``(anonymous namespace)`` split nothing; ``()`` and ``(void)`` give ``()``. None when the
    name has no parameter list (a name that was not mangled), is `$`-joined, was cut short
    (`short_name`, `collapse_templates`) or its brackets do not pair up. Never raises.
    """
    if JOIN in demangled or ELLIPSIS in demangled:
        return None
    head = _drop_parameters(demangled)
    if head == demangled:
        return None
    listed = demangled[len(head) :]
    if _closing(listed, 0) is None or not _balanced(listed):
        return None
    inner = listed[1 : _closing(listed, 0)]
    types = [_PARAMETER_NOISE.sub(" ", part).strip() for part in _arguments(inner)]
    if types in ([""], ["void"]):
        return ()
    return None if "" in types else tuple(types)


def _balanced(text: str) -> bool:
    # Whether every bracket of `text` closes in order (an expression's `a>b` does not).
    depth = 0
    index = 0
    while index < len(text):
        end = _piece_end(text, index)
        if end is not None:
            index = end
            continue
        depth += 1 if text[index] in _OPENING else -1 if text[index] in _CLOSING else 0
        if depth < 0:
            return False
        index += 1
    return depth == 0


def _drop_parameters(name: str) -> str:
    # `name` without its parameter list and the qualifiers after it, or as it is when it has
    # none: `(anonymous namespace)` alone, or an `operator()` with nothing after it.
    text = name
    while text.endswith(_QUALIFIERS):
        text = text.rpartition(" ")[0]
    if not text.endswith(")"):
        return name
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[index], 0)
        if depth == 0:
            head = text[:index]
            return head if head.strip() and not head.endswith("operator") else name
    return name


def _collapse(name: str, shown: str) -> str:
    # Each outermost template argument list of `name` replaced by `<shown>`; `name` itself
    # when its angle brackets do not pair up.
    out: list[str] = []
    depth = 0
    index = 0
    while index < len(name):
        end = _piece_end(name, index)
        if end is not None:
            if depth == 0:
                out.append(name[index:end])
            index = end
            continue
        char = name[index]
        if char == "<":
            out.append("<" + shown if depth == 0 else "")
            depth += 1
        elif char == ">":
            depth -= 1
            if depth < 0:
                return name
            out.append(">" if depth == 0 else "")
        elif depth == 0:
            out.append(char)
        index += 1
    return name if depth else "".join(out)


def _after_last(text: str, separator: str) -> str:
    # What follows the last `separator` outside every bracket and before an operator's name
    # (whose own spaces and scopes, `operator new`, `operator ns::T`, separate nothing).
    depth = 0
    start = 0
    index = 0
    while index < len(text):
        if depth == 0 and text.startswith("operator", index) and _starts_word(text, index):
            break
        end = _piece_end(text, index)
        if end is not None:
            index = end
            continue
        if text[index] in _OPENING:
            depth += 1
        elif text[index] in _CLOSING:
            depth = max(depth - 1, 0)
        elif depth == 0 and text.startswith(separator, index):
            start = index + len(separator)
            index = start
            continue
        index += 1
    return text[start:] or text


def _piece_end(name: str, index: int) -> int | None:
    # The end of the operator's name or the arrow that starts at `index`, or None.
    if name.startswith("->", index):
        return index + 2
    if not name.startswith("operator", index) or not _starts_word(name, index):
        return None
    match = _OPERATOR.match(name, index)
    return match.end() if match else None


def _starts_word(name: str, index: int) -> bool:
    return index == 0 or not (name[index - 1].isalnum() or name[index - 1] == "_")
