"""Hardware or code: what a fleet of dumps tells that one dump cannot.

NVIDIA's guidance for Xid 13 and 31 (graphics engine exception, MMU fault), applied to
dumps: the same fault on many GPUs and hosts points at the code; repeated faults on one GPU
across different applications point at that GPU. Here an "application" is a crash
signature, and a GPU is one PCI address on one host (the host from the dump's file name):

- a group (one signature) is **code** when its dumps come from at least `CODE_MIN_GPUS`
  GPUs; it is **hardware** when all of them come from one GPU that is itself judged
  hardware;
- a GPU is **hardware** when at least `MIN_DUMPS` of its faults fall in at least
  `HARDWARE_MIN_SIGNATURES` signatures that the rest of the fleet does not share (seen on
  no other GPU), or when one of its SMs holds `MIN_DUMPS` faults of several signatures;
  it is **code** when every one of its faults belongs to a code group;
- a GPU whose dumps' names give no host is never judged hardware: its PCI address may
  stand for GPUs of several machines;
- below `MIN_DUMPS` dumps (of a group, of a GPU) or `MIN_FLEET` faulting dumps in the
  whole scan, the verdict is "too few dumps to tell", never a guess; anything else is
  "unclear". Every verdict carries the counts it rests on.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from postmortem.pci import format_pci
from postmortem.scan.fleet.group import Blame, Group
from postmortem.scan.fleet.xid import HostXid
from postmortem.scan.row import DumpRow

MIN_DUMPS = 3
"""Fewer dumps than this in a group or on a GPU: too few to tell."""
MIN_FLEET = 6
"""Fewer faulting dumps than this in the whole scan: too few to tell anything."""
CODE_MIN_GPUS = 3
"""A signature seen on this many GPUs points at the code."""
HARDWARE_MIN_SIGNATURES = 2
"""A GPU faulting in this many signatures of its own points at the GPU."""

CODE = "code"
HARDWARE = "hardware"
TOO_FEW = "too-few"
UNCLEAR = "unclear"
TOO_FEW_TEXT = "too few dumps to tell"


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU of the fleet, its faults and its verdict."""

    id: str
    """``host/0000:bb:dd.0``: the host from the file name (``?`` when none) and the PCI
    address from the dump's device row."""
    host: str | None
    pci_bus_id: int
    pci_dev_id: int | None
    name: str | None
    signatures: tuple[tuple[str, int], ...]
    """Signature ids and how many of its dumps each, most first."""
    sms: tuple[tuple[int, int], ...]
    """SMs and how many faults each, most first."""
    blame: Blame
    xids: tuple[tuple[int, int], ...] = ()
    """Xids of the host logs (`scan --host-log`) joined to it, and how many lines each."""


def gpu_id(row: DumpRow) -> str | None:
    """The identity of the GPU that faulted in `row`; None when the dump does not say."""
    if row.pci_bus_id is None:
        return None
    return f"{row.host or '?'}/{format_pci(row.pci_bus_id, row.pci_dev_id)}"


def _faulting(rows: Sequence[DumpRow]) -> list[DumpRow]:
    return [r for r in rows if not r.failed and r.signature and r.exception is not None]


def judge_fleet(
    rows: Sequence[DumpRow], groups: Sequence[Group]
) -> tuple[tuple[Group, ...], tuple[Gpu, ...]]:
    """`groups` each with its verdict, and every GPU that faulted with its own."""
    faulting = _faulting(rows)
    small = len(faulting) < MIN_FLEET
    by_gpu: dict[str, list[DumpRow]] = defaultdict(list)
    by_signature: dict[str, list[DumpRow]] = defaultdict(list)
    for row in faulting:
        assert row.signature is not None
        by_signature[row.signature.id].append(row)
        found = gpu_id(row)
        if found is not None:
            by_gpu[found].append(row)
    spread = {sid: {gpu_id(r) for r in members} - {None} for sid, members in by_signature.items()}
    code_groups = {
        sid
        for sid, members in by_signature.items()
        if _group_blame(members, spread[sid], small).kind == CODE
    }
    gpus = tuple(
        _gpu(gid, members, spread, code_groups, small) for gid, members in sorted(by_gpu.items())
    )
    hardware = {g.id: g for g in gpus if g.blame.kind == HARDWARE}
    judged = []
    for group in groups:
        members = by_signature.get(group.signature.id, [])
        blame = _group_blame(members, spread.get(group.signature.id, set()), small)
        only = spread.get(group.signature.id, set())
        if blame.kind == UNCLEAR and len(only) == 1 and next(iter(only)) in hardware:
            blame = replace(
                blame, kind=HARDWARE,
                reason=f"{_dumps(blame.dumps)}, all on {next(iter(only))}, a GPU that faults "
                "in several signatures of its own: points at that GPU",
            )  # fmt: skip
        judged.append(replace(group, blame=blame))
    return tuple(judged), gpus


def _dumps(count: int) -> str:
    return f"{count} dump{'s' if count != 1 else ''}"


