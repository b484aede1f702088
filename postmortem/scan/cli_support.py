"""From the command line's values to a scan request, and from a scan to an exit status.

`postmortem.cli` stays free of logic: it hands the option values here as they come.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fault import LocalizeOptions
from postmortem.analysis.signature import Signature, SignatureRules, load_rules
from postmortem.errors import BadOption, ExitStatus, PostmortemError
from postmortem.report.render import formats
from postmortem.report.textsafe import escape_controls
from postmortem.scan.cache import default_cache_path
from postmortem.scan.command import (
    ScanOutputs,
    render_signature,
    scan_command,
    scan_exit_status,
    sign_dump,
)
from postmortem.scan.index import signature_view
from postmortem.scan.names import DEFAULT_PATTERNS, compile_pattern
from postmortem.scan.run import ScanOptions, ScanResult
from postmortem.scan.since import parse_since
from postmortem.scan.worker import WorkOptions

INDEX_FORMATS = formats("scan")

__all__ = ["INDEX_FORMATS", "ScanRequest", "exit_status", "run", "scan_request"]

_TOOL_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class ScanRequest:
    """A scan, ready to run: where, how, and where the results go."""

    roots: tuple[Path, ...]
    options: ScanOptions
    outputs: ScanOutputs


def _rules(path: Any) -> SignatureRules:
    try:
        return load_rules(path)
    except (OSError, ValueError) as error:
        raise BadOption("--rules", str(error)) from None


def _analyze_options(values: Mapping[str, Any], cuda_gdb: bool, timeout_s: float) -> AnalyzeOptions:
    localize = LocalizeOptions(
        source_dirs=tuple(values.get("source_dirs") or ()),
        path_maps=tuple(values.get("path_maps") or ()),
        disassemble=not values.get("no_disasm"),
        nvdisasm=values.get("nvdisasm"),
        timeout=min(timeout_s, _TOOL_TIMEOUT_S),
    )
    return AnalyzeOptions(localize, cuda_gdb=cuda_gdb, cuda_gdb_path=values.get("cuda_gdb"))


def _check_patterns(patterns: tuple[str, ...]) -> None:
    try:
        for pattern in patterns:
            compile_pattern(pattern)
    except ValueError as error:
        raise BadOption("--name-pattern", str(error)) from None


def _usable_cpus() -> int:
    # The CPUs this process may run on (taskset, cgroup cpusets), not all the machine has.
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _check_outputs(values: Mapping[str, Any]) -> None:
    # Before the scan, not after it: a typo must not throw away an hour of work.
    for option, key in (("-o", "output"), ("--jsonl", "jsonl")):
        target = values.get(key)
        if target is None:
            continue
        folder = Path(target).parent
        if not folder.is_dir():
            raise BadOption(option, f"{target}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise BadOption(option, f"{target}: the folder {folder} is not writable")


def scan_request(roots: tuple[Path, ...], values: Mapping[str, Any], tty: bool) -> ScanRequest:
    """The scan the options of `postmortem scan` ask for; raises BadOption."""
    patterns = tuple(values.get("name_patterns") or ())
    _check_patterns(patterns)
    since = None
    if values.get("since"):
        try:
            since = parse_since(str(values["since"]), time.time())
        except ValueError as error:
            raise BadOption("--since", str(error)) from None
    fmt = str(values["fmt"])
    reports = values.get("reports_dir")
    report_format = values.get("report_format") or ("text" if fmt == "text" else fmt)
    _check_outputs(values)
    if reports is not None:
        try:
            reports.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise BadOption("--reports", f"{reports}: {error.strerror or error}") from None
    timeout_s = float(values["timeout"])
    cuda_gdb = reports is not None and not values.get("no_gdb")
    work = WorkOptions(
        _analyze_options(values, cuda_gdb, timeout_s), _rules(values.get("rules")),
        patterns + DEFAULT_PATTERNS, reports, report_format,
    )  # fmt: skip
    cache = None if values.get("no_cache") else (values.get("cache_path") or default_cache_path())
    options = ScanOptions(
        work, jobs=values.get("jobs") or _usable_cpus(), timeout_s=timeout_s,
        follow_symlinks=bool(values.get("follow_symlinks")), since=since, cache_path=cache,
    )  # fmt: skip
    outputs = ScanOutputs(fmt, values.get("output"), values.get("jsonl"), tty)
    return ScanRequest(roots, options, outputs)


def run(request: ScanRequest) -> tuple[ScanResult, str]:
    """Run the scan and write its outputs (see `scan_command`)."""
    return scan_command(request.roots, request.options, request.outputs)


def summary_line(result: ScanResult, output: Path) -> str:
    """One line for standard error once the index is written to a file."""
    state = "interrupted; partial results" if result.interrupted else "done"
    errors = len(result.errors)
    return (
        f"scan {state}: {len(result.rows)} dumps, {len(result.groups)} signatures, "
        f"{errors} error{'' if errors == 1 else 's'}; "
        f"index written to {escape_controls(str(output))}"
    )


def exit_status(result: ScanResult) -> ExitStatus:
    """The exit status of `postmortem scan` for `result`."""
    return scan_exit_status(result)


def signature_texts(cores: tuple[Path, ...], values: Mapping[str, Any]) -> tuple[str, list[str]]:
    """What `postmortem signature` prints for each dump, and the one-line error of each
    dump that could not be read; in text, control characters are shown escaped."""
    texts: list[str] = []
    errors: list[str] = []
    for core in cores:
        text, error = _signature_or_error(core, values)
        texts.append(text)
        errors.extend([error] if error else [])
    return "".join(texts), errors


def _signature_or_error(core: Path, values: Mapping[str, Any]) -> tuple[str, str | None]:
    try:
        return signature_text(core, values), None
    except PostmortemError as error:
        return "", escape_controls(f"error: {error}")
    except Exception as error:  # a bug of ours: the other dumps are still signed
        line = f"internal error: {core}: {type(error).__name__}: {error} (rerun with --debug)"
        return "", escape_controls(line)


def signature_text(core: Path, values: Mapping[str, Any]) -> str:
    """What `postmortem signature` prints for one dump; raises PostmortemError."""
    options = _analyze_options(values, False, _TOOL_TIMEOUT_S)
    signature = sign_dump(core, options, _rules(values.get("rules")))
    if values.get("as_json"):
        view = {"path": str(core), **signature_view(signature)}
        return json.dumps(view, sort_keys=True) + "\n"
    return render_signature(Path(escape_controls(str(core))), _escaped(signature))


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
        frames=tuple(escape_controls(frame) for frame in signature.frames),
        all_frames=tuple(replace(f, file=escape_controls(f.file)) for f in signature.all_frames),
    )
