"""The production-kernel corpus (fixtures/corpus): 2,531 function names of sm_90 cubins from
sgl-kernel, vLLM, xformers, bitsandbytes and a Triton kernel. Every name demangles as
`llvm-cxxfilt` 14 printed it (kernel_names.demangled.txt, recorded by
fixtures/builder/fetch_corpus.py, so the tool is not needed here) but for the three
documented kinds of name where we print what cuda-gdb prints, and every shorter form of
every name stays bounded and never raises.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from postmortem.cubin.inspect import summarize_cubin
from postmortem.cubin.nvinfo import read_kernel_info
from postmortem.demangle import (
    SHORT_NAME_LIMIT,
    base_name,
    collapse_templates,
    demangle,
    demanglers,
    normalize_name,
    parameter_types,
    short_name,
)
from tests.tooling import in_ci

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"


def _function_address(name: str, ours: str, reference: str) -> bool:
    # libstdc++ prints `&ns::f` for a non-template function's address, LLVM `&(ns::f(int))`;
    # and LLVM 14 reads a `T_` of that function's own encoding, reused later in the name, in
    # the kernel's scope: `(float::Params)` for `(cutlass_like::gemm::kernel::Gemm<…>::Params)`,
    # `act_and_mul_kernel<__half, &(float gelu<float>(float const&))>(float*, …)` for `__half*`.
    # We print what cuda-gdb prints (and, in the second case, what the name means).
    return "XadL_Z" in name


def _lambda(name: str, ours: str, reference: str) -> bool:
    # libstdc++ names a closure `{lambda(int, auto:1 const&)#1}` and its enclosing function
    # without a return type; LLVM prints `'lambda'(int, auto const&)` after the return type.
    return "{lambda(" in ours and "'lambda" in reference


def _expression(name: str, ours: str, reference: str) -> bool:
    # libstdc++ prints an expression argument without spaces, `((0)==(0))||(!x)`; LLVM with
    # spaces and parentheses, `((0) == (0)) || (!(x))`: the same but for those.
    return re.sub(r"[\s()]", "", ours) == re.sub(r"[\s()]", "", reference)


DIFFERENCES = {
    "function address": (_function_address, 145),
    "lambda": (_lambda, 154),
    "expression": (_expression, 12),
}
"""The kinds of corpus name whose demangling differs from the reference: how each is
recognised, and how many corpus names are of it. (The reference's `$` convention is ours: a
`$`-joined name was demangled part by part.)"""


def _corpus() -> tuple[str, list[tuple[str, str]]]:
    names = (CORPUS / "kernel_names.txt").read_text().splitlines()
    header, *shown = (CORPUS / "kernel_names.demangled.txt").read_text().splitlines()
    pairs = zip(names, shown, strict=True)
    return header, [(name, text) for name, text in pairs if not name.startswith("#")]


HEADER, NAMES = _corpus()
KERNELS = [(name, text) for name, text in NAMES if not name.startswith("$")]
"""The names that may be kernels: a `$`-joined name is a device function's."""


def test_the_corpus_holds_each_name_once_from_four_wheels_and_triton():
    # GIVEN the names and their `# source:` blocks
    sources = [
        line.split()[2]
        for line in (CORPUS / "kernel_names.txt").read_text().splitlines()
        if line.startswith("# source:")
    ]
    # THEN
    assert {"sgl-kernel", "vllm", "xformers", "bitsandbytes", "triton"} <= set(sources)
    assert len(NAMES) == 2531
    assert len({name for name, _ in NAMES}) == len(NAMES)
    assert (CORPUS / "kernel_names.txt").stat().st_size < 3_000_000
    assert HEADER.startswith("# reference: llvm-cxxfilt (Debian LLVM version 14.")


def test_every_corpus_name_demangles_as_llvm_cxxfilt_prints_it():
    if "llvm 14" not in demanglers():
        why = f"LLVM 14's demangler (libLLVM-14.so.1, Debian's libllvm14) is absent: {demanglers()}"
        if in_ci():
            pytest.fail(f"CI=true and {why}")
        pytest.skip(why)
    # WHEN each name that differs is put in the first kind it is of
    kinds: dict[str, int] = dict.fromkeys(DIFFERENCES, 0)
    unexplained = []
    for name, text in NAMES:
        ours = demangle(name)
        if ours == text:
            continue
        kind = next((k for k, (test, _) in DIFFERENCES.items() if test(name, ours, text)), None)
        if kind is None:
            unexplained.append(name)
        else:
            kinds[kind] += 1
    # THEN every difference is of a documented kind, and the rest equal the reference: 2,220
    assert unexplained == []
    assert kinds == {kind: count for kind, (_, count) in DIFFERENCES.items()}
    assert len(NAMES) - sum(kinds.values()) == 2220


