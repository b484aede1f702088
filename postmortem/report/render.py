"""Render the report data (report/context.py) as text, Markdown, HTML or JSON.

Templates live in the top-level `templates/` directory of a checkout, shipped inside the
wheel as `postmortem/templates/`. They hold layout only. HTML is autoescaped; Markdown
puts every string that comes from a dump inside code spans (`md_code`), so a kernel named
`render<script>` is shown, never interpreted, by an issue tracker. Text shows the control
characters of every value escaped (`escape_controls`): an ESC in a kernel name does not
reach the terminal, a newline in it does not forge a line of the report.
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from postmortem.report.textsafe import escape_controls

FORMATS = ("text", "md", "html", "json")
_TEMPLATES = {"text": "report.txt.j2", "md": "report.md.j2", "html": "report.html.j2"}
_ANSI = {"bold": "1", "red": "31", "yellow": "33", "green": "32", "dim": "2"}
# Line endings (CommonMark counts a lone CR too) and other C0 controls: inside a code span or
# a line of prose they could end it and start an HTML block. C1 controls (U+0080-U+009F) and
# DEL: terminal escapes for whoever reads the file with `cat`.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def templates_dir() -> Path:
    """Where the templates are: inside the installed package, else the checkout's top level."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "templates", package.parent / "templates"):
        if (candidate / _TEMPLATES["text"]).is_file():
            return candidate
    raise FileNotFoundError(f"report templates not found next to {package}")


def md_code(value: object) -> str:
    """`value` as a Markdown code span, safe whatever backticks it holds."""
    text = _CONTROLS.sub(" ", UNKNOWN if value is None else str(value))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_text(value: object) -> str:
    """Prose for Markdown: HTML metacharacters escaped, so names in messages stay text."""
    return html.escape(_CONTROLS.sub(" ", UNKNOWN if value is None else str(value)), quote=False)


def md_cell(value: object) -> str:
    """A code span fit for a Markdown table cell (pipes escaped)."""
    return md_code(value).replace("|", "\\|")


class _Styled(str):
    """A value the `style` filter has escaped and wrapped in ANSI codes: printed as it is."""

    __slots__ = ()


def _shown(value: object) -> object:
    # The text templates' `finalize`: every `{{ … }}` value passes here, so no template
    # can forget to escape one. Only the ANSI codes of `style` are let through. A macro's
    # output passes here again where it is printed: give a text macro no names from a dump.
    if value is None:
        return UNKNOWN
    return value if isinstance(value, _Styled) else escape_controls(str(value))


def _known(value: object) -> object:
    # The other templates' `finalize`: a fact the dump does not hold (a field past the end
    # of a short row) is shown as unknown, never as "None".
    return UNKNOWN if value is None else value


UNKNOWN = "?"
"""How every format shows a fact the dump does not hold."""


def _ansi(text: object, name: str) -> _Styled:
    shown = text if isinstance(text, _Styled) else escape_controls(str(text))
    return _Styled(f"\033[{_ANSI[name]}m{shown}\033[0m")


def template_environment(*, text: bool = False) -> jinja2.Environment:
    """A fresh environment over `templates/`: HTML autoescaped, undefined names an error,
    and the Markdown escaping filters; with `text`, the control characters of every
    `{{ … }}` value shown escaped (for the templates that write to a terminal)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_shown if text else _known,
    )
    env.filters["md_code"] = md_code
    env.filters["md_cell"] = md_cell
    env.filters["md_text"] = md_text
    return env


@cache
def _environment(text: bool, color: bool) -> jinja2.Environment:
    env = template_environment(text=text)
    env.filters["style"] = _ansi if color else (lambda text, _: text)
    env.filters["dim3"] = lambda d: "?" if d is None else "({},{},{})".format(*d)
    return env


LANES_SHOWN = {"text": 8, "md": 32, "html": 1024}
"""Lane addresses listed per fault site unless `verbose` (a grid-wide fault has thousands)."""


def render_report(
    report: dict[str, Any], fmt: str, *, color: bool = False, verbose: bool = False
) -> str:
    """The report in `fmt` ("text", "md", "html" or "json"); `color` adds ANSI to text;
    `verbose` lists every faulting lane's address instead of the first few."""
    if fmt == "json":
        return json.dumps(report, indent=2, sort_keys=True) + "\n"
    text = fmt == "text"
    template = _environment(text, color and text).get_template(_TEMPLATES[fmt])
    lanes_shown = 1 << 31 if verbose else LANES_SHOWN[fmt]
    return template.render(report=report, lanes_shown=lanes_shown)
