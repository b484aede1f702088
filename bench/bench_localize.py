"""Benchmark: disassemble one kernel (``-fun``) of a huge cubin against the whole cubin.

Generates (once, cached in bench/out/) a .cu with >= 500 distinct kernels (instantiations of
a template with unrolled loops), compiles it with nvcc (``-cubin -arch=sm_90 -lineinfo -O3``)
into a cubin of >= 20 MB, growing the kernels until it is that big, then prints the cubin's
size and kernel count, the median time of ``disassemble(cubin, one symbol index)`` (what
localizing a fault costs), the median time of nvdisasm on the whole cubin with the same
flags, and their ratio.

    python bench/bench_localize.py [--kernels N] [--min-mb M] [--repeat R]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from postmortem.cubin.nvdisasm import build_nvdisasm_argv, disassemble  # noqa: E402
from postmortem.toolrun import run_tool  # noqa: E402
from postmortem.tools import find_tool  # noqa: E402

OUT = ROOT / "bench" / "out"
_COMPILE_TIMEOUT_S = 900.0

_TEMPLATE = """\
template <int S>
__device__ __forceinline__ float mix(float a, float b, int i) {
    return fmaf(a, b + (float)(S * 7 + i), (float)(i ^ S));
}

template <int S>
__global__ void bench_kernel(float* __restrict__ out, const float* __restrict__ in, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = in[(t + j * S) % n];
#pragma unroll
    for (int i = 0; i < ITERATIONS + S % 5; ++i) {
        float v = in[(t * (i + 1) + S) % n];
        acc[i & 7] = mix<S>(acc[(i + 3) & 7], v, i);
        if (acc[i & 7] > (float)(S + i)) acc[(i + 1) & 7] += sinf(v);
    }
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += acc[j];
    out[t] = s;
}
"""


def source(kernels: int, iterations: int) -> str:
    """Returns a .cu with `kernels` explicit instantiations of the bench kernel."""
    lines = [f"#define ITERATIONS {iterations}", _TEMPLATE]
    lines += [
        f"template __global__ void bench_kernel<{s}>(float*, const float*, int);"
        for s in range(1, kernels + 1)
    ]
    return "\n".join(lines) + "\n"


def compile_cubin(kernels: int, iterations: int) -> Path:
    """Compiles the generated source, or reuses the cubin built from the same source."""
    text = source(kernels, iterations)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    cubin = OUT / f"localize-{digest}.cubin"
    if cubin.is_file():
        return cubin
    OUT.mkdir(parents=True, exist_ok=True)
    cu = OUT / f"localize-{digest}.cu"
    cu.write_text(text, encoding="utf-8")
    nvcc = find_tool("nvcc")
    argv: list[str | Path] = [nvcc, "-cubin", "-arch=sm_90", "-lineinfo", "-O3", "-o", cubin, cu]
    print(f"compiling {kernels} kernels x ~{iterations} unrolled iterations ...", flush=True)
    run = run_tool(argv, timeout=_COMPILE_TIMEOUT_S, merge_stderr=True)
    if run.returncode != 0:
        raise SystemExit(f"nvcc failed ({run.returncode}):\n{run.stdout}")
    print(f"  compiled in {run.seconds:.1f} s", flush=True)
    return cubin


def kernel_symbols(cubin: Path) -> list[tuple[str, int]]:
    """Returns (name, .symtab index) of every kernel (STT_FUNC in a .text. section)."""
    with cubin.open("rb") as stream:
        elf = ELFFile(stream)
        symtab = elf.get_section_by_name(".symtab")
        if not isinstance(symtab, SymbolTableSection):
            raise SystemExit(f"{cubin}: no .symtab")
        found = []
        for index, symbol in enumerate(symtab.iter_symbols()):
            if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_shndx"] != "SHN_UNDEF":
                found.append((symbol.name, index))
    return found


def build_big_cubin(kernels: int, min_bytes: int) -> Path:
    """Grows the unrolled loops until the cubin is at least `min_bytes`."""
    iterations = 24
    while True:
        cubin = compile_cubin(kernels, iterations)
        size = cubin.stat().st_size
        if size >= min_bytes:
            return cubin
        # Code size grows about linearly with the unroll count.
        iterations = int(iterations * min_bytes / size * 1.1) + 1


def median_seconds(action: Callable[[], object], repeat: int) -> float:
    """Runs `action` `repeat` times and returns the median wall time."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Builds the cubin if needed and prints the measurements."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=512)
    parser.add_argument("--min-mb", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    cubin = build_big_cubin(args.kernels, int(args.min_mb * 1_000_000))
    data = cubin.read_bytes()
    symbols = kernel_symbols(cubin)
    name, index = symbols[len(symbols) // 2]
    print(f"cubin: {cubin.relative_to(ROOT)}: {len(data) / 1e6:.1f} MB, {len(symbols)} kernels")

    result = disassemble(data, index)
    count = len(result.listing.instructions)
    assert result.listing.function == name, (result.listing.function, name)
    one = median_seconds(lambda: disassemble(data, index), args.repeat)
    what = f"disassemble(cubin, {index}) [{name}, {count} instructions]"
    print(f"{what}: {one:.3f} s (median of {args.repeat})")

    nvdisasm = find_tool("nvdisasm")
    argv = build_nvdisasm_argv(nvdisasm, cubin, None)
    whole = median_seconds(lambda: run_tool(argv, timeout=_COMPILE_TIMEOUT_S), 3)
    print(f"nvdisasm -ndf -c -gi on the whole cubin: {whole:.3f} s (median of 3)")
    print(f"ratio whole / one kernel: {whole / one:.0f}x")


if __name__ == "__main__":
    main()
