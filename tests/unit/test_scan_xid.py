"""Xid lines of host logs joined to the GPUs of a scan's hardware-or-code verdict."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import threading

from postmortem.host.driver import parse_driver_log
from postmortem.safefile import WRITER_WAIT_S
from postmortem.scan.fleet import xid as xid_module
from postmortem.scan.fleet.group import Blame
from postmortem.scan.fleet.hardware import Gpu, join_xids
from postmortem.scan.fleet.xid import (
    JOINED_XIDS,
    XID_TAIL_BYTES,
    HostXid,
    find_host_xids,
    read_host_xids,
)
from tests.fifo import rescued
from tests.tooling import DUMPS, REPO, invoke

LOG = """\
Nov 20 10:00:01 gpu-node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=13641, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ
Nov 20 10:00:02 gpu-node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 43, pid=13641, name=python3, Ch 00000008
Nov 20 10:00:03 gpu-node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 45, pid=13641, Ch 00000008
[ 4242.123456] NVRM: Xid (PCI:0000:db:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
2026-11-20T10:00:04+0000 gpu-node-9 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception
some other line
"""  # noqa: E501


def _gpu(host, bus, device=0):
    blame = Blame("unclear", "", 3, 1, 1, 1)
    return Gpu(f"{host or '?'}/0000:{bus:02x}:{device:02x}.0", host, bus, device, None, (), (),
               blame)  # fmt: skip


def test_xid_lines_of_the_joined_kinds_are_read_with_their_host_and_pci_address(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(LOG)
    xids = read_host_xids([log])
    # Xid 45 (a channel preempted) is not one of those joined
    assert [(x.xid, x.pci_bus_id, x.pci_dev_id, x.host, x.line) for x in xids] == [
        (31, 0x3B, 0, "gpu-node-7", 1),
        (43, 0x3B, 0, "gpu-node-7", 2),
        (79, 0xDB, 0, None, 4),
        (13, 0x3B, 0, "gpu-node-9", 5),
    ]


def test_xids_join_gpus_by_pci_address_and_host_where_both_give_one():
    # GIVEN GPUs at bus 3b on two hosts, one of unknown host at db, and one at 18
    gpus = (_gpu("gpu-node-7", 0x3B), _gpu("gpu-node-9", 0x3B), _gpu(None, 0xDB), _gpu(None, 0x18))
    xids = [
        HostXid(31, 0x3B, 0, "gpu-node-7", "k", 1), HostXid(31, 0x3B, 0, "gpu-node-7", "k", 2),
        HostXid(13, 0x3B, 0, "gpu-node-9", "k", 3), HostXid(79, 0xDB, None, None, "k", 4),
        HostXid(43, 0x3B, 1, "gpu-node-7", "k", 5), HostXid(79, 0x5E, 0, None, "k", 6),
    ]  # fmt: skip
    # WHEN joined
    joined, unjoined = join_xids(gpus, xids)
    # THEN each GPU has the Xids of its own address and host; another device or bus joins none
    assert [g.xids for g in joined] == [((31, 2),), ((13, 1),), ((79, 1),), ()]
    assert unjoined == 2


def test_scan_host_log_shows_the_xids_beside_each_gpu_verdict(tmp_path):
    # GIVEN the fixture dumps (their GPUs at 0000:18:00.0 and 0000:2a:00.0) and a kernel
    # log with Xids on the first and on a GPU with no dump
    log = tmp_path / "kern.log"
    log.write_text(
        "[ 10.0] NVRM: Xid (PCI:0000:18:00): 31, pid=1, Ch 00000008\n"
        "[ 11.0] NVRM: Xid (PCI:0000:18:00): 31, pid=1, Ch 00000008\n"
        "[ 12.0] NVRM: Xid (PCI:0000:18:00): 43, pid=1, Ch 00000008\n"
        "[ 13.0] NVRM: Xid (PCI:0000:99:00): 79, pid=1, GPU has fallen off the bus.\n"
    )
    scan = ["scan", REPO / "fixtures" / "dumps", "--no-cache", "--no-disasm", "--host-log", log]
    # WHEN scanned with it, as JSON lines and as text
    lines = invoke(*scan, "--format", "json")
    text = invoke(*scan, "--format", "text")
    # THEN the GPU's row carries its Xids, and the scan counts the line that joined none
    summary = json.loads(lines.stdout.splitlines()[0])
    gpus = {g["pci_address"]: g for g in summary["gpus"]}
    assert gpus["0000:18:00.0"]["xids"] == [{"xid": 31, "count": 2}, {"xid": 43, "count": 1}]
    assert gpus["0000:2a:00.0"]["xids"] == []
    assert summary["host_xids"] == {"lines": 4, "unjoined": 1}
    assert "host log: Xid 31 (2), Xid 43 (1)" in text.stdout
    assert "host logs: 4 Xid lines (13/31/43/79), 1 of them on no GPU that faulted" in text.stdout


def test_scan_refuses_a_host_log_it_cannot_read(tmp_path):
    result = invoke("scan", tmp_path, "--host-log", tmp_path / "none")
    assert result.returncode == 2
    assert result.stderr.startswith("error: --host-log: ")


def _one_line_at_a_time(path):
    # The reading of old, line by line through the driver-log parser: the reference the
    # single search over the buffer must agree with, its lines that say the same counted.
    host = re.compile(r"^(?:\w{3} +\d{1,2} [\d:]{8}|\d{4}-\d\d-\d\dT\S+) (\S+) kernel:")
    found = {}
    with open(path, encoding="utf-8", errors="replace") as log:
        for number, text in enumerate(log, 1):
            parsed = parse_driver_log([text.rstrip("\n")]) if "NVRM: Xid" in text else None
            if parsed is None or not parsed.xids or parsed.xids[0].xid not in JOINED_XIDS:
                continue
            bus, _, device = parsed.xids[0].pci.split(".")[0].rpartition(":")
            prefix = host.match(text)
            key = (parsed.xids[0].xid, int(bus.rpartition(":")[2], 16), int(device, 16),
                   prefix.group(1) if prefix else None)  # fmt: skip
            first, count = found.get(key, (number, 0))
            found[key] = (first, count + 1)
    return sorted(((*key, first, count) for key, (first, count) in found.items()),
                  key=lambda xid: xid[4])  # fmt: skip


def test_one_search_over_a_big_generated_log_finds_what_a_parse_per_line_finds(
    tmp_path, monkeypatch
):
    # GIVEN a generated kernel log of 60,000 lines: Xids of every kind, joined or not, with
    # and without a syslog prefix, on a few hosts and GPUs, between other lines, some long;
    # searched in slices of 64 KiB
    monkeypatch.setattr(xid_module, "_SLICE_BYTES", 64 << 10)
    rng = random.Random(36)
    prefixes = ["", "[ 4242.123456] "] + [
        f"{stamp} gpu-node-{n} kernel: "
        for stamp in ("Nov 20 10:00:01", "2026-11-20T10:00:04+0000") for n in range(3)
    ]  # fmt: skip
    lines = []
    for _ in range(60000):
        if rng.random() < 0.6:
            xid = rng.choice([13, 31, 43, 45, 79, 130, 8])
            pci = rng.choice(["0000:3b:00", "0000:db:00.0", "18:00", "0000:3b:01"])
            tail = rng.choice(["", ", pid=1, Ch 00000008", ", GPU has fallen off the bus."])
            lines.append(f"{rng.choice(prefixes)}NVRM: Xid (PCI:{pci}): {xid}{tail}")
        else:
            lines.append(rng.choice(["some other line", "x" * rng.randrange(5000), ""]))
    log = tmp_path / "kern.log"
    log.write_text("\n".join(lines) + "\n")
    # WHEN its Xids are read
    xids = find_host_xids([log])
    # THEN they are what a parse of each line finds: hosts, first lines and counts
    found = [(x.xid, x.pci_bus_id, x.pci_dev_id, x.host, x.line, x.count) for x in xids.xids]
    assert found == _one_line_at_a_time(log)
    assert xids.lines > 10000 and xids.warnings == ()


def test_a_log_of_more_xid_lines_than_searched_counts_the_newest_and_says_so(tmp_path, monkeypatch):
    # GIVEN a log of 100 Xid 31 lines then 100 Xid 79 lines, searched 1 KiB at a time and
    # for 50 lines at most
    monkeypatch.setattr(xid_module, "_SLICE_BYTES", 1 << 10)
    monkeypatch.setattr(xid_module, "XID_LINES", 50)
    log = tmp_path / "kern.log"
    old = "NVRM: Xid (PCI:0000:3b:00): 31, pid=1\n"
    new = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    log.write_text(old * 100 + new * 100)
    # WHEN read
    xids = find_host_xids([log])
    # THEN the newest are counted, whole slices of them, and the warning says which bytes
    ((xid, count),) = [(x.xid, x.count) for x in xids.xids]
    assert xid == 79 and 50 <= count < 100
    searched = count * len(new)
    assert xids.warnings == (
        f"--host-log {log}: more than 50 Xid lines or 65,536 GPUs and hosts: Xid lines "
        f"counted in its last {searched:,} bytes only",
    )


def test_xid_lines_that_say_the_same_join_with_their_count():
    gpus = (_gpu("gpu-node-7", 0x3B),)
    xids = [HostXid(31, 0x3B, 0, "gpu-node-7", "k", 1, 1000),
            HostXid(79, 0x5E, 0, None, "k", 7, 20)]  # fmt: skip
    joined, unjoined = join_xids(gpus, xids)
    assert joined[0].xids == ((31, 1000),) and unjoined == 20


def test_a_log_longer_than_what_is_read_counts_its_end_and_says_so(tmp_path, monkeypatch):
    # GIVEN a log whose first Xid line lies before the last 100 bytes
    monkeypatch.setattr(xid_module, "XID_TAIL_BYTES", 100)
    log = tmp_path / "kern.log"
    early = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    late = "NVRM: Xid (PCI:0000:3b:00): 31, pid=1\n"
    log.write_text(early + "x" * 200 + "\n" + late)
    # WHEN read
    xids = find_host_xids([log])
    # THEN only the late line is counted, and a warning says what was searched
    assert [x.xid for x in xids.xids] == [31]
    size = len(early) + 201 + len(late)
    assert xids.warnings == (
        f"--host-log {log}: {size:,} bytes: Xid lines counted in its last {len(late)} bytes only",
    )


def _one_dump(tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    shutil.copy(DUMPS / "oob_store.nvcudmp", folder / "core_1.nvcudmp")
    return folder


def _scan_in_thread(*args):
    # The scan runs in a thread joined with a guard: a read that hangs fails the test.
    outcome = {}
    scan = threading.Thread(target=lambda: outcome.update(result=invoke(*args)), daemon=True)
    scan.start()
    scan.join(120)
    assert not scan.is_alive(), "the scan did not end"
    return outcome["result"]


def test_scan_refuses_a_named_pipe_no_process_writes_to_in_one_line(tmp_path):
    # GIVEN --host-log naming a FIFO that no process opens to write
    fifo = tmp_path / "kern.pipe"
    os.mkfifo(fifo)
    # WHEN scanned with it
    with rescued(fifo, seconds=60):
        result = _scan_in_thread("scan", _one_dump(tmp_path), "--no-cache", "--no-disasm",
                                 "--host-log", fifo, "-o", tmp_path / "index.txt")  # fmt: skip
    # THEN one line says why, before any dump is analyzed, and no index is written
    assert result.returncode != 0
    assert result.stderr == (
        f"error: {fifo}: cannot read: a pipe that no process writes to "
        f"(waited {WRITER_WAIT_S:g} s)\n"
    )
    assert not (tmp_path / "index.txt").exists()


def test_scan_reads_an_endless_pipe_for_seconds_and_says_what_it_counted(tmp_path):
    # GIVEN --host-log naming a FIFO a writer fills for ever with Xid lines
    fifo = tmp_path / "kern.pipe"
    os.mkfifo(fifo)
    stop = threading.Event()

    def forever():
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as stream:
            while not stop.is_set():
                stream.write(b"[ 1.0] NVRM: Xid (PCI:0000:18:00): 43, pid=1, Ch 00000008\n" * 999)

    writer = threading.Thread(target=forever, daemon=True)
    writer.start()
    # WHEN scanned with it
    try:
        result = _scan_in_thread("scan", _one_dump(tmp_path), "--no-cache", "--no-disasm",
                                 "--host-log", fifo, "--format", "json")  # fmt: skip
    finally:
        stop.set()
    writer.join(60)
    # THEN the scan ends, counts the Xid lines of what it kept, and says the pipe was cut
    assert result.returncode in (0, 4), result.stderr
    summary = json.loads(result.stdout.splitlines()[0])
    assert summary["host_xids"]["lines"] > 0
    (warning,) = [line for line in result.stderr.splitlines() if "--host-log" in line]
    assert warning.startswith(f"warning: --host-log {fifo}: still written to after 2 s, ")
    assert warning.endswith(" bytes only")


def test_scan_of_a_host_log_of_one_gib_line_reads_its_tail_and_says_so(tmp_path):
    # GIVEN a host log of one line of 1 GiB (sparse: zeros, no newline)
    log = tmp_path / "kern.log"
    with open(log, "wb") as stream:
        stream.truncate(1 << 30)
    # WHEN scanned with it
    result = invoke("scan", _one_dump(tmp_path), "--no-cache", "--no-disasm", "--host-log", log,
                    "--format", "json")  # fmt: skip
    # THEN no Xid is counted, and the warning says what was searched
    assert result.returncode in (0, 4), result.stderr
    assert json.loads(result.stdout.splitlines()[0])["host_xids"] == {"lines": 0, "unjoined": 0}
    assert (
        f"warning: --host-log {log}: 1,073,741,824 bytes: Xid lines counted in its last "
        f"{XID_TAIL_BYTES:,} bytes only"
    ) in result.stderr.splitlines()


def test_a_pci_address_reads_back_as_it_is_written():
    from postmortem.pci import format_pci, parse_pci

    assert format_pci(0x3B, 0) == "0000:3b:00.0"
    for text in ("0000:3b:00", "0000:3b:00.0", "3b:00", format_pci(0x3B, 0)):
        assert parse_pci(text) == (0x3B, 0)
    assert parse_pci("3b") is None and parse_pci("zz:00") is None
