"""Render what a command shows, as text, Markdown, HTML or JSON: one `render` for all.

Each kind of output has its view model, built from typed results by its own module:
`analyze`'s report (report/context.py), `info`'s summary (report/info.py), `extract`'s
index of cubins (extract.py) and `scan`'s index (scan/outputs/index.py). `render` lays any
of them out with one jinja environment, but for `info`'s text, laid out in Python
(report/info_text.py) so that the quick look never imports jinja2.

Templates live in the top-level `templates/` directory of a checkout, shipped inside the
wheel as `postmortem/templates/`. They hold layout only. HTML is autoescaped; Markdown
puts every string that comes from a dump inside code spans (`md_code`), so a kernel named
`render<script>` is shown, never interpreted, by an issue tracker, and escapes Markdown's
syntax in the prose that quotes one (`md_text`): no link, image or autolink comes from a
dump. Text shows the control characters, bidirectional controls and line separators of every
value escaped (`escape_controls`): an ESC in a kernel name does not reach the terminal, a
newline in it does not forge a line of the report, U+202E does not reverse it.
"""

from __future__ import annotations

import contextlib
import html
import re
import textwrap
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from postmortem._version import __version__
from postmortem.config import cache_folder
from postmortem.demangle import collapse_templates, demangle, heading_name
from postmortem.report.shortnames import brief_text
from postmortem.report.textsafe import BIDI_AND_SEPARATORS, escape_controls
from postmortem.report.values import UNKNOWN, UNKNOWN_KERNEL, dim3_text, hex_text, size_text

if TYPE_CHECKING:
    import jinja2
    import jinja2.bccache

    from postmortem.analysis.analyze import Analysis

Kind = Literal["analyze", "info", "extract", "scan", "incident", "tracker"]
"""What is rendered: one dump's report, its summary, an extract index, a scan index, the
incident of several dumps, a CI run's tracker comment."""

# Per kind: the template of each format (JSON needs none) and the name the data has in it.
_TEMPLATES: dict[str, dict[str, str]] = {
    "analyze": {"text": "report.txt.j2", "md": "report.md.j2", "html": "report.html.j2"},
    "extract": {"text": "extract.txt.j2"},
    "scan": {"text": "scan.txt.j2", "md": "scan.md.j2", "html": "scan.html.j2"},
    "incident": {"text": "incident.txt.j2", "md": "incident.md.j2", "html": "incident.html.j2"},
    "tracker": {"md": "tracker.md.j2"},
}
_DATA_NAME = {
    "analyze": "report", "extract": "cubins", "scan": "index", "incident": "incident",
    "tracker": "comment",
}  # fmt: skip
# Layouts written in Python rather than as templates, per kind.
_IN_PYTHON: dict[str, tuple[str, ...]] = {"info": ("text",)}


def formats(kind: Kind) -> tuple[str, ...]:
    """The formats `kind` can be rendered in."""
    return (*_TEMPLATES.get(kind, {}), *_IN_PYTHON.get(kind, ()), "json")


FORMATS = formats("analyze")
_ANSI = {"bold": "1", "red": "31", "yellow": "33", "green": "32", "dim": "2"}
# Line endings (CommonMark counts a lone CR too) and other C0 controls: inside a code span or
# a line of prose they could end it and start an HTML block. C1 controls (U+0080-U+009F) and
# DEL: terminal escapes for whoever reads the file with `cat`. The bidirectional controls
# and the line and paragraph separators: they reorder or break what a viewer shows.
_CONTROLS = re.compile(
    r"[\x00-\x1f\x7f-\x9f" + "".join(chr(code) for code in BIDI_AND_SEPARATORS) + "]"
)
# Markdown's syntax in prose, each escaped with a backslash (CommonMark lets any ASCII
# punctuation be): `[` opens every link, image and link definition (`[x](javascript:…)`,
# `![](http://…)`), so `]`, `!`, `(` and `)` need none; a backtick opens a code span; `*`,
# `~` and a run of `_` not inside a word make emphasis or strikethrough; `|` ends a table
# cell; `\` escapes, but only before ASCII punctuation or at the end (elsewhere, as in an
# escaped control `\x1b`, it is a backslash and stays one). The colon of `://` and the dot of
# `www.` would start GitHub's bare autolinks (its e-mail ones no escape stops). At the start
# of a value, `#`, `+`, `-`, `=` and `1.` could open a heading, a list or a rule. `<`, `>`
# and `&` become entities first: no `<http://…>` autolink, no HTML.
_MD_SYNTAX = re.compile(
    r"\\(?=[!-/:-@\[-`{-~]|$)|[`*\[|~]|_+|:(?=//)|(?<=www)\.|^(\s*)(\d+(?=[.)])|[#+=-])",
    re.I,
)


