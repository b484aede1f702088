"""Kernel names: demangled (also when the driver joined several with `$`), and shortened:
for headings with every outermost template argument list collapsed to `<…>`, for signatures
to `<>` with the parameters and the return type gone, and to the function's base name."""

from __future__ import annotations

import pytest

from postmortem.demangle import (
    ELLIPSIS,
    base_name,
    collapse_templates,
    demangle,
    normalize_name,
    parameter_types,
    short_name,
    without_parameters,
)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("$_Z1av$_Z1bv", "a() $ b()"),
        (
            "$_Z17scatter_survivorsPfi$_Z10write_slotPfi",
            "scatter_survivors(float*, int) $ write_slot(float*, int)",
        ),
        ("_Z1av$_Z1bv", "a() $ b()"),
        ("_Z1av$helper", "a() $ helper"),
        ("$_Z1av$", "a()"),
    ],
)
def test_a_dollar_joined_name_is_demangled_part_by_part(name, shown):
    assert demangle(name) == shown


def test_a_dollar_inside_one_mangled_identifier_stays_in_it():
    # GCC accepts `$` in identifiers: `_Z3a$bv` is one function, `a$b()`
    assert demangle("_Z3a$bv") == "a$b()"


@pytest.mark.parametrize(
    "name", ["$__internal_1_$__cuda_sm20_rcp_rn_f64_full", "$a$b", "$", "plain_c_kernel"]
)
def test_a_name_with_no_mangled_part_is_left_as_it_is(name):
    assert demangle(name) == name


def test_a_single_mangled_name_demangles_as_before():
    assert demangle("_Z10oob_kernelPfif") == "oob_kernel(float*, int, float)"


def test_each_joined_part_loses_its_own_parameters():
    shown = demangle("$_Z17scatter_survivorsPfi$_Z10write_slotPfi")
    assert without_parameters(shown) == "scatter_survivors $ write_slot"
    assert without_parameters("void ns::k<int>(float*, int)") == "ns::k<int>"


@pytest.mark.parametrize(
    ("name", "short"),
    [
        # a method's qualifiers go with its parameters
        ("ns::Foo<int>::operator()(int) const", "ns::Foo<int>::operator()"),
        ("void f() const volatile", "f"),
        # parentheses that are the name, not a parameter list
        ("(anonymous namespace)", "(anonymous namespace)"),
        ("ns::Foo::operator()", "ns::Foo::operator()"),
        ("void (anonymous namespace)::k<int>(int*)", "(anonymous namespace)::k<int>"),
    ],
)
def test_parameters_go_and_the_name_stays(name, short):
    assert without_parameters(name) == short


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void ns::k<ns::T<4>, 8>(ns::T<4>::Params)",
            "void ns::k<…>(ns::T<…>::Params)",
        ),
        (
            "cutlass_like::device_kernel<cutlass_like::gemm::kernel::Gemm<cutlass_like::"
            "GemmShape<128, 128, 8>, cutlass_like::epilogue::Epilogue<cutlass_like::epilogue::"
            "LinearCombination<float, &(float cutlass_like::epilogue::relu<float>(float))>, "
            "cutlass_like::epilogue::PredicatedTileIterator<float, 4> > > >+0x860",
            "cutlass_like::device_kernel<…>+0x860",
        ),
        ("oob_kernel(float*, int, float)", "oob_kernel(float*, int, float)"),
        ("ns::Vec::operator<<(int)", "ns::Vec::operator<<(int)"),
        ("ns::operator< <int>(ns::V<int> const&)", "ns::operator< <…>(ns::V<…> const&)"),
        ("ns::Ptr<int>::operator->()", "ns::Ptr<…>::operator->()"),
        ("k<decltype(p->x)>(int)", "k<…>(int)"),
        ("a() $ b<int>()", "a() $ b<…>()"),
    ],
)
def test_template_argument_lists_collapse_to_an_ellipsis(name, short):
    assert collapse_templates(name) == short


