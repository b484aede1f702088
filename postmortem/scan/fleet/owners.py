"""Who owns a crash: a CODEOWNERS file matched against each group's inline chain.

The file is GitHub's and GitLab's CODEOWNERS syntax: one rule per line, a path pattern
then its owners (``@user``, ``@org/team``, an e-mail); ``#`` starts a comment (``\\#`` is a
literal ``#``); a pattern with no owners takes ownership away. Patterns have gitignore's
semantics: a pattern with a ``/`` before its end is anchored at the root of the sources,
one without matches at any depth; ``*``, ``?`` and ``[…]`` stop at ``/``, a ``**`` segment
crosses folders (a ``**`` within a segment is a ``*``); a pattern that names a folder owns
everything under it. The last rule that matches a path wins.

The file comes from a repository and the paths from a dump: the file is read within
`MAX_OWNERS_BYTES`, a pattern is at most `MAX_PATTERN_CHARS` long, only the last
`MAX_OWNER_RULES` rules (and `MAX_OWNER_PATTERN_CHARS` of patterns) are used, and a match costs
at most about the path's length times the pattern's (`pattern_regex`).

A group's owners are those of the innermost frame of its chain that a rule matches, frames
of your own code first (library frames, by the signature's rules, only when none of yours
matches). The chain's paths are the signature's, after ``--map-path``: map the build
machine's prefix away so that the paths are relative to the sources' root.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.fleet.signature import Signature
from postmortem.errors import BadOption, UnreadableFile
from postmortem.safefile import read_regular

MAX_OWNERS_BYTES = 4 << 20
"""The largest owners file read (GitHub stops at 3 MB)."""
MAX_OWNER_RULES = 4096
"""The most rules of an owners file used (the last): each is tried on every frame's path."""
MAX_OWNER_PATTERN_CHARS = 128 << 10
"""The most characters of patterns used, all rules together (the last rules')."""
MAX_PATTERN_CHARS = 1024
"""The longest pattern."""


@dataclass(frozen=True, slots=True)
class OwnerRule:
    """One line of an owners file."""

    pattern: str
    owners: tuple[str, ...]
    """Empty: the pattern takes ownership away."""
    line: int
    """Its line number in the file (1-based)."""
    regex: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class Ownership:
    """Who owns a group, and which frame and rule say so."""

    owners: tuple[str, ...]
    path: str
    """The chain's source path the rule matched."""
    pattern: str
    line: int
    """The rule's line in the owners file."""


def parse_owners(text: str, warn: Callable[[str], None] | None = None) -> tuple[OwnerRule, ...]:
    """The rules of an owners file's text, in file order.

    Of more rules than `MAX_OWNER_RULES`, or with more than `MAX_OWNER_PATTERN_CHARS`
    characters of patterns, the last are kept (the last match wins), and `warn` is told so
    in one line.

    Raises:
        ValueError: a rule gitignore would read but CODEOWNERS does not (``!`` negation), or
            a pattern longer than `MAX_PATTERN_CHARS`.
    """
    lines: deque[tuple[int, str, tuple[str, ...]]] = deque(maxlen=MAX_OWNER_RULES)
    count = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = _fields(raw)
        if not fields:
            continue
        pattern = fields[0]
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ValueError(
                f"line {number}: a pattern of {len(pattern):,} characters "
                f"(the most is {MAX_PATTERN_CHARS:,})"
            )
        if pattern.startswith("!"):
            raise ValueError(f"line {number}: {pattern}: CODEOWNERS has no negation")
        lines.append((number, pattern, tuple(fields[1:])))
        count += 1
    kept = list(lines)[-_last_within_chars([pattern for _, pattern, _ in lines]) :]
    if len(kept) < count and warn is not None:
        warn(
            f"the owners file has {count:,} rules; only the last {len(kept):,} (from line "
            f"{kept[0][0]}) are used: at most {MAX_OWNER_RULES:,} rules and "
            f"{MAX_OWNER_PATTERN_CHARS:,} characters of patterns are read"
        )
    return tuple(
        OwnerRule(pattern, owners, number, re.compile(pattern_regex(pattern), re.DOTALL))
        for number, pattern, owners in kept
    )


def _last_within_chars(patterns: list[str]) -> int:
    """How many of the last `patterns` fit in `MAX_OWNER_PATTERN_CHARS` characters (each
    is compiled, and compiling costs per character); at least one."""
    chars = 0
    for kept, pattern in enumerate(reversed(patterns)):
        chars += len(pattern)
        if chars > MAX_OWNER_PATTERN_CHARS:
            return max(kept, 1)
    return len(patterns)


def _fields(line: str) -> list[str]:
    """The whitespace-separated fields of `line` before its comment; ``\\#`` and ``\\ ``
    are a literal ``#`` and space."""
    fields: list[str] = []
    current = ""
    escaped = False
    for char in line:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "#":
            break
        elif char.isspace():
            if current:
                fields.append(current)
            current = ""
        else:
            current += char
    if current:
        fields.append(current)
    return fields


