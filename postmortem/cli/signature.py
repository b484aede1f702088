"""`postmortem signature`: each dump's crash signature and what it is made of."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from postmortem.cli.common import debug_option, dump_paths, guarded, storage_option, text_or_json
from postmortem.cli.options import ToolSettings, analyze_options, source_options, tool_options
from postmortem.errors import ExitStatus
from postmortem.report.textsafe import escape_controls

if TYPE_CHECKING:
    from postmortem.analysis.analyze import AnalyzeOptions
    from postmortem.analysis.fault.source import SourcePaths
    from postmortem.analysis.fleet.signature import Signature, SignatureRules


@click.command()
@storage_option
@click.argument("cores", nargs=-1, required=True, metavar="CORE...", callback=dump_paths)
@text_or_json
@source_options(dirs=False)
@click.option(
    "--rules",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Signature rules (JSON); default: the packaged ones.",
)
@tool_options(gdb=False)
@debug_option
def signature(
    cores: tuple[Path, ...],
    fmt: str,
    as_json: bool,
    sources: SourcePaths,
    rules: Path | None,
    tools: ToolSettings,
    debug: bool,
) -> None:
    """Print the crash signature of each CORE and the components it is made of.

    The signature is what `postmortem scan` groups dumps by: exception, normalized kernel,
    offset of the fault in the kernel and the top in-app inline frames; see docs/scan.md.
    Exit status: 0 done, 2 a CORE could not be read (the others are still printed).

    \b
    Examples:
      postmortem signature core.nvcudmp
      postmortem signature dumps/*.nvcudmp --format json
    """
    options = analyze_options(tools, sources)
    request = SignatureRequest(options, rules, as_json or fmt == "json")
    text, errors = guarded(debug, lambda: signature_texts(cores, request))
    click.echo(text, nl=False)
    for error in errors:
        click.echo(error, err=True)
    sys.exit(ExitStatus.BAD_INPUT if errors else ExitStatus.OK)


@dataclass(frozen=True, slots=True)
class SignatureRequest:
    """What `postmortem signature` is asked: how to analyze, by which rules, printed how."""

    analyze: AnalyzeOptions
    rules: Path | None = None
    """Signature rules; None: the packaged ones."""
    as_json: bool = False


def signature_texts(cores: tuple[Path, ...], request: SignatureRequest) -> tuple[str, list[str]]:
    """What `postmortem signature` prints for each dump, and the one-line error of each
    dump that could not be read; in text, control characters are shown escaped."""
    from postmortem.scan.request import rules_option

    texts: list[str] = []
    errors: list[str] = []
    rules = rules_option(request.rules)
    for core in cores:
        text, error = _signature_or_error(core, request, rules)
        texts.append(text)
        errors.extend([error] if error else [])
    return "".join(texts), errors


def _signature_or_error(
    core: Path, request: SignatureRequest, rules: SignatureRules
) -> tuple[str, str | None]:
    from postmortem.errors import PostmortemError

    try:
        return signature_text(core, request, rules), None
    except PostmortemError as error:
        return "", escape_controls(f"error: {error}")
    except Exception as error:  # a bug of ours: the other dumps are still signed
        line = f"internal error: {core}: {type(error).__name__}: {error} (rerun with --debug)"
        return "", escape_controls(line)


def signature_text(core: Path, request: SignatureRequest, rules: SignatureRules) -> str:
    """What `postmortem signature` prints for one dump; raises PostmortemError."""
    import json

    from postmortem.scan.outputs.index import signature_view
    from postmortem.tools import Tool

    signature = sign_dump(core, replace(request.analyze, cuda_gdb=Tool.OFF), rules)
    if request.as_json:
        view = {"path": str(core), **signature_view(signature)}
        return json.dumps(view, sort_keys=True) + "\n"
    return render_signature(Path(escape_controls(str(core))), _escaped(signature))


def sign_dump(path: Path, options: AnalyzeOptions, rules: SignatureRules) -> Signature:
    """The signature of one dump; raises PostmortemError when it cannot be read."""
    from postmortem.analysis.analyze import analyze_dump
    from postmortem.analysis.fleet.signature import compute_signature, signature_input

    analysis = analyze_dump(path, options)
    return compute_signature(signature_input(analysis), rules, options.localize.sources.maps)


def render_signature(path: Path, signature: Signature) -> str:
    """A signature and its components, for a terminal."""
    quality = signature.quality
    used = set(range(signature.skipped, signature.skipped + len(signature.frames)))
    lines = [
        f"{path}: signature {signature.id} (v{signature.version}, rules {signature.rules})",
        f"  key:        {signature.key}",
        f"  coarse:     {signature.coarse_id}  {signature.coarse_key}",
        f"  exception:  {signature.exception}",
        f"  kernel:     {signature.kernel}",
        f"  function:   {signature.function or '?'}",
        "  offset:     " + ("?" if signature.offset is None else f"0x{signature.offset:x}"),
        f"  components: {', '.join(signature.components)}",
        f"  quality:    {quality.score}/3" + (f" ({quality.advice})" if quality.advice else ""),
        "  frames (innermost first; * in the key, L library):",
    ]
    for number, frame in enumerate(signature.all_frames):
        mark = ("*" if number in used else " ") + ("L" if frame.library else " ")
        lines.append(f"    {mark} #{number} {frame.label}")
    if not signature.all_frames:
        lines.append("    (none)")
    return "\n".join(lines) + "\n"


def _escaped(signature: Signature) -> Signature:
    # `render_signature` prints these as they are: names and paths from the dump (and the
    # rules' name) with their control characters escaped; the id stays that of the raw key.
    return replace(
        signature,
        rules=escape_controls(signature.rules),
        key=escape_controls(signature.key),
        coarse_key=escape_controls(signature.coarse_key),
        exception=escape_controls(signature.exception),
        kernel=escape_controls(signature.kernel),
        function=None if signature.function is None else escape_controls(signature.function),
        frames=tuple(escape_controls(frame) for frame in signature.frames),
        all_frames=tuple(replace(f, file=escape_controls(f.file)) for f in signature.all_frames),
    )
