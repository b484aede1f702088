"""Known cuda-gdb failures, recognised by the text they print (style.md §3).

Each entry maps a symptom (a pattern over everything cuda-gdb printed) to a diagnosis. The
version of cuda-gdb is never consulted: a fault is what its text says.
"""

from __future__ import annotations

import re

from postmortem.findings import Finding, FindingCode, Severity

# Symptom text -> (code, message). Recognised by text, never by version (style.md §3). Each is
# a warning: cuda-gdb is a second opinion, so its failures limit only its own answers.
KNOWN_FAULTS: tuple[tuple[re.Pattern[str], FindingCode, str], ...] = (
    (
        re.compile(r"A Unwinder should return gdb\.UnwindInfo instance\."),
        FindingCode.GDB_PYTHON_UNWINDER_FAULT,
        "cuda-gdb's Python unwinder failed (Debian 11.8 build); bt and frame need it started "
        "with an empty -data-directory",
    ),
    (
        re.compile(r"unknown ABI version:?\s*(\d+)?"),
        FindingCode.GDB_CUBIN_ABI_TOO_NEW,
        "the dump's cubins need a newer cuda-gdb: this one cannot read their CUDA ELF ABI "
        "version; its answers are missing, the native reader's stand",
    ),
    (
        re.compile(r"internal-error: .*|A problem internal to GDB has been detected"),
        FindingCode.GDB_INTERNAL_ERROR,
        "cuda-gdb hit an internal error and stopped; the commands after it did not run",
    ),
    (
        re.compile(r"Python Exception <class 'ModuleNotFoundError'>|No module named 'gdb'"),
        FindingCode.GDB_NO_PYTHON_SUPPORT_FILES,
        "cuda-gdb ran without its Python support files (expected after the unwinder retry)",
    ),
    (
        # 11.8 runs cuobjdump through sh: "sh: 1: cuobjdump: not found", then each line of x/i
        # says "Cannot disassemble instruction".
        re.compile(r"cuobjdump: (?:not found|No such file)|Cannot disassemble instruction"),
        FindingCode.GDB_CUOBJDUMP_MISSING,
        "x/i needs cuobjdump on PATH: pip install nvidia-cuda-cuobjdump",
    ),
    # Not yet seen in a transcript: worded after docs/toolchain.md's account of 11.8.
    (
        re.compile(r"memcheck(?:ReadErrorAddress)?|Could not read error address"),
        FindingCode.GDB_NEEDS_MEMCHECK_ADDRESS,
        "cuda-gdb asked for a memcheck error address the dump does not hold (lane exception "
        "code 1, LANE_ILLEGAL_ADDRESS, is refused by cuda-gdb 11.8)",
    ),
    (
        re.compile(r"Could not open CUDA core file: .*"),
        FindingCode.GDB_COREDUMP_REFUSED,
        "cuda-gdb refused the dump; when its table rows are newer than this cuda-gdb knows "
        "(r346/r400 sizes for 11.8), its answers cannot be trusted and the native reader's stand",
    ),
    (
        re.compile(r"is not a CUDA core ?dump|not in executable format|Failed to read core file"),
        FindingCode.GDB_NOT_A_COREDUMP,
        "cuda-gdb did not accept the file as a GPU coredump",
    ),
)


def diagnose(text: str) -> tuple[Finding, ...]:
    """Finds the known cuda-gdb failures in its output, each at most once.

    Args:
        text: Everything cuda-gdb printed.

    Returns:
        One finding per known failure seen, in table order, with the line that shows it.
    """
    found: list[Finding] = []
    for pattern, code, message in KNOWN_FAULTS:
        match = pattern.search(text)
        if match:
            line_start = text.rfind("\n", 0, match.start()) + 1
            line_end = text.find("\n", match.end())
            evidence = text[line_start : len(text) if line_end < 0 else line_end].strip()
            found.append(Finding(code, Severity.WARNING, message, (evidence,)))
    return tuple(found)