def pattern_regex(pattern: str) -> str:
    """The regular expression of a gitignore pattern, over ``/``-separated relative paths.

    A match costs at most about the path's length times the pattern's, whatever they are
    (both come from elsewhere: the owners file from a repository, the paths from a dump).
    The pattern is cut at its ``/`` into segments: ``**``, or a glob of one path segment.
    Between two ``**``, a run of segments is placed at its leftmost match and never moved
    again (a later run can only gain from an earlier end), as is each part of a segment
    between two ``*``; a ``**`` inside a segment is a ``*``. Compile with DOTALL.
    """
    folder_only = pattern.endswith("/")
    anchored = "/" in pattern.rstrip("/")
    parts = pattern.strip("/").split("/")
    under = len(parts) > 1 and parts[-1] == "**"  # `dir/**`: what is under dir
    runs: list[tuple[bool, list[str]]] = []  # (after a `**`, segment globs)
    free = not anchored  # an unanchored pattern matches at any depth
    for part in parts[:-1] if under else parts:
        if part == "**":
            free = True
        elif free or not runs:
            runs.append((free, [part]))
            free = False
        else:
            runs[-1][1].append(part)
    names = itertools.count()
    out = r"\A" if runs else r"\A.*"  # only `**`: everything
    for index, (free, globs) in enumerate(runs):
        run = "/".join(_segment_regex(g, names) for g in globs) + r"(?=/|\Z)"
        lead = "/" if index else ""
        if not free:
            out += run
        elif index + 1 < len(runs):
            out += lead + _atomic(f"(?:[^/]*/)*?{run}", names)
        else:
            out += f"{lead}(?:[^/]*/)*{run}"
    out += "/.*" if under and runs else ""
    # a folder owns what is under it; a pattern ending in / matches folders only
    return out + ("/.+" if folder_only else "(?:/.+)?") + r"\Z"


def _segment_regex(glob: str, names: Iterator[int]) -> str:
    """The regex of a glob of one path segment: each part between two ``*`` at its leftmost
    match, the last part where the segment ends."""
    parts: list[list[str]] = [[]]
    i = 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            parts.append([])
        elif char == "?":
            parts[-1].append("[^/]")
        elif char == "[" and "]" in glob[i + 2 :]:
            end = glob.index("]", i + 2)
            parts[-1].append(_class_regex(glob[i + 1 : end]))
            i = end
        else:
            parts[-1].append(re.escape(char))
        i += 1
    if len(parts) == 1:
        return "".join(parts[0])
    middle = "".join(_atomic("[^/]*?" + "".join(p), names) for p in parts[1:-1] if p)
    return "".join(parts[0]) + middle + "[^/]*" + "".join(parts[-1])


def _class_regex(inner: str) -> str:
    """The regex of the bracket expression ``[inner]``: ``!`` or ``^`` negates, ``a-z`` is a
    range (one backwards is empty), and it never matches ``/``."""
    negated = inner[:1] in ("!", "^")
    chars = inner[1:] if negated else inner
    members = ""
    i = 0
    while i < len(chars):
        if i + 2 < len(chars) and chars[i + 1] == "-":
            low, high = chars[i], chars[i + 2]
            members += f"{re.escape(low)}-{re.escape(high)}" if low <= high else ""
            i += 3
        else:
            members += re.escape(chars[i])
            i += 1
    if negated:
        return f"[^/{members}]"
    return f"[{members}]" if members else "(?!)"


def _atomic(regex: str, names: Iterator[int]) -> str:
    # What `regex` first matches, never backtracked into. Python 3.10 has no (?>...); there,
    # a lookahead, whose match is final, and a backreference to what it matched.
    if sys.version_info >= (3, 11):
        return f"(?>{regex})"
    name = f"g{next(names)}"  # pragma: no cover - Python 3.10
    return f"(?=(?P<{name}>{regex}))(?P={name})"  # pragma: no cover - Python 3.10


def load_owners(path: Path, warn: Callable[[str], None] | None = None) -> tuple[OwnerRule, ...]:
    """The rules of the owners file at `path`; `warn` is told of rules left out.

    Raises:
        BadOption: the file cannot be read, or is not CODEOWNERS.
    """
    try:
        text = read_regular(path, MAX_OWNERS_BYTES).decode("utf-8", "replace")
        return parse_owners(text, None if warn is None else lambda line: warn(f"{path}: {line}"))
    except UnreadableFile as error:
        raise BadOption("--owners", str(error)) from None
    except ValueError as error:
        raise BadOption("--owners", f"{path}: {error}") from None


def rule_for(path: str, rules: Sequence[OwnerRule]) -> OwnerRule | None:
    """The rule that decides who owns `path`: the last that matches."""
    relative = path.removeprefix("./")
    return next((r for r in reversed(rules) if r.regex.match(relative)), None)


def owners_of(signature: Signature, rules: Sequence[OwnerRule]) -> Ownership | None:
    """Who owns the crash `signature` names: see the module's docstring."""
    frames = [f for f in signature.all_frames if not f.library]
    frames += [f for f in signature.all_frames if f.library]
    for frame in frames:
        rule = rule_for(frame.file, rules)
        if rule is not None:
            return Ownership(rule.owners, frame.file, rule.pattern, rule.line)
    return None
