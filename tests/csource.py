"""What the fixture sources say, read by the tests themselves: which function holds a line.

A small brace-walking reader of C++/CUDA sources, enough for the fixtures under fixtures/cu:
it blanks comments and string literals, then tracks which `{` opened a function body (a
header with a parameter list that is not a control statement, a namespace or a type).
"""

from __future__ import annotations

import re
from pathlib import Path

_CONTROL = {"if", "for", "while", "switch", "do", "else", "catch", "return"}
_SCOPES = re.compile(r"^(?:template\s*<.*>\s*)?(?:namespace|struct|class|union|enum)\b", re.S)
_NAME = re.compile(r"(operator\s*\(\s*\)|operator\s*[^\s(]+|~?[A-Za-z_]\w*)\s*\(")


def _blank(text: str) -> str:
    """The source with comments and string literals blanked, newlines kept."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def enclosing_function(path: Path, line: int) -> str | None:
    """The unqualified name of the function whose body holds `line` of `path`."""
    text = _blank(path.read_text())
    stack: list[str | None] = []
    header_start, current = 0, 1
    for index, char in enumerate(text):
        if char == "\n":
            current += 1
            if current > line:
                break
        elif char == "{":
            stack.append(_function_name(text[header_start:index]))
            header_start = index + 1
        elif char == "}":
            if stack:
                stack.pop()
            header_start = index + 1
        elif char == ";":
            header_start = index + 1
    return next((name for name in reversed(stack) if name), None)


def _function_name(header: str) -> str | None:
    header = re.sub(r"#[^\n]*", " ", header).strip()
    if "(" not in header or _SCOPES.match(header):
        return None
    match = _NAME.search(re.sub(r"^template\s*<[^{]*?>\s*", "", header))
    if match is None or match.group(1) in _CONTROL:
        return None
    return re.sub(r"\s+", "", match.group(1))
