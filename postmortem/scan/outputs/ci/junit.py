"""A scan as a JUnit XML report: one test case per crash group, one per dump that could not
be read.

Every CI system renders JUnit XML (Jenkins, GitLab, Buildkite, GitHub through a reporter
action), so a crash group shows where test results do. The layout is the one Jenkins'
xunit plugin defines in ``junit-10.xsd`` (which pytest checks its own reports against and
ships in its source distribution): ``testsuites`` > ``testsuite`` > ``testcase``, with
``failure``, ``error`` or ``skipped`` inside a case. A group that fails the job under
`--fail-on` is a failure; an ignored group, or a fixed one seen only in builds from before
the fix, is skipped; a dump that could not be read is an error. Every string from a dump
has its control characters escaped: XML 1.0 cannot hold most of them at all.
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import datetime, timezone

from postmortem._version import __version__
from postmortem.demangle import brief_name
from postmortem.report.textsafe import escape_controls
from postmortem.scan.fleet.group import Group
from postmortem.scan.fleet.known.model import CrashState
from postmortem.scan.outputs.ci.policy import FailOn, fails, mark_of
from postmortem.scan.row import DumpRow

SUITE = "cuda-coredumps"


def junit_xml(
    groups: Sequence[Group], errors: Sequence[DumpRow], fail_on: FailOn, seconds: float
) -> bytes:
    """The JUnit XML document of a scan's `groups` and error rows."""
    cases = [_group_case(group, fail_on) for group in groups]
    cases += [_error_case(row) for row in errors]
    failures = sum(1 for case in cases if case.find("failure") is not None)
    skipped = sum(1 for case in cases if case.find("skipped") is not None)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": str(len(errors))}
    took = f"{seconds:.3f}"
    root = ET.Element("testsuites", {"name": "postmortem scan", "time": took, **counts})
    suite = ET.SubElement(root, "testsuite", {
        "name": SUITE, **counts, "skipped": str(skipped), "time": took,
        "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"),
        "hostname": _clean(socket.gethostname()),
    })  # fmt: skip
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="postmortem", value=__version__)
    ET.SubElement(properties, "property", name="fail-on", value=str(fail_on))
    suite.extend(cases)
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def _group_case(group: Group, fail_on: FailOn) -> ET.Element:
    signature = group.signature
    name = f"{signature.id} {signature.exception} in {brief_name(group.kernel or signature.kernel)}"
    case = ET.Element(
        "testcase", name=_clean(name), classname=f"{SUITE}.{_clean(signature.exception)}"
    )
    case.set("time", "0")
    mark = mark_of(group)
    detail = group.lifecycle.detail if group.lifecycle is not None else f"{mark} crash group"
    if fails(group, fail_on):
        failure = ET.SubElement(
            case, "failure", type=str(mark), message=_clean(f"{mark}: {detail}")
        )
        failure.text = _body(group)
    elif _skipped(group):
        ET.SubElement(case, "skipped", message=_clean(detail))
    ET.SubElement(case, "system-out").text = _body(group)
    return case


def _skipped(group: Group) -> bool:
    lifecycle = group.lifecycle
    return lifecycle is not None and not lifecycle.acted_on and lifecycle.state in (
        CrashState.IGNORED, CrashState.FIXED,
    )  # fmt: skip


def _error_case(row: DumpRow) -> ET.Element:
    case = ET.Element("testcase", name=_clean(row.path), classname=f"{SUITE}.unreadable")
    case.set("time", f"{row.seconds or 0:.3f}")
    ET.SubElement(case, "error", type=str(row.status), message=_clean(row.error or str(row.status)))
    return case


def _body(group: Group) -> str:
    signature = group.signature
    lines = [
        f"signature {signature.id}: {signature.key}",
        f"kernel: {group.kernel or signature.kernel}",
        f"dumps: {group.count}, first {group.earliest}",
        *(f"frame: {frame.label}" for frame in signature.all_frames[:8]),
        *(f"run: {run}" for run in group.runs[:20]),
        *(f"dump: {path}" for path in group.dumps[:20]),
    ]
    if group.lifecycle is not None:
        lines.insert(0, group.lifecycle.detail)
    return _clean("\n".join(lines), keep_newlines=True)


def _clean(text: str, keep_newlines: bool = False) -> str:
    if keep_newlines:
        return "\n".join(escape_controls(line) for line in text.split("\n"))
    return escape_controls(text)
