"""A crash-triage event is redacted whole before it leaves the machine: every string of the
event and the report attached, the report before it is cut; identities and look-alikes kept."""

from __future__ import annotations

from postmortem.analysis.fleet.signature import Frame, Quality, Signature
from postmortem.host.redact import REDACTED
from postmortem.scan.events.sentry import redacted_event
from postmortem.scan.events.triage import triage_event
from postmortem.scan.row import DumpRow, Triage

KERNEL = "cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal<Sm80TensorOpGemmF16Accum128x128>>"
KEY = f"v2|Warp Illegal Address|{KERNEL}|+0xd0|pm::store<>|a.cuh:10 < b.cu:19"


def _row(path: str) -> DumpRow:
    signature = Signature(
        version=2, rules="default@0", id="f5f36df5af66", key=KEY, coarse_id="42e0d2b53e12",
        coarse_key=f"v2|Warp Illegal Address|{KERNEL}", exception="Warp Illegal Address",
        kernel=KERNEL, offset=0xD0, function="pm::store<>", frames=("a.cuh:10", "b.cu:19"),
        all_frames=(Frame("/home/alice/src/a.cuh", 10, False), Frame("b.cu", 19, False)),
        skipped=0, components=("exception", "kernel", "offset", "function", "frames"),
        quality=Quality(3, True, True, True, None),
    )  # fmt: skip
    return DumpRow(
        path=path, size_bytes=100, mtime=1.0, status="ok", error=None, time=1767225600.0,
        time_source="metadata", host="gpu-node-7", pid=42, driver_version="565.57",
        devices=("NVIDIA H100",), exception=14, kernel=KERNEL, fault_sites=1,
        signature=signature, fingerprint="e3b0c44298fc1c149afbf4c8996fb924",
    )  # fmt: skip


def test_every_string_of_the_event_is_redacted_and_its_identity_kept():
    # GIVEN a dump under a home folder whose report quotes a launch command's secret
    row = _row("/home/alice/dumps/core.nvcudmp")
    triage = Triage(
        {"headline": "Warp Illegal Address in oob_kernel", "location": "/home/alice/src/a.cu:3"},
        "# `/home/alice/dumps/core.nvcudmp`\nlaunched with --api-key s3cr3t at 0x7f3b40543000\n",
    )
    # WHEN its event is made for Sentry
    made = redacted_event(row, triage)
    # THEN the path, the verdict, the frames and the report hide the home folder and secret
    event = made.event
    assert event["contexts"]["dump"]["path"] == "~/dumps/core.nvcudmp"
    assert event["contexts"]["verdict"]["location"] == "~/src/a.cu:3"
    assert event["exception"]["values"][0]["stacktrace"]["frames"][-1]["filename"] == "~/src/a.cuh"
    assert (
        made.attachment
        == (
            f"# `~/dumps/core.nvcudmp`\nlaunched with --api-key {REDACTED} at 0x7f3b40543000\n"
        ).encode()
    )
    # AND what identifies it is what the unredacted event says: id, grouping, digests, names
    plain = triage_event(row, triage)
    assert made.event_id == event["event_id"] == plain.event_id
    assert event["fingerprint"] == [KEY]
    assert event["tags"] == plain.event["tags"]
    assert event["contexts"]["dump"]["fingerprint"] == row.fingerprint


def test_the_report_is_redacted_before_it_is_cut_to_the_limit():
    # GIVEN a report whose secret sits where the cut falls
    markdown = "x" * 90 + " password=" + "p" * 300 + " " + "y" * 400
    # WHEN its event is made with a limit of 400 bytes
    made = redacted_event(_row("dumps/core.nvcudmp"), Triage({}, markdown), limit_bytes=400)
    # THEN the report is cut, no part of the secret is left, and the limit holds
    assert b"Cut to fit" in made.attachment and len(made.attachment) <= 400
    assert f"password={REDACTED} yyy".encode() in made.attachment and b"ppp" not in made.attachment