def _group_blame(members: Sequence[DumpRow], gpus: set[str | None], small: bool) -> Blame:
    hosts = len({r.host for r in members})
    blame = Blame(UNCLEAR, "", len(members), len(gpus), hosts, 1 if members else 0)
    if small or len(members) < MIN_DUMPS:
        why = f"{TOO_FEW_TEXT} ({_dumps(len(members))} on {len(gpus)} GPU(s))"
        return replace(blame, kind=TOO_FEW, reason=why)
    if len(gpus) >= CODE_MIN_GPUS:
        why = (
            f"the same signature on {len(gpus)} GPUs of {hosts} host(s) "
            f"({_dumps(len(members))}): points at the code"
        )
        return replace(blame, kind=CODE, reason=why)
    why = f"{_dumps(len(members))} on {len(gpus)} GPU(s): neither spread nor confined enough"
    return replace(blame, reason=why)


def _gpu(
    gid: str,
    members: Sequence[DumpRow],
    spread: dict[str, set[str | None]],
    code_groups: set[str],
    small: bool,
) -> Gpu:
    first = members[0]
    signatures = Counter(r.signature.id for r in members if r.signature)
    sms = Counter(r.sm for r in members if r.sm is not None)
    own = {sid for sid in signatures if spread.get(sid, set()) == {gid}}
    on_own = sum(signatures[sid] for sid in own)
    blame = Blame(UNCLEAR, "", len(members), 1, 1, len(signatures))
    blame = _gpu_blame(blame, members, signatures, sms, own, on_own, code_groups, small)
    return Gpu(
        gid, first.host, first.pci_bus_id or 0, first.pci_dev_id, first.gpu_name,
        tuple(sorted(signatures.items(), key=lambda item: (-item[1], item[0]))),
        tuple(sorted(sms.items(), key=lambda item: (-item[1], item[0]))), blame,
    )  # fmt: skip


def _gpu_blame(
    blame: Blame,
    members: Sequence[DumpRow],
    signatures: Counter[str],
    sms: Counter[int],
    own: set[str],
    on_own: int,
    code_groups: set[str],
    small: bool,
) -> Blame:
    count = len(members)
    if small or count < MIN_DUMPS:
        why = f"{TOO_FEW_TEXT} ({_dumps(count)}, {len(signatures)} signature(s))"
        return replace(blame, kind=TOO_FEW, reason=why)
    if members[0].host is None:
        why = (
            f"{_dumps(count)} in {len(signatures)} signature(s), but the file names give no "
            "host: this PCI address may stand for GPUs of several machines "
            "(CUDA_COREDUMP_FILE with %h names them)"
        )
        return replace(blame, reason=why)
    if len(own) >= HARDWARE_MIN_SIGNATURES and on_own >= MIN_DUMPS:
        why = (
            f"{_dumps(on_own)} in {len(own)} signatures that no other GPU shows "
            f"({_dumps(count)} in all): points at this GPU"
        )
        return replace(blame, kind=HARDWARE, reason=why)
    for sm, faults in sms.most_common(1):
        kinds = {r.signature.id for r in members if r.sm == sm and r.signature}
        if faults >= MIN_DUMPS and len(kinds) >= HARDWARE_MIN_SIGNATURES:
            why = (
                f"{_dumps(faults)} on SM {sm} in {len(kinds)} different signatures: "
                "points at this GPU (that SM)"
            )
            return replace(blame, kind=HARDWARE, reason=why, sm=sm)
    if all(sid in code_groups for sid in signatures):
        why = (
            f"{_dumps(count)} in {len(signatures)} signature(s) that many GPUs share: "
            "points at the code, not this GPU"
        )
        return replace(blame, kind=CODE, reason=why)
    return replace(blame, reason=f"{_dumps(count)} in {len(signatures)} signature(s): no pattern")


def join_xids(gpus: Sequence[Gpu], xids: Sequence[HostXid]) -> tuple[tuple[Gpu, ...], int]:
    """`gpus` each with the Xid lines of its PCI bus and device (and host, where both the
    line and the dump's name give one), and how many lines joined no GPU."""
    joined: dict[str, Counter[int]] = defaultdict(Counter)
    alone = 0
    for xid in xids:
        matches = [gpu.id for gpu in gpus if _same_gpu(gpu, xid)]
        for gid in matches:
            joined[gid][xid.xid] += xid.count
        alone += 0 if matches else xid.count
    return tuple(
        replace(gpu, xids=tuple(sorted(joined[gpu.id].items()))) if gpu.id in joined else gpu
        for gpu in gpus
    ), alone


def _same_gpu(gpu: Gpu, xid: HostXid) -> bool:
    if gpu.pci_bus_id != xid.pci_bus_id:
        return False
    if xid.pci_dev_id is not None and (gpu.pci_dev_id or 0) != xid.pci_dev_id:
        return False
    return xid.host is None or gpu.host is None or xid.host == gpu.host