def _cutlass_like(length):
    """A kernel name of at least `length` characters, template arguments nested ten deep."""
    shape = "cutlass::gemm::GemmShape<128, 128, 64>"
    inner = shape
    for depth in range(10):
        inner = f"cutlass::layer{depth}::Stage<{inner}, cute::tuple<cute::C<{depth}>, {shape}>>"
    arguments = ", ".join([inner] * -(-length // len(inner)))
    return (
        f"void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<{arguments}>>("
        "cutlass::gemm::kernel::GemmUniversal<cutlass::Params>::Params)"
    )


# name: (short form for headings, normalized form for signatures, base name). Where the
# copies this replaced disagreed, the answer chosen is here: an operator's `<`, `>` or `->`
# and the arrow in `decltype(p->x)` open and close no list; the normalized form keeps the
# space the demangler puts between an operator and its own template list (`operator< <>`,
# not `operator<<>`); a name whose brackets do not pair is kept whole in every form; the
# base name of a `$`-joined name is its last part's (the parts before it name its scope),
# with no return type or method qualifiers left.
SHORT_FORMS = [
    ("ns::operator< <int>(ns::V<int> const&)",
     ("ns::operator< <…>(ns::V<…> const&)", "ns::operator< <>", "operator<")),
    ("bool ns::operator<(ns::V const&, ns::V const&)",
     ("bool ns::operator<(ns::V const&, ns::V const&)", "ns::operator<", "operator<")),
    ("bool operator==(ns::A const&, ns::A const&)",
     ("bool operator==(ns::A const&, ns::A const&)", "operator==", "operator==")),
    ("ns::Vec::operator<<(int)",
     ("ns::Vec::operator<<(int)", "ns::Vec::operator<<", "operator<<")),
    ("int ns::operator<<(int, int)",
     ("int ns::operator<<(int, int)", "ns::operator<<", "operator<<")),
    ("ns::operator<< <int>(int)", ("ns::operator<< <…>(int)", "ns::operator<< <>", "operator<<")),
    ("ns::Ptr<int>::operator->()",
     ("ns::Ptr<…>::operator->()", "ns::Ptr<>::operator->", "operator->")),
    ("k<&ns::Ptr<int>::operator-> >(int)", ("k<…>(int)", "k<>", "k")),
    ("k<decltype(p->x)>(int)", ("k<…>(int)", "k<>", "k")),
    ("ns::Foo<int>::operator()(int) const",
     ("ns::Foo<…>::operator()(int) const", "ns::Foo<>::operator()", "operator()")),
    ("operator new(unsigned long)",
     ("operator new(unsigned long)", "operator new", "operator new")),
    ("void ns::k<ns::T<4>, 8>(ns::T<4>::Params)",
     ("void ns::k<…>(ns::T<…>::Params)", "ns::k<>", "k")),
    ("void a::Kernel<a::Gemm<a::Shape<128, 128, 8>, a::Epi<float>>>(a::Params)",
     ("void a::Kernel<…>(a::Params)", "a::Kernel<>", "Kernel")),
    ("void k<&(float relu<float>(float))>(float*)", ("void k<…>(float*)", "k<>", "k")),
    ("broken<int", ("broken<int", "broken<int", "broken<int")),
    ("broken>int", ("broken>int", "broken>int", "broken>int")),
    ("a<b>>c", ("a<b>>c", "a<b>>c", "a<b>>c")),
    ("void (anonymous namespace)::k<int>(int*)",
     ("void (anonymous namespace)::k<…>(int*)", "(anonymous namespace)::k<>", "k")),
    ("(anonymous namespace)",
     ("(anonymous namespace)", "(anonymous namespace)", "(anonymous namespace)")),
    ("void ns::f<int>(int)::{lambda(int)#1}::operator()(int) const",
     ("void ns::f<…>(int)::{lambda(int)#1}::operator()(int) const",
      "ns::f<>(int)::{lambda(int)#1}::operator()", "operator()")),
    ("void ns::k<ns::f()::{lambda(int, float)#1}>(int)", ("void ns::k<…>(int)", "ns::k<>", "k")),
    ("ns::g()::{lambda(ns::T const&)#2}",
     ("ns::g()::{lambda(ns::T const&)#2}", "ns::g()::{lambda(ns::T const&)#2}",
      "{lambda(ns::T const&)#2}")),
    ("a(int) $ b<int>()", ("a(int) $ b<…>()", "b<>", "b")),
    ("stencil_kernel(float const*, float*, int) $ tile",
     ("stencil_kernel(float const*, float*, int) $ tile", "tile", "tile")),
    ("float relu<float>(float)", ("float relu<…>(float)", "relu<>", "relu")),
    ("oob_kernel", ("oob_kernel", "oob_kernel", "oob_kernel")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "forms"), SHORT_FORMS, ids=lambda v: str(v)[:40])
def test_every_short_form_reads_brackets_alike(name, forms):
    assert (collapse_templates(name), normalize_name(name), base_name(name)) == forms


def test_a_5000_character_cutlass_name_shortens_to_its_outer_name():
    # GIVEN a CUTLASS-like name of 5,000 characters
    name = _cutlass_like(5000)
    assert len(name) >= 5000
    # WHEN shortened THEN only the outermost names are left, in every form
    shown = "void cutlass::device_kernel<…>(cutlass::gemm::kernel::GemmUniversal<…>::Params)"
    forms = (shown, "cutlass::device_kernel<>", "device_kernel")
    assert (collapse_templates(name), normalize_name(name), base_name(name)) == forms
    assert without_parameters(name) == name[len("void ") : name.rindex("(")]


@pytest.mark.parametrize(
    ("mangled", "normalized", "base"),
    [
        ("_Z10oob_kernelPfif", "oob_kernel", "oob_kernel"),
        ("_ZN4html6renderINS_6scriptENS_3imgEXadL_ZNS_7onerrorEfEEEEvPfif",
         "html::render<>", "render"),
        ("_ZN2pm5storeIfEEvPT_iS1_", "pm::store<>", "store"),
        ("_ZN12cutlass_like4arch12global_storeINS_12AlignedArrayIfLi4EEELi16EEC1ERKS3_Pvb",
         "cutlass_like::arch::global_store<>::global_store", "global_store"),
        ("_ZNK12cutlass_like8epilogue17LinearCombinationIfXadL_ZNS0_4reluIfEET_S3_EEEclEff",
         "cutlass_like::epilogue::LinearCombination<>::operator()", "operator()"),
    ],
)  # fmt: skip
def test_a_mangled_name_is_demangled_first(mangled, normalized, base):
    assert (normalize_name(mangled), base_name(mangled)) == (normalized, base)


def test_the_base_name_of_a_mangled_dollar_joined_name_is_its_last_parts():
    # GIVEN a `__shared__` array of a kernel, as the symbol table names it
    name = "$_Z14stencil_kernelPKfPfi$tile"
    # THEN the signature keeps it whole (it is not one mangled name), the base name is `tile`
    assert (normalize_name(name), base_name(name)) == (name, "tile")


def test_the_native_demangler_reads_function_pointer_arguments_as_cplusplus_filt_does():
    # GIVEN a template argument that is a function pointer (where cpp_demangle differs)
    name = "_Z1kIXadL_Z4reluIfET_S0_EEEvv"
    # WHEN demangled
    shown = demangle(name)
    # THEN libstdc++'s __cxa_demangle answered, as `c++filt` prints it (the fallback shows
    # `&float relu<float>(relu)`, without the parentheses)
    assert shown == "void k<&(float relu<float>(relu))>()"


@pytest.mark.parametrize("name", ["_Z", "_Zfoo", "_Z1", "_Z" + "N" * 5000])
def test_a_name_the_demangler_rejects_is_left_as_it_is(name):
    assert demangle(name) == name


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        # `JE` is an empty pack: as the last argument (cpp_demangle printed `<…AccFetch, >`),
        ("_ZN7cutlass15Sm90TreeVisitorINS_12Sm90AccFetchEJEEE",
         "cutlass::Sm90TreeVisitor<cutlass::Sm90AccFetch>"),
        # in the middle and first (libstdc++ prints `f<int, , int>` and `f<, int>`),
        ("_Z1fIiJEiEvv", "void f<int, int>()"),
        ("_Z1fIJEiEvv", "void f<int>()"),
        # and alone
        ("_ZN1AIJEE1fEv", "A<>::f()"),
    ],
)  # fmt: skip
def test_an_empty_template_parameter_pack_leaves_no_separator(name, shown):
    # as llvm-cxxfilt prints them
    assert demangle(name) == shown


