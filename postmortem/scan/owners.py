"""Who owns a crash: a CODEOWNERS file matched against each group's inline chain.

The file is GitHub's and GitLab's CODEOWNERS syntax: one rule per line, a path pattern
then its owners (``@user``, ``@org/team``, an e-mail); ``#`` starts a comment (``\\#`` is a
literal ``#``); a pattern with no owners takes ownership away. Patterns have gitignore's
semantics: a pattern with a ``/`` before its end is anchored at the root of the sources,
one without matches at any depth; ``*`` and ``?`` stop at ``/``, ``**`` crosses folders; a
pattern that names a folder owns everything under it. The last rule that matches a path
wins.

A group's owners are those of the innermost frame of its chain that a rule matches, frames
of your own code first (library frames, by the signature's rules, only when none of yours
matches). The chain's paths are the signature's, after ``--map-path``: map the build
machine's prefix away so that the paths are relative to the sources' root.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.fleet.signature import Signature
from postmortem.errors import BadOption, UnreadableFile
from postmortem.safefile import read_regular

MAX_OWNERS_BYTES = 4 << 20
"""The largest owners file read (GitHub stops at 3 MB)."""


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


def parse_owners(text: str) -> tuple[OwnerRule, ...]:
    """The rules of an owners file's text, in file order.

    Raises:
        ValueError: a rule gitignore would read but CODEOWNERS does not (``!`` negation).
    """
    rules = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = _fields(raw)
        if not fields:
            continue
        pattern, owners = fields[0], tuple(fields[1:])
        if pattern.startswith("!"):
            raise ValueError(f"line {number}: {pattern}: CODEOWNERS has no negation")
        rules.append(OwnerRule(pattern, owners, number, re.compile(pattern_regex(pattern))))
    return tuple(rules)


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
    """The regular expression of a gitignore pattern, over ``/``-separated relative paths."""
    folder_only = pattern.endswith("/")
    anchored = "/" in pattern.rstrip("/")
    body = pattern.strip("/")
    out = "" if anchored else "(?:.*/)?"
    i = 0
    while i < len(body):
        if body.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif body.startswith("/**", i) and i + 3 == len(body):
            out += "/.*"
            i += 3
        elif body.startswith("**", i):
            out += ".*"
            i += 2
        elif body[i] == "*":
            out += "[^/]*"
            i += 1
        elif body[i] == "?":
            out += "[^/]"
            i += 1
        elif body[i] == "[" and "]" in body[i + 2 :]:
            end = body.index("]", i + 2)
            inner = body[i + 1 : end]
            out += "[" + ("^" + inner[1:] if inner.startswith("!") else inner) + "]"
            i = end + 1
        else:
            out += re.escape(body[i])
            i += 1
    # a folder owns what is under it; a pattern ending in / matches folders only
    return f"^{out}" + ("/.+$" if folder_only else "(?:/.+)?$")


def load_owners(path: Path) -> tuple[OwnerRule, ...]:
    """The rules of the owners file at `path`.

    Raises:
        BadOption: the file cannot be read, or is not CODEOWNERS.
    """
    try:
        text = read_regular(path, MAX_OWNERS_BYTES).decode("utf-8", "replace")
        return parse_owners(text)
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
