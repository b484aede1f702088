"""Kernel names for people: demangled (also when the driver joined several with `$`), and
shortened for headings with every outermost template argument list collapsed to `<…>`."""

from __future__ import annotations

import pytest

from postmortem.demangle import collapse_templates, demangle, without_parameters


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


@pytest.mark.parametrize("name", ["broken<int", "broken>int", "a<b>>c"])
def test_a_name_whose_brackets_do_not_pair_up_is_kept_whole(name):
    assert collapse_templates(name) == name


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
