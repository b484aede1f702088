"""`postmortem analyze CORE --host-log FILE` end to end, as a user runs it (in this
process: click's runner).

The host logs here are made by the test from the fixture dump's own facts (its truth file:
the kernel, the faulting lanes' threads and addresses, the GPU's PCI bus), in the formats of
the published excerpts in fixtures/hostlogs/. They are test-made, not recorded output.
nvdisasm is needed: the faulting lanes' addresses come from the decoded instruction.
"""

from __future__ import annotations

import json
import types

import pytest

from tests.conftest import DUMPS, truth_of
from tests.tooling import invoke, require_tool

DUMP = DUMPS / "oob_store.nvcudmp"


def analyze(*args: object) -> types.SimpleNamespace:
    return invoke("analyze", *args)


def host_log(address_shift: int = 0) -> str:
    """A server's stderr and kernel log around the dump's crash, from the dump's truth."""
    truth = truth_of(DUMP)
    lane = truth["faulting_lanes"][0]
    address = lane["effective_address"] + address_shift
    bus = truth["devices"][0]["pci_bus"]
    block, thread = lane["block_idx"], lane["thread_idx"]
    return "\n".join([
        "================================================================================",
        "[2026-03-19 00:48:20] SGLang Kernel API Call: sglang.custom_op.oob_kernel",
        "Positional input arguments:",
        "  arg[0]=Tensor(shape=(64,), dtype=torch.float32, device=cuda:0)",
        "Traceback (most recent call last):",
        '  File "serve.py", line 12, in step',
        "    torch.cuda.synchronize()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        f"NVRM: Xid (PCI:0000:{bus:02x}:00): 31, pid=4242, name=python, Ch 00000008, intr "
        f"00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
        f"0x{address >> 32:x}_{address & 0xFFFFF000 & 0xFFFF_FFFF:08x}. Fault is of type "
        "FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
        "========= Invalid __global__ write of size 4 bytes",
        f"=========     at oob_kernel(float *, int, float)+0x{truth['fault']['offset']:x}",
        "=========     by thread ({},{},{}) in block ({},{},{})".format(*thread, *block),
        f"=========     Address 0x{address:x} is out of bounds",
        "",
    ])  # fmt: skip


def test_a_host_log_written_from_the_dump_s_facts_agrees_on_each(tmp_path):
    require_tool("nvdisasm")
    # GIVEN a host log whose kernel, GPU, thread and address are the dump's
    log = tmp_path / "server.log"
    log.write_text(host_log(), encoding="utf-8")
    # WHEN analyzed with it
    result = analyze(DUMP, "--host-log", log, "--no-gdb", "--format", "json")
    # THEN every fact the log states agrees with the dump, and says how
    assert result.returncode == 0, result.stderr
    host = json.loads(result.stdout)["host"]
    assert [f["recognized"] for f in host["files"]] == [
        ["sglang-kernel-api", "cuda-error", "driver", "compute-sanitizer"]
    ]
    checks = {(c["source"], c["fact"]): (c["agrees"], c["how"]) for c in host["checks"]}
    assert checks == {
        ("Xid 31", "GPU (PCI)"): (True, "the dump's GPU"),
        ("Xid 31", "fault address"): (True, "same address"),
        ("Xid 31", "access"): (True, "the instruction's kind of access"),
        ("compute-sanitizer", "kernel"): (True, "same name, parameters aside"),
        ("compute-sanitizer", "offset"): (True, "same instruction"),
        ("compute-sanitizer", "block and thread"): (True, "a faulting thread"),
        ("compute-sanitizer", "address"): (True, "same address"),
        ("CUDA error", "exception"): (True, "the error is the exception's kind"),
    }
    assert (host["agreements"], host["disagreements"]) == (8, 0)
    (api,) = host["sglang"]
    assert (api["match"]["name"], api["kernel"]["short"]) == (
        "sglang.custom_op.oob_kernel", "oob_kernel",
    )  # fmt: skip
    codes = [f["code"] for f in host["findings"]]
    assert codes == ["error-surfaced-elsewhere"]


def test_a_fault_address_on_another_page_is_reported_as_disagreeing(tmp_path):
    require_tool("nvdisasm")
    log = tmp_path / "server.log"
    log.write_text(host_log(address_shift=0x10_0000), encoding="utf-8")
    result = analyze(DUMP, "--host-log", log, "--no-gdb", "--format", "json")
    assert result.returncode == 0, result.stderr
    host = json.loads(result.stdout)["host"]
    address = next(c for c in host["checks"] if c["fact"] == "fault address")
    assert address["agrees"] is False
    # The nearest faulting lane is the last one (its lanes store 4 KiB apart).
    lanes = [lane["effective_address"] for lane in truth_of(DUMP)["faulting_lanes"]]
    page = lanes[0] + 0x10_0000 & ~0xFFF
    assert address["how"] == f"different: +0x{page - max(lanes):x} bytes from the nearest lane's"
    disagree = next(f for f in host["findings"] if f["code"] == "host-log-disagrees")
    assert disagree["message"] == "the host log disagrees with the dump on: fault address, address"
    # The text report says it as plainly.
    text = analyze(DUMP, "--host-log", log, "--no-gdb").stdout
    assert "DISAGREES fault address: host 0x" in text


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_every_format_has_the_host_evidence_section(tmp_path, fmt):
    require_tool("nvdisasm")
    log = tmp_path / "server.log"
    log.write_text(host_log(), encoding="utf-8")
    result = analyze(DUMP, "--host-log", log, "--no-gdb", "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert "Host evidence" in result.stdout
    assert result.stdout.index("Host evidence") < result.stdout.rindex("Provenance")


def test_secrets_and_home_folders_of_a_host_log_stay_out_of_the_report(tmp_path):
    # GIVEN a host log whose traceback runs from a home folder and whose error line quotes a
    # token, as a launch command's echo would
    text = (
        host_log()
        .replace('File "serve.py"', 'File "/home/alice/proj/serve.py"')
        .replace(
            "was encountered", "was encountered (HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345)"
        )
    )
    log = tmp_path / "host.log"
    log.write_text(text)
    # WHEN the dump is analyzed with it, by default and with --no-redact
    reports = {
        flag: analyze(
            DUMP,
            "--no-gdb",
            "--no-disasm",
            "--host-log",
            log,
            "--format",
            "json",
            *((flag,) if flag else ()),
        )  # fmt: skip
        for flag in ("", "--no-redact")
    }
    redacted, raw = (reports[""].stdout, reports["--no-redact"].stdout)
    # THEN the report keeps the evidence and hides the token and the user's name
    assert reports[""].returncode == 0, reports[""].stderr
    assert "an illegal memory access was encountered" in redacted
    assert "hf_abcdefghijklmnopqrstuvwxyz012345" not in redacted and "alice" not in redacted
    assert "HF_TOKEN=[redacted]" in redacted and "~/proj/serve.py" in redacted
    # AND --no-redact quotes the log as written
    assert "hf_abcdefghijklmnopqrstuvwxyz012345" in raw and "/home/alice/proj/serve.py" in raw
    json.loads(redacted)