@pytest.mark.parametrize(
    ("name", "short"),
    [
        # a wrapper keeps its identity argument, whose own arguments collapse
        (
            "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, "
            "int>, cutlass::Sm90TreeVisitor<cutlass::Sm90AccFetch> > >("
            "cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int> >::Params)",
            "cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<…> >",
        ),
        # nested wrappers are kept alike
        (
            "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
            "flash::CollectiveMainloopFwdSm90<2>, 128> > >(flash::Params)",
            "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<…> > >",
        ),
        # a wrapper's further arguments are elided, a plain identity kept whole
        ("void cutlass::Kernel2<Op, 4>(Op::Params)", "cutlass::Kernel2<Op, …>"),
        # a nested type of the identity stays (it is part of the identity)
        (
            "void cutlass::device_kernel<vllm::gemm_fp8<float, 4>::GemmKernel>(int)",
            "cutlass::device_kernel<vllm::gemm_fp8<…>::GemmKernel>",
        ),
        # anything else as collapse_templates shows it, parameters kept
        ("void ns::k<ns::T<4>, 8>(ns::T<4>::Params)", "void ns::k<…>(ns::T<…>::Params)"),
        # a name that only starts like a wrapper is not one
        ("void cutlass::device_kernel_v2<A<1> >(int)", "void cutlass::device_kernel_v2<…>(int)"),
        # each part of a `$`-joined name alone
        ("$_ZN7cutlass13device_kernelI2OpEEvv$_Z1fv", "cutlass::device_kernel<Op> $ f()"),
        ("fused_moe_kernel", "fused_moe_kernel"),
    ],
)
def test_short_name_keeps_a_wrapper_kernels_identity(name, short):
    assert short_name(name) == short


