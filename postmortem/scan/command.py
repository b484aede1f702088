"""What `postmortem scan` and `postmortem signature` do, behind their arguments."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fleet.signature import (
    Signature,
    SignatureRules,
    compute_signature,
    signature_input,
)
from postmortem.errors import ExitStatus, ScanOutputError
from postmortem.report.render import render
from postmortem.report.textsafe import escape_controls
from postmortem.scan.incident import incident_view
from postmortem.scan.index import build_index
from postmortem.scan.progress import ProgressBar
from postmortem.scan.run import ScanOptions, ScanResult, run_scan


@dataclass(frozen=True, slots=True)
class ScanOutputs:
    """Where the scan's results go."""

    fmt: str
    """Index format: text, md, html, json (JSON lines)."""
    output: Path | None
    """The index file; None: standard output."""
    jsonl: Path | None
    """JSON lines written besides the index; None: none."""
    progress: bool
    """Draw a progress bar on standard error."""
    incident: bool = False
    """Add the incident block (`--incident`): the dumps taken as those of one job."""


def scan_command(
    roots: Sequence[Path], options: ScanOptions, outputs: ScanOutputs
) -> tuple[ScanResult, str]:
    """Run the scan and write its outputs; returns the result and the index text.

    The index goes to `outputs.output` (and the text is returned empty), or is returned
    for standard output. Partial results of an interrupted scan are written the same way.
    """
    bar = ProgressBar(sys.stderr) if outputs.progress else None
    try:
        result = run_scan(roots, options, bar)
    finally:
        if bar is not None:
            bar.close()
    for line in result.warnings:
        print(escape_controls(f"warning: {line}"), file=sys.stderr)
    base = outputs.output.parent if outputs.output else None
    index = build_index(result, base)
    if outputs.incident:
        index["incident"] = incident_view(result)
    text = render("scan", index, outputs.fmt)
    # surrogateescape: a file name that is not UTF-8 is written back as its own bytes.
    if outputs.jsonl is not None:
        jsonl_index = build_index(result, outputs.jsonl.parent)
        if outputs.incident:
            jsonl_index["incident"] = index["incident"]
        _write(outputs.jsonl, render("scan", jsonl_index, "json"))
    if outputs.output is not None:
        _write(outputs.output, text)
        text = ""
    return result, text


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
    except OSError as error:
        raise ScanOutputError(path, error.strerror or str(error)) from None


def scan_exit_status(result: ScanResult) -> ExitStatus:
    """INTERRUPTED when interrupted, SCAN_ERRORS when a dump is an error row, else OK."""
    if result.interrupted:
        return ExitStatus.INTERRUPTED
    return ExitStatus.SCAN_ERRORS if result.errors else ExitStatus.OK


def sign_dump(path: Path, options: AnalyzeOptions, rules: SignatureRules) -> Signature:
    """The signature of one dump; raises PostmortemError when it cannot be read."""
    analysis = analyze_dump(path, options)
    return compute_signature(signature_input(analysis), rules, options.localize.path_maps)


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