def test_an_empty_template_parameter_pack_prints_nothing():
    # `…Sm90TreeVisitorINS_12Sm90AccFetchEJEEE`: cpp_demangle printed `<…Sm90AccFetch, >`
    shown = demangle("_ZN7cutlass15Sm90TreeVisitorINS_12Sm90AccFetchEJEEE")
    assert shown == "cutlass::Sm90TreeVisitor<cutlass::Sm90AccFetch>"
    assert [name for name, _ in NAMES if re.search(r", [,>]|<, ", demangle(name))] == []


def test_the_shorter_forms_of_every_corpus_name_are_bounded_and_never_raise():
    for name, text in NAMES:
        shown = demangle(name)
        assert len(normalize_name(name)) <= len(shown), name
        assert 0 < len(base_name(name)) <= len(shown), name
        assert len(collapse_templates(text)) <= len(text), name


@pytest.fixture(scope="module")
def short_names():
    return {text: short_name(text) for _, text in NAMES}


def test_every_short_name_is_bounded_and_deterministic(short_names):
    assert max(len(shown) for shown in short_names.values()) == SHORT_NAME_LIMIT
    for text, shown in list(short_names.items())[::50]:
        assert short_name(text) == shown
        assert len(short_name(text, limit=40)) == min(len(shown), 40)


def test_short_names_tell_gemm_flash_attention_marlin_and_triton_kernels_apart(short_names):
    # GIVEN one kernel of each family, as the reference demangled it
    families = {
        "gemm": "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<",
        "fa3": "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<",
        "fp8": "void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<",
        "cutlass2": "void cutlass::Kernel2<cutlass::gemm::kernel::DefaultGemmWithVisitor<",
        "marlin": "void marlin_moe_wna16::Marlin<",
        "triton": "fused_moe_kernel",
    }
    # WHEN
    shown = {
        family: {short_names[text] for _, text in KERNELS if text.startswith(prefix)}
        for family, prefix in families.items()
    }
    # THEN every family has names, and no two families share a short name
    assert all(shown.values())
    for family, names in shown.items():
        for other, others in shown.items():
            assert family == other or not names & others, (family, other)
    assert shown["gemm"] == {"cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<…> >"}
    assert shown["fa3"] == {
        "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<…> > >"
    }


def test_the_corpus_count_of_distinct_short_names(short_names):
    # 2,151 distinct names (the `$`-joined device functions aside) give 269 short names: the
    # wrappers name their operator's template (GemmUniversal, FlashAttnFwdSm90), not its
    # tile shapes and types, which only the full name (and the signature's hash) tell apart.
    texts = {text for _, text in KERNELS}
    assert (len(texts), len({short_names[text] for text in texts})) == (2151, 269)


def test_the_committed_cubins_kernels_give_one_short_name_per_operator():
    # GIVEN the kernels of the committed cubins
    # (NCCL's and PyTorch's cubins are there for the hang and assert tests: their names stay
    # out of kernel_names.txt)
    kernels = {
        function.name
        for cubin in sorted((CORPUS / "cubins").glob("*.cubin"))
        if not cubin.name.startswith(("nccl-", "torch-"))
        for function in summarize_cubin(cubin.read_bytes()).kernels
    }
    texts = dict(NAMES)
    # WHEN
    shown = {short_name(texts[name]) for name in kernels}
    # THEN 26 kernels, four operators
    assert len(kernels) == 26
    assert shown == {
        "cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<…> >",
        "cutlass::device_kernel<cutlass::transform::kernel::SM90StructuredSparseCompressor<…> >",
        "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<…> > >",
        "fused_moe_kernel",
    }


def test_every_committed_cubin_kernel_has_as_many_parameter_types_as_its_nv_info_parameters():
    # GIVEN every kernel of the committed cubins, with its `.nv.info` parameter layout
    checked, unmangled = 0, []
    for cubin in sorted((CORPUS / "cubins").glob("*.cubin")):
        image = cubin.read_bytes()
        for function in summarize_cubin(image).kernels:
            info = read_kernel_info(image, function.name)
            # WHEN its demangled name's parameter list is split
            types = parameter_types(demangle(function.name))
            if types is None:
                unmangled.append(function.name)
                continue
            # THEN one type per parameter
            assert info is not None and len(types) == len(info.params), function.name
            checked += 1
    # (every kernel but the Triton one, whose name is not mangled)
    assert (checked, unmangled) == (61, ["fused_moe_kernel"])


def test_every_corpus_kernel_splits_as_the_reference_demangling_splits():
    # GIVEN each kernel name, demangled by us and by llvm-cxxfilt 14 (which print lambdas,
    # function addresses and expressions differently)
    split = 0
    for name, reference in KERNELS:
        ours = parameter_types(demangle(name))
        # THEN both split into the same number of types (or neither splits)
        theirs = parameter_types(reference)
        assert (ours is None, len(ours or ())) == (theirs is None, len(theirs or ())), name
        split += ours is not None
    # every kernel but two whose names are not mangled (Triton's, a libdevice helper)
    assert split == len(KERNELS) - 2
