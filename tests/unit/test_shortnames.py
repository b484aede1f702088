"""Prose that quotes long C++ names (a fault's headline) made short for a table cell."""

from __future__ import annotations

import time

from postmortem.report.shortnames import brief_text

GEMM = (
    "cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>"
    ", cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized"
    "<4, cute::tuple<cute::C<1>, cute::C<2>, cute::C<1> > >, void, void> > >"
)


def test_each_long_name_in_a_headline_is_short_and_the_words_stay():
    headline = f"Warp Illegal Address in cutlass::device_kernel<…> at {GEMM}+0x100: i < n"
    assert brief_text(headline) == (
        "Warp Illegal Address in cutlass::device_kernel<…> at "
        "cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<…> >+0x100: i < n"
    )


def test_a_short_text_and_a_short_name_are_left_as_they_are():
    assert brief_text("Warp Illegal Address in oob_kernel(float*, int, float)") == (
        "Warp Illegal Address in oob_kernel(float*, int, float)"
    )
    text = "x" * 120 + " in html::render<html::script, &html::onerror>(float*) at +0xd0"
    assert brief_text(text) == text


def test_a_name_whose_brackets_do_not_pair_up_is_left_whole():
    text = "assert i<n failed in a_kernel_named_at_length_" + "k" * 100
    assert brief_text(text) == text
    # AND a whole name inside one cut short is still made short
    assert brief_text("in " + GEMM[:-2]).endswith("::GemmUniversal<…>")


def _seconds(text: str) -> float:
    started = time.perf_counter()
    brief_text(text)
    return time.perf_counter() - started


def test_a_name_of_brackets_that_never_close_costs_what_paired_ones_do():
    # A kernel's name comes from the dump: 100,000 `<` never closed were once paired by a
    # scan from each of them to the end of the text (minutes); the pairs are made in one pass.
    unpaired, paired = "a<" * 100_000, "a<b>" * 50_000
    assert brief_text(unpaired) == unpaired
    assert _seconds(unpaired) < 20 * max(_seconds(paired), 1e-3)
