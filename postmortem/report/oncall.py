"""The on-call summary (`postmortem.analysis.oncall.summary`) as plain data, for the `analyze`
report and the incident report alike."""

from __future__ import annotations

from postmortem.analysis.oncall.summary import OnCallSummary, Statement
from postmortem.report.values import Json


def oncall_json(summary: OnCallSummary) -> Json:
    """The summary's five parts; a part with no basis is null (or an empty list)."""
    guess = summary.best_guess
    return {
        "problem_class": summary.problem_class.value,
        "problem": summary.problem,
        "strongest_signal": _statement(summary.strongest_signal),
        "best_guess": None
        if guess is None
        else {
            "kernel": _statement(guess.kernel),
            "instruction": _statement(guess.instruction),
            "frame": _statement(guess.frame),
            "source_line": _statement(guess.source_line),
            "address": _statement(guess.address),
            "unknown": list(guess.unknown),
        },
        "ruled_out": [_statement(s) for s in summary.ruled_out],
        "next_step": _statement(summary.next_step),
    }


def _statement(statement: Statement | None) -> Json | None:
    return None if statement is None else {"text": statement.text, "source": statement.source}