def test_a_short_name_over_the_limit_keeps_its_head_and_tail():
    # GIVEN a name of 300 characters that collapses to nothing shorter
    name = "void ns::" + "k" * 280 + "(int, float)"
    # WHEN shortened to 40
    shown = short_name(name, limit=40)
    # THEN 40 characters, an ellipsis in the middle
    assert len(shown) == 40
    assert shown == name[:20] + ELLIPSIS + name[-19:]
    assert short_name(name) == short_name(name) and len(short_name(name)) == 120


@pytest.mark.parametrize(
    ("name", "types"),
    [
        ("void k(float const*, int, hgemm::GemmProblem)",
         ("float const*", "int", "hgemm::GemmProblem")),
        # commas inside template arguments and a function pointer's own list split nothing
        ("void k<float, 4>(ns::P<int, 2>, void (*)(int, float), long)",
         ("ns::P<int, 2>", "void (*)(int, float)", "long")),
        # `(anonymous namespace)` in the name and in a type
        ("void (anonymous namespace)::k<(anonymous namespace)::T>((anonymous namespace)::P, int)",
         ("(anonymous namespace)::P", "int")),
        # CUDA's qualifier, as a name written out by hand shows it; restrict stays in the type
        ("void k(__grid_constant__ const Params, float* __restrict__)",
         ("const Params", "float* __restrict__")),
        # a template argument expression and an operator name
        ("void k<((0)==(0))||(!x)>(int, int)", ("int", "int")),
        ("F<int>::operator()(int, float) const", ("int", "float")),
        # no parameters
        ("void k()", ()),
        ("void k(void)", ()),
        # no parameter list, a `$`-joined name, a name cut short, brackets that do not pair
        ("fused_moe_kernel", None),
        ("a(int) $ b()", None),
        ("void k<…>(int)", None),
        ("cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<…> >", None),
        ("void k(int, ", None),
        ("void k(int, , int)", None),
        ("", None),
    ],
)  # fmt: skip
def test_parameter_types_split_the_list_at_its_own_commas(name, types):
    assert parameter_types(name) == types


def test_parameter_types_of_a_mangled_kernel_once_demangled():
    # k(float const*, int, hgemm::GemmProblem), as the compiler names it
    shown = demangle("_Z1kPKfiN5hgemm11GemmProblemE")
    assert parameter_types(shown) == ("float const*", "int", "hgemm::GemmProblem")
