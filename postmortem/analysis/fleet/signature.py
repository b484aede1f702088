"""Crash signatures: one stable key per kind of crash, so that many dumps group by cause.

Signature version 4 (``SIGNATURE_VERSION``) is built from, in this order:

1. the exception, in words (``Warp Illegal Address``); ``no exception`` for a hang dump;
2. the kernel, demangled and normalized: parameters and return type dropped, every template
   argument list collapsed to ``<>``, except the argument that carries a wrapper kernel's
   identity (``cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<…>>`` →
   ``cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<>>``; a FlashAttention-3
   kernel is ``cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<>>>``);
3. the offset of the faulting PC in the kernel's code section (never an absolute address);
   for a PC in a called function (the lane's backtrace rows say so), its offset in that
   function;
4. the function of the innermost in-app frame, normalized like the kernel (``pm::store<>``;
   ``?`` when no source names it), from the cubin's line table;
5. the top inline frames at that PC as ``file:line``, innermost first, after `--map-path` and
   path normalization, skipping frames in library paths (the rules file) up to the first
   in-app frame; ``top_frames`` frames are kept.

A failed device assert whose message, file and line are known keys by the assert instead,
so that one assert groups across the kernels it is inlined into and across builds (other
offsets, other checkout folders), and two asserts of one kernel do not:
``v4|Warp Assert|assert|<file's base name>:<line>|<function>|<message>``.

Version 3 keys were version 4's for every dump but an assert's. Version 1 keys had no (4):
``v1|exception|kernel|+offset|frames``; version 2 collapsed a wrapper kernel's identity
too, so every CUTLASS 3.x kernel keyed as ``cutlass::device_kernel<>``. `read_key` reads
keys of every version, so results written before a change stay readable.

Hosts, processes, GPUs, load addresses and times are never part of it; they are facets of a
group. The coarse key is (1) and (2) only, so near-duplicates (the same kernel faulting at
another line) stay visible side by side. The version is part of every key, so a change of
algorithm never silently merges its groups with older ones.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from postmortem.analysis.analyze import Analysis
from postmortem.analysis.fault.assertion import DeviceAssert
from postmortem.analysis.fault.inline import SOURCE_FILE, FrameName
from postmortem.analysis.fault.source import PathMap
from postmortem.analysis.fleet.library_paths import matches_library
from postmortem.cubin.inspect import clone_parts
from postmortem.cubin.sass import SourceFrame
from postmortem.demangle import normalize_kernel, normalize_name
from postmortem.exceptions import describe_exception
from postmortem.safefile import read_regular

SIGNATURE_VERSION = 4
"""Bumped whenever the algorithm changes what it groups together."""
MAX_RULES_BYTES = 4 << 20
"""The largest rules file read (the packaged one is a few hundred bytes)."""
MAX_LIBRARY_PATHS = 1024
"""The most library paths used (the packaged rules have 16): each is tried on every frame."""
MAX_PATTERN_CHARS = 4096
"""The longest library path pattern (a path is at most 4,096 bytes on Linux)."""

_KEY_PARTS = {
    1: ("exception", "kernel", "offset", "frames"),
    2: ("exception", "kernel", "offset", "function", "frames"),
    3: ("exception", "kernel", "offset", "function", "frames"),
    4: ("exception", "kernel", "offset", "function", "frames"),
}
_ASSERT_PARTS = ("exception", "place", "function", "message")
"""A version 4 assert key: ``v4|exception|assert|place|function|message``."""


@dataclass(frozen=True, slots=True)
class SignatureRules:
    """What the signature skips and keeps, read from a rules file (data, not code)."""

    name: str
    """The rules' name, recorded with every signature."""
    library_paths: tuple[str, ...]
    """fnmatch patterns of library source paths (``cute/arch/*``, ``cuda_fp16.hpp``)."""
    top_frames: int
    """How many frames, from the first in-app one, the short signature keeps."""

    @property
    def digest(self) -> str:
        """A short hash of the rules, so results made with other rules are told apart."""
        text = json.dumps([self.name, self.library_paths, self.top_frames])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_rules(
    path: Path | None = None, warn: Callable[[str], None] | None = None
) -> SignatureRules:
    """The rules in `path`, or the packaged default rules.

    Of more than `MAX_LIBRARY_PATHS` library paths, the first are kept, and `warn` is told
    so in one line.

    Raises:
        UnreadableFile: `path` cannot be read, is not a regular file, or is larger than a
            rules file can be (`MAX_RULES_BYTES`).
        ValueError: the rules are not JSON, or not rules (a pattern longer than
            `MAX_PATTERN_CHARS` among them).
    """
    try:
        if path is None:
            rules = resources.files("postmortem.analysis.fleet").joinpath("signature_rules.json")
            text = rules.read_text()
        else:
            text = read_regular(path, MAX_RULES_BYTES).decode("utf-8")
        data: dict[str, Any] = json.loads(text)
        paths = tuple(str(p) for p in data["library_paths"])
        top = int(data["top_frames"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"signature rules: {error}") from None
    except RecursionError:  # the JSON decoder recurses once per level of nesting
        raise ValueError("signature rules: not JSON: nested too deeply") from None
    if top < 1:
        raise ValueError(f"signature rules: top_frames must be at least 1, not {top}")
    longest = max(paths, key=len, default="")
    if len(longest) > MAX_PATTERN_CHARS:
        raise ValueError(
            f"signature rules: a library path of {len(longest):,} characters "
            f"(the most is {MAX_PATTERN_CHARS:,})"
        )
    if len(paths) > MAX_LIBRARY_PATHS:
        if warn is not None:
            warn(
                f"{path}: {len(paths):,} library_paths; only the first {MAX_LIBRARY_PATHS:,} "
                f"are used, the most read"
            )
        paths = paths[:MAX_LIBRARY_PATHS]
    return SignatureRules(str(data.get("name", "custom")), paths, top)


@dataclass(frozen=True, slots=True)
class Frame:
    """One normalized frame of the inline chain."""

    file: str
    """The source path after `--map-path` and normalization."""
    line: int
    library: bool
    """True when the path matches a library pattern of the rules."""

    @property
    def label(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class Quality:
    """How much a signature can be trusted (ABRT's rating, simplified)."""

    score: int
    """0 to 3: one point each for a resolved function, line info, an in-app frame."""
    function_resolved: bool
    line_info: bool
    """True when the signature has source frames."""
    in_app_frame: bool
    advice: str | None
    """What would make the signature precise, when it is not."""


@dataclass(frozen=True, slots=True)
class SignatureInput:
    """The facts of one dump a signature is made of."""

    exception: int | None
    """The exception code; None for a dump that records none (a hang)."""
    kernel: str | None
    """The mangled name of the function holding the PC; None when unresolved."""
    offset: int | None
    """Offset of the PC in the function's code section."""
    chain: tuple[SourceFrame, ...]
    """The inline chain at the PC, innermost first."""
    has_line_info: bool | None
    """Whether the cubin has `.debug_line` (None: unknown)."""
    functions: tuple[str | None, ...] = ()
    """The mangled function of each frame of `chain`, where a source names it."""
    assertion: tuple[str, str, int, str | None] | None = None
    """A failed device assert's message, file, line and function (None when unknown), when
    the first three are known."""


@dataclass(frozen=True, slots=True)
class Signature:
    """A dump's crash signature, with the components it was made of."""

    version: int
    rules: str
    """The rules' name and digest, e.g. ``default@3f2a…``."""
    id: str
    """A short hash of `key`: the group's name."""
    key: str
    """The full key, readable: version, exception, kernel, offset, frames."""
    coarse_id: str
    coarse_key: str
    """Version, exception and kernel only."""
    exception: str
    kernel: str
    """Normalized kernel name."""
    offset: int | None
    function: str | None
    """The innermost in-app frame's function, normalized; None when no source names it."""
    frames: tuple[str, ...]
    """The frames in the key (``file:line``)."""
    all_frames: tuple[Frame, ...]
    """Every frame of the chain, normalized, innermost first."""
    skipped: int
    """Library frames skipped before the first in-app frame."""
    components: tuple[str, ...]
    """Which parts contributed: exception, kernel, offset, frames."""
    quality: Quality


def normalize_path(file: str, path_maps: Sequence[PathMap] = ()) -> str:
    """A source path for grouping: `--map-path` applied (first match), then normalized."""
    for path_map in path_maps:
        if file.startswith(path_map.old):
            file = path_map.new + file[len(path_map.old) :]
            break
    file = file.replace("\\", "/")
    return posixpath.normpath(file) if file else file


def is_library(file: str, rules: SignatureRules) -> bool:
    """True when `file` (normalized) lies in one of the rules' library paths."""
    return matches_library(file, rules.library_paths)


def normalize_frames(
    chain: Sequence[SourceFrame], rules: SignatureRules, path_maps: Sequence[PathMap] = ()
) -> tuple[Frame, ...]:
    """Every frame of an inline chain, normalized and marked library or in-app."""
    frames = []
    for frame in chain:
        file = normalize_path(frame.file, path_maps)
        frames.append(Frame(file, frame.line, is_library(file, rules)))
    return tuple(frames)


def compute_signature(
    facts: SignatureInput, rules: SignatureRules, path_maps: Sequence[PathMap] = ()
) -> Signature:
    """The signature of one dump's facts under `rules`."""
    if facts.assertion is not None:
        return _assert_signature(facts, facts.assertion, rules)
    exception = "no exception" if facts.exception is None else describe_exception(facts.exception)
    kernel = normalize_kernel(facts.kernel) if facts.kernel else "<unknown kernel>"
    all_frames = normalize_frames(facts.chain, rules, path_maps)
    first_app = next((i for i, f in enumerate(all_frames) if not f.library), None)
    start = first_app if first_app is not None else 0
    frames = tuple(f.label for f in all_frames[start : start + rules.top_frames])
    named = facts.functions[start] if frames and start < len(facts.functions) else None
    function = normalize_name(named) if named else None
    components = ["exception"] + (["kernel"] if facts.kernel else [])
    components += ["offset"] if facts.offset is not None else []
    components += (["function"] if function else []) + (["frames"] if frames else [])
    offset = "?" if facts.offset is None else f"+0x{facts.offset:x}"
    coarse_key = f"v{SIGNATURE_VERSION}|{exception}|{kernel}"
    key = f"{coarse_key}|{offset}|{function or '?'}|{' < '.join(frames)}"
    return Signature(
        version=SIGNATURE_VERSION,
        rules=f"{rules.name}@{rules.digest}",
        id=_short_hash(key),
        key=key,
        coarse_id=_short_hash(coarse_key),
        coarse_key=coarse_key,
        exception=exception,
        kernel=kernel,
        offset=facts.offset,
        function=function,
        frames=frames,
        all_frames=all_frames,
        skipped=start,
        components=tuple(components),
        quality=_quality(facts, bool(frames), first_app is not None),
    )


def _assert_signature(
    facts: SignatureInput, found: tuple[str, str, int, str | None], rules: SignatureRules
) -> Signature:
    # The file's base name: the same source checked out in another folder is the same assert.
    message, file, line, named = found
    exception = describe_exception(facts.exception) if facts.exception is not None else "?"
    base = posixpath.basename(file.replace("\\", "/"))
    place = f"{base}:{line}"
    coarse_key = f"v{SIGNATURE_VERSION}|{exception}|assert|{place}"
    key = f"{coarse_key}|{named or '?'}|{message}"
    frame = Frame(base, line, False)
    return Signature(
        version=SIGNATURE_VERSION, rules=f"{rules.name}@{rules.digest}", id=_short_hash(key),
        key=key, coarse_id=_short_hash(coarse_key), coarse_key=coarse_key, exception=exception,
        kernel=normalize_kernel(facts.kernel) if facts.kernel else "<unknown kernel>",
        offset=facts.offset, function=named, frames=(place,), all_frames=(frame,), skipped=0,
        components=("exception", "assert"), quality=Quality(3, True, True, True, None),
    )  # fmt: skip


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _quality(facts: SignatureInput, line_info: bool, in_app: bool) -> Quality:
    resolved = facts.kernel is not None and facts.offset is not None
    advice = None
    if not resolved:
        advice = "the faulting PC lies in no captured module; the signature is the kernel only"
    elif not line_info and facts.has_line_info is False:
        advice = (
            "rebuild with -lineinfo (NVCC_PREPEND_FLAGS='-lineinfo', CCACHE_DISABLE=1) "
            "for a signature with source lines"
        )
    elif not line_info:
        advice = (
            "no inline chain at this PC (without line info in the cubin, nvdisasm must be "
            "installed: pip install nvidia-cuda-nvdisasm)"
        )
    elif not in_app:
        advice = "every frame is in a library path; the signature may merge distinct callers"
    return Quality(
        int(resolved) + int(line_info) + int(in_app), resolved, line_info, in_app, advice
    )


def signature_input(analysis: Analysis) -> SignatureInput:
    """The facts of an analyzed dump a signature uses: its most populous fault site, or for a
    dump without an exception (a hang) its most populous stuck group."""
    if analysis.sites:
        site = analysis.sites[0]
        kernel = site.function.name if site.function else None
        # A PC in a called function: that function's own offset, and a clone named as
        # its callee, so every kernel calling it at that line keys alike.
        # Frame 0 is the function holding the PC even without backtrace rows (a clone).
        inner = site.calls.frames[0] if site.calls and site.calls.frames else None
        offset = inner.offset if inner and inner.offset is not None else site.offset
        return SignatureInput(
            site.exception, kernel, offset, site.chain, site.has_line_info,
            tuple(_grouped_name(n) for n in site.frame_names), _assert_facts(site.assertion),
        )  # fmt: skip
    if analysis.hang and analysis.hang.groups:
        group = analysis.hang.groups[0]
        names = tuple(_grouped_name(n) for n in group.frame_names)
        inner = group.calls.frames[0] if group.calls and group.calls.frames else None
        offset = inner.offset if inner and inner.offset is not None else group.offset
        build = next((b for b in analysis.builds if group.kernel in b.kernels), None)
        lines = build.has_line_info if build is not None else None
        return SignatureInput(None, group.kernel, offset, group.chain, lines, names)
    return SignatureInput(None, None, None, (), None)


def _assert_facts(found: DeviceAssert | None) -> tuple[str, str, int, str | None] | None:
    if found is None:
        return None
    message, file, line = found.message.value, found.file.value, found.line.value
    if not (isinstance(message, str) and isinstance(file, str) and isinstance(line, int)):
        return None
    function = found.function.value if isinstance(found.function.value, str) else None
    return message, file, line, function


def _grouped_name(name: FrameName | None) -> str | None:
    # A clone keys as its callee; a name read from a source file found on this machine
    # (a Triton helper's `def`) is left out: a signature never depends on what files a
    # machine happens to hold.
    if name is None or name.source == SOURCE_FILE:
        return None
    parts = clone_parts(name.function)
    return parts[1] if parts else name.function


def read_key(key: str) -> dict[str, str]:
    """The parts of a signature key of any version: ``version``, ``exception``, ``kernel``,
    ``offset``, ``frames`` and, from version 2, ``function``.

    Raises:
        ValueError: not a key of a known version.
    """
    head, _, rest = key.partition("|")
    version = int(head[1:]) if head[:1] == "v" and head[1:].isdigit() else None
    names = _KEY_PARTS.get(version or 0)
    if names is None:
        raise ValueError(f"not a signature key of a known version: {key[:40]!r}")
    # Names may hold `|` (`operator|`): the offset (`+0x…` or `?`) is found by its shape,
    # the kernel is what comes before it; in version 2 the frames are the last part.
    parts = rest.split("|")
    if version == 4 and len(parts) >= 5 and parts[1] == "assert":
        # The message is last, and may hold `|` (`a || b`).
        values = [parts[0], parts[2], parts[3], "|".join(parts[4:])]
        found = dict(zip(_ASSERT_PARTS, values, strict=True))
        return {"version": str(version), **found}
    at = next((i for i in range(1, len(parts)) if _OFFSET.fullmatch(parts[i])), None)
    if at is None or len(parts) < len(names):
        raise ValueError(f"not a version {version} signature key: {key[:40]!r}")
    found = {"version": str(version), "exception": parts[0], "kernel": "|".join(parts[1:at])}
    found["offset"] = parts[at]
    tail = parts[at + 1 :]
    if version == 1:
        found["frames"] = "|".join(tail)
    else:
        found["function"], found["frames"] = "|".join(tail[:-1]), tail[-1] if tail else ""
    return found


_OFFSET = re.compile(r"\+0x[0-9a-f]+|\?")
