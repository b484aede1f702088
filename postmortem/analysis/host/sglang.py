"""SGLang's kernel API log joined to the dump: the call that launched the faulting kernel,
and what its logged inputs say.

SGLang logs the Python API that launched a kernel (``sglang.custom_op.fused_inplace_qknorm``),
not the kernel's name, so the call is found by how closely its name names a kernel of the
dump, from the strongest match to the weakest, the latest call first among equals.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from postmortem.analysis.host.match import BASE_NAME, EXACT
from postmortem.demangle import base_name, demangle, without_parameters
from postmortem.findings import Finding, FindingCode, Severity
from postmortem.host.model import ApiCall, SglangLog

IN_KERNEL_NAME = "the call's name is part of the kernel's name"
IN_TEMPLATE = "the call's name is part of the kernel's template arguments"
LOOSE = "the call's name is part of the kernel's name, case and underscores aside"
_API_TIERS = (EXACT, BASE_NAME, IN_KERNEL_NAME, IN_TEMPLATE, LOOSE)

# Parts of an API's dotted name that say nothing of which kernel it launches.
_GENERIC = frozenset({
    "sglang", "sgl_kernel", "srt", "custom_op", "custom_ops", "quant_method", "diffusion",
    "layers", "ops", "torch", "forward", "forward_cuda", "forward_native", "apply", "impl",
    "__call__", "call", "run", "kernel", "kernels", "_c", "module", "model",
})  # fmt: skip
_SPLIT = re.compile(r"[.:]+")
_SHOWN_CALLS = 5


@dataclass(frozen=True, slots=True)
class ApiJoin:
    """An SGLang kernel API log next to the dump: the call that launched the kernel."""

    path: Path
    log: SglangLog
    match: ApiCall | None
    """The latest call whose name best names a kernel of the dump; None when none does."""
    kernel: str | None
    """That kernel, mangled."""
    how: str | None
    """How the names matched (`match_api`'s words)."""

    @property
    def last_calls(self) -> tuple[ApiCall, ...]:
        """The calls logged last, oldest first."""
        return self.log.calls[-_SHOWN_CALLS:]


def join_api(path: Path, log: SglangLog, kernels: Sequence[str]) -> ApiJoin:
    """The call of an SGLang kernel API log that best names one of the dump's `kernels`."""
    found = best_api_match([call.name for call in log.calls], kernels)
    if found is None:
        return ApiJoin(path, log, None, None, None)
    index, kernel, how = found
    return ApiJoin(path, log, log.calls[index], kernel, how)


def api_findings(joined: ApiJoin) -> list[Finding]:
    """What the matched call's (else the last calls') logged inputs say: NaN or Inf given to
    it, inputs saved for a replay."""
    findings: list[Finding] = []
    calls = [joined.match] if joined.match is not None else list(joined.last_calls)
    for call in calls:
        if not call.flagged:
            continue
        evidence = tuple(
            f"{a.name}: nan_count={_count(a.tensor.nan_count if a.tensor else None)}, "
            f"inf_count={_count(a.tensor.inf_count if a.tensor else None)}, "
            f"shape {(a.tensor.shape_text if a.tensor else None) or '?'}"
            for a in call.flagged
        )
        findings.append(
            Finding(
                FindingCode.NAN_OR_INF_INPUT,
                Severity.WARNING,
                f"{call.name} (line {call.line} of {joined.path.name}) was given a tensor "
                "holding NaN or Inf: the bad values were there before its kernel ran",
                evidence,
                "look at the call that produced them, the one logged before it",
            )
        )
    saved = joined.match or next((c for c in reversed(joined.log.calls) if c.dump_dir), None)
    if saved is not None and saved.dump_dir:
        which = (
            "the call that launched the faulting kernel"
            if joined.match
            else ("the last call whose inputs were saved (no call matched the faulting kernel)")
        )
        findings.append(
            Finding(
                FindingCode.REPLAYABLE_INPUTS,
                Severity.INFO,
                f"the inputs of {saved.name}, {which}, were saved before it ran: {saved.dump_dir}",
                (f"{joined.path.name}:{saved.line}: {saved.name}",),
                f"replay it offline: torch.load('{saved.dump_dir}/inputs.pt'), with "
                "metadata.json beside it",
            )
        )
    return findings


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


def match_api(call: str, mangled: str) -> str | None:
    """How an SGLang kernel API's name (`call`) names the dump's kernel, or None."""
    demangled = demangle(mangled)
    if call in (mangled, demangled, without_parameters(demangled)):
        return EXACT
    parts = [p for p in _SPLIT.split(call) if p and p.lower() not in _GENERIC]
    base = base_name(demangled)
    if not parts or not base:
        return None
    if parts[-1] == base or base in parts:
        return BASE_NAME
    words = [p for p in reversed(parts) if len(p) >= 4]
    if any(p in base for p in words):
        return IN_KERNEL_NAME
    templates = without_parameters(demangled)
    arguments = templates[templates.find("<") :] if "<" in templates else ""
    if any(p in arguments for p in words):
        return IN_TEMPLATE
    loose = _loose(base)
    if any(_loose(p) in loose or (len(loose) >= 4 and loose in _loose(p)) for p in words):
        return LOOSE
    return None


def best_api_match(calls: Sequence[str], kernels: Sequence[str]) -> tuple[int, str, str] | None:
    """(index into `calls`, kernel, how) of the strongest match, the latest call first
    among equals; None when no call names any kernel."""
    best: tuple[int, int, str, str] | None = None
    for index in range(len(calls) - 1, -1, -1):
        for kernel in kernels:
            how = match_api(calls[index], kernel)
            if how is None:
                continue
            rank = _API_TIERS.index(how)
            if best is None or rank < best[0]:
                best = (rank, index, kernel, how)
    return None if best is None else best[1:]


def _loose(name: str) -> str:
    return name.lower().replace("_", "")
