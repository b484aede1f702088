"""A fleet of distinct CUDA coredumps, written with the committed fixture builder.

Each dump is described by a `FleetDump`: which fixture cubin faults (and so which kernel and
exception), at which PC (an anchor of the builder, ``fault``, ``fault-1`` …), on which SM,
in which lanes, in a grid of which size, on which GPU (its PCI bus) of which host, when,
and in which driver generation's row layout. No two dumps of `random_fleet` are
byte-identical, as in a real fleet; the cubins are the committed ones, so a fleet's dumps
share a handful of functions. `bench/bench_scan.py` scans thousands of them; the fleet
tests (tests/unit/test_fleet_*.py) write small fleets of chosen shapes.

    python bench/fleet.py DIR [--count N] [--seed S]
"""

from __future__ import annotations

import argparse
import io
import random
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILDER = ROOT / "fixtures" / "builder"
if str(BUILDER) not in sys.path:
    sys.path.insert(0, str(BUILDER))

import expand as E  # noqa: E402
import scenarios as S  # noqa: E402
from cubin_index import CubinIndex  # noqa: E402
from dumpwriter import DumpWriter  # noqa: E402
from gpustate import write_state  # noqa: E402
from relocate import default_convention  # noqa: E402

_INDEX: CubinIndex | None = None

KERNELS: dict[str, tuple[int, tuple[tuple[str, float], ...], tuple[str, ...]]] = {
    # cubin: (exception, kernel arguments, the PC anchors its faulting warp may stop at)
    "oob_store": (S.WARP_ILLEGAL_ADDRESS, S.OOB_ARGS, ("fault", "fault-1", "fault-2")),
    "misaligned_load": (S.WARP_MISALIGNED_ADDRESS, S.IN_OUT_N, ("fault", "fault-1")),
    "device_assert": (S.WARP_ASSERT, S.IN_OUT_N, ("fault",)),
    "hostile_names": (S.WARP_ILLEGAL_ADDRESS, S.OOB_ARGS, ("fault",)),
    "cutlass_like": (S.WARP_ILLEGAL_ADDRESS, S.OOB_ARGS, ("fault", "fault-1")),
    "shared_overflow": (S.WARP_OUT_OF_RANGE_ADDRESS, S.IN_OUT_N, ("fault",)),
}
LAYOUTS = ("r400", "r525", "r555")
"""Generations without a metadata row: a dump's time is its file name's %t."""


@dataclass(frozen=True, slots=True)
class FleetDump:
    """One dump of a fleet."""

    cubin: str = "oob_store"
    """A key of `KERNELS`: the kernel that faults and its exception."""
    pc: str = "fault"
    """Where the faulting warp stopped (an anchor of the builder)."""
    host: str = "node-00"
    pci_bus: int = 0x18
    sm: int = 3
    lanes: tuple[int, ...] = S.FAULTING
    """The faulting lanes of warp 2."""
    grid_x: int = 64
    time: int = 1_763_000_000
    """Unix seconds: the %t of its file name."""
    pid: int = 1000
    layout: str = "r400"
    load_base: int = E.MODULE_BASE
    """Where the driver loaded the module: another process, another address."""
    convention: str = "code"
    """Which sections of the relocated image carry load addresses ("alloc": every
    allocated one, as other producers write them; nvdisasm refuses such an image as it is)."""

    @property
    def name(self) -> str:
        """The file name, as the driver's ``core_%t_%h_%p.nvcudmp`` names it."""
        return f"core_{self.time}_{self.host}_{self.pid}.nvcudmp"


def _index() -> CubinIndex:
    global _INDEX
    if _INDEX is None:
        _INDEX = CubinIndex(ROOT / "fixtures" / "cubins" / "index.json")
    return _INDEX


def _scenario(dump: FleetDump) -> S.Scenario:
    exception, args, _ = KERNELS[dump.cubin]
    faulting = S.WarpSpec(2, 2, dump.pc, exception=exception, faulting=dump.lanes)
    block = (min(5, dump.grid_x - 1), 0, 0)
    ctas = (
        S.CtaSpec(dump.sm, block, (faulting, S.WarpSpec(9, 5, "entry+2", lanes=S.EVEN))),
        S.CtaSpec((dump.sm + 14) % 132, (0, 0, 0), (S.WarpSpec(4, 1, "entry+2"),)),
    )
    launch = S.LaunchSpec(dump.cubin, 7, (dump.grid_x, 1, 1), (256, 1, 1), args=args)
    device = S.DeviceSpec((dump.cubin,), (launch,), ctas, pci_bus=dump.pci_bus)
    optional = S.R550 if dump.layout == "r555" else S.R400
    return S.Scenario(dump.name, "fleet dump", dump.layout, (device,), optional)


def dump_bytes(dump: FleetDump) -> bytes:
    """The coredump `dump` describes."""
    buffer = io.BytesIO()
    writer = DumpWriter(buffer)
    saved, E.MODULE_BASE = E.MODULE_BASE, dump.load_base
    try:
        with default_convention(dump.convention):
            state = E.expand(_scenario(dump), _index()).state
    finally:
        E.MODULE_BASE = saved
    write_state(writer, state, dump.layout)
    writer.finish()
    return buffer.getvalue()


def write_dump(folder: Path, dump: FleetDump) -> Path:
    """Write `dump` into `folder` under its name; returns its path."""
    path = folder / dump.name
    path.write_bytes(dump_bytes(dump))
    return path


def random_fleet(count: int, seed: int = 29, hosts: int = 40) -> list[FleetDump]:
    """`count` distinct dumps over `hosts` hosts of 8 GPUs each, over a week; each process
    loaded its module at its own address, and a quarter of the dumps come from a producer
    that gives every allocated section of an image a load address."""
    rng = random.Random(seed)
    cubins = sorted(KERNELS)
    fleet = []
    for number in range(count):
        cubin = rng.choice(cubins)
        lanes = tuple(sorted(rng.sample(range(32), rng.randint(1, 8))))
        fleet.append(
            FleetDump(
                cubin=cubin,
                pc=rng.choice(KERNELS[cubin][2]),
                host=f"node-{rng.randrange(hosts):02d}",
                pci_bus=rng.choice((0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)),
                sm=rng.randrange(132),
                lanes=lanes,
                grid_x=rng.choice((8, 16, 64, 256, 1024)),
                time=1_763_000_000 + rng.randrange(7 * 86400),
                pid=1000 + number,
                layout=rng.choice(LAYOUTS),
                load_base=E.MODULE_BASE + rng.randrange(4096) * 0x20_0000,
                convention="alloc" if rng.random() < 0.25 else "code",
            )
        )
    return fleet


def write_fleet(folder: Path, fleet: list[FleetDump], per_folder: int = 500) -> list[Path]:
    """Write every dump of `fleet` under `folder`, `per_folder` to a subfolder."""
    paths = []
    for number, dump in enumerate(fleet):
        sub = folder / f"batch{number // per_folder:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        paths.append(write_dump(sub, dump))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args()
    paths = write_fleet(args.folder, random_fleet(args.count, args.seed))
    print(f"{len(paths)} dumps under {args.folder}")


if __name__ == "__main__":
    main()
