"""Xid lines of host logs joined to the GPUs of a scan's hardware-or-code verdict."""

from __future__ import annotations

import json

from postmortem.scan.fleet import Gpu, join_xids
from postmortem.scan.group import Blame
from postmortem.scan.xid import HostXid, read_host_xids
from tests.tooling import REPO, invoke

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