def templates_dir() -> Path:
    """Where the templates are: inside the installed package, else the checkout's top level."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "templates", package.parent / "templates"):
        if (candidate / _TEMPLATES["analyze"]["text"]).is_file():
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
    """Prose for Markdown: HTML metacharacters and Markdown's syntax escaped, so the names in
    a message stay text: never a link, an image, HTML or emphasis."""
    text = _CONTROLS.sub(" ", UNKNOWN if value is None else str(value))
    return _MD_SYNTAX.sub(_md_escaped, html.escape(text, quote=False))


def _md_escaped(found: re.Match[str]) -> str:
    text, start, end = found.string, found.start(), found.end()
    piece = found.group()
    if found.group(2) is not None:  # a block marker at the start: `# `, `- `, `1. `
        marker = found.group(2)
        return found.group(1) + (f"{marker}\\" if marker[0].isdigit() else f"\\{marker}")
    if piece[0] == "_" and text[start - 1 : start].isalnum() and text[end : end + 1].isalnum():
        return piece  # inside a word (`my_kernel`): never emphasis
    return "".join(f"\\{c}" for c in piece)


def md_prose(value: object) -> str:
    """Prose whose backquoted parts are code (a command to run, an assert's condition): each
    `…` becomes a code span, the rest is `md_text`. With an unpaired backquote, each word
    that holds one (SASS's branch target `` `(.L_x_10) ``) is a code span of its own, so no
    backquote is left in the prose; a lone backquote stays text."""
    text = UNKNOWN if value is None else str(value)
    parts = text.split("`")
    if len(parts) % 2:
        return "".join(md_code(part) if n % 2 else md_text(part) for n, part in enumerate(parts))
    words = _WORD_WITH_BACKQUOTE.split(text)
    return "".join(
        md_code(w) if n % 2 and w.strip("`") else md_text(w) for n, w in enumerate(words)
    )


_WORD_WITH_BACKQUOTE = re.compile(r"(\S*`\S*)")


def html_prose(value: object) -> Any:
    """`md_prose` for HTML: each `…` a <code> element, everything escaped."""
    from markupsafe import Markup, escape

    text = UNKNOWN if value is None else str(value)
    parts = text.split("`")
    if len(parts) % 2 == 0:  # as md_prose: each word holding the unpaired backquote is code
        parts = _WORD_WITH_BACKQUOTE.split(text)
        return Markup("").join(
            Markup("<code>%s</code>") % w if n % 2 and w.strip("`") else escape(w)
            for n, w in enumerate(parts)
        )
    return Markup("").join(
        Markup("<code>%s</code>") % part if n % 2 else escape(part) for n, part in enumerate(parts)
    )


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


def _ansi(text: object, name: str) -> _Styled:
    shown = text if isinstance(text, _Styled) else escape_controls(str(text))
    return _Styled(f"\033[{_ANSI[name]}m{shown}\033[0m")


def template_environment(*, text: bool = False) -> jinja2.Environment:
    """A fresh environment over `templates/`: HTML autoescaped, undefined names an error,
    and the Markdown escaping filters; with `text`, the control characters of every
    `{{ … }}` value shown escaped (for the templates that write to a terminal)."""
    import jinja2  # here: `info` renders without it, and its import costs start-up

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        bytecode_cache=_bytecode_cache(),
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
    env.filters["md_prose"] = md_prose
    env.filters["html_prose"] = html_prose
    return env


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    # Per version of postmortem (and of Python, through jinja's own key): templates change.
    import jinja2

    class QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
        """Compiled templates kept between runs (compiling them costs a command ~50 ms); a
        cache that cannot be read or written is a miss, never an error."""

        def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            try:
                super().load_bytecode(bucket)
            except Exception:  # a file another version or a crash left half-written
                bucket.reset()

        def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    folder = cache_folder() / f"templates-{__version__}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return QuietBytecodeCache(str(folder))


def _kernel(mangled: str | None) -> str:
    return demangle(mangled) if mangled else UNKNOWN_KERNEL


@cache
def _environment(text: bool, color: bool) -> jinja2.Environment:
    env = template_environment(text=text)
    env.filters["style"] = _ansi if color else (lambda text, _: text)
    env.filters["dim3"] = lambda d: UNKNOWN if d is None else dim3_text(d)
    env.filters["hex"] = hex_text
    env.filters["size"] = size_text
    env.filters["kernel"] = _kernel
    env.filters["brief"] = lambda name: collapse_templates(str(name))
    env.filters["brief_counts"] = brief_counts
    env.filters["brief_text"] = brief_text
    return env


def brief_counts(names: list[str]) -> list[tuple[str, int]]:
    """The heading form of each name (`heading_name`: templates collapsed, a wrapper kernel's
    identity kept) with how many names share it, in
    first-seen order: a module of 366 Marlin kernels is a few lines, not 100 KB."""
    counts: dict[str, int] = {}
    for name in names:
        short = heading_name(str(name))
        counts[short] = counts.get(short, 0) + 1
    return list(counts.items())


LANES_SHOWN = {"text": 8, "md": 32, "html": 1024}
"""Lane addresses listed per fault site unless `verbose` (a grid-wide fault has thousands)."""
SITES_SHOWN = 16
"""Fault sites (and census rows) shown in full unless `verbose`, the most lanes first; the
rest are counted. A dump can hold thousands (a lane row per exception code, a PC per lane),
and a report goes to a ticket; the JSON keeps every one."""


def report_text(analysis: Analysis, fmt: str, *, color: bool = False, verbose: bool = False) -> str:
    """The report of one analyzed dump in `fmt`: what `analyze` prints, what `capture`
    writes beside a dump, and what a scan writes for each dump."""
    from postmortem.report.context import build_report

    # What a format does not show is not built: only the JSON lists every lane.
    lanes = None if verbose else LANES_SHOWN.get(fmt)
    report = build_report(analysis, lanes=lanes)
    return render("analyze", report, fmt, color=color, verbose=verbose)


def render(kind: Kind, data: Any, fmt: str, *, color: bool = False, verbose: bool = False) -> str:
    """`data`, the view model of `kind`, in `fmt` (one of `formats(kind)`).

    `color` adds ANSI styles to text; `verbose` lists every faulting lane's address of a
    report instead of the first few. A scan index in JSON is JSON lines: the scan, then
    every dump, then every group (with `scan --incident`, the incident after the scan).

    Raises:
        ValueError: `kind` has no `fmt` format.
    """
    if fmt == "json":
        import json

        if kind == "scan":
            incident = [data["incident"]] if data.get("incident") else []
            objects = [data["summary"], *incident, *data["dumps"], *data["groups"]]
            return "".join(json.dumps(o, sort_keys=True) + "\n" for o in objects)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    if fmt not in formats(kind):
        raise ValueError(f"{kind} output has no {fmt} format (it has {', '.join(formats(kind))})")
    if kind == "info":
        from postmortem.report.info_text import render_info_text

        return render_info_text(data)
    text = fmt == "text"
    template = _environment(text, color and text).get_template(_TEMPLATES[kind][fmt])
    lanes_shown = 1 << 31 if verbose else LANES_SHOWN.get(fmt, 0)
    sites_shown = 1 << 31 if verbose else SITES_SHOWN
    shown = template.render(
        {_DATA_NAME[kind]: data, "lanes_shown": lanes_shown, "sites_shown": sites_shown}
    )
    return fold_lines(shown) if text and kind in _FOLDED else shown


TEXT_WIDTH = 200
"""No line of a text report is longer: a terminal shows it whole."""
_FOLD_TO = 160
_FOLDED = frozenset({"analyze", "incident"})
_LABEL = re.compile(r"^(\s*(?:[a-z][a-z ,?-]*:\s+)?)")


def fold_lines(text: str, width: int = TEXT_WIDTH) -> str:
    """Each line longer than `width` folded at spaces to lines of at most `_FOLD_TO`, the
    continuation aligned under the value of a `label:   value` line (else indented further);
    a run with no space (a 5,000-character name has few) is cut."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        head = _LABEL.match(line)
        indent = " " * (len(head.group(1)) if head and head.group(1).strip() else
                        len(line) - len(line.lstrip()) + 4)  # fmt: skip
        out.extend(
            textwrap.wrap(
                line,
                _FOLD_TO,
                subsequent_indent=indent,
                break_on_hyphens=False,
                drop_whitespace=True,
            )  # fmt: skip
            or [line]
        )
    return "\n".join(out)
