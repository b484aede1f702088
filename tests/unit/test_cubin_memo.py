"""The cubin memo: a scan worker decodes each cubin content once, and says the same of every
dump as if it had decoded each one's cubins anew; the memo stays within its bounds. The
rebased images (build and code keys) are remembered the same way."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from postmortem import open_coredump
from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fault.fault import LocalizeOptions, localize
from postmortem.analysis.fleet.signature import load_rules
from postmortem.codemap import CodeMap, CubinMemo
from postmortem.cubin import normalize
from postmortem.report.context import build_report
from postmortem.scan.work.lean import lean_analysis
from postmortem.scan.work.worker import WorkOptions, scan_dump
from postmortem.summary import summarize
from tests.conftest import DUMPS, FIXTURES, dump_paths

NATIVE = AnalyzeOptions(LocalizeOptions(nvdisasm=False), cuda_gdb=False)
CUBINS = sorted((FIXTURES / "cubins").glob("*.cubin"))


def _copies(tmp_path, name, count=2):
    """`count` copies of a fixture dump, each made distinct by a trailing byte."""
    paths = []
    for number in range(count):
        path = tmp_path / f"copy{number}-{name}"
        shutil.copyfile(DUMPS / name, path)
        with path.open("ab") as file:
            file.write(bytes([number]))
        paths.append(path)
    return paths


def _report(path, cubins):
    analysis, _ = lean_analysis(path, NATIVE, None, cubins)
    return build_report(dataclasses.replace(analysis, path=path.with_name("dump")))


@pytest.mark.parametrize("name", ["oob_store.nvcudmp", "cutlass_like.nvcudmp", "calls.nvcudmp"])
def test_two_copies_of_a_dump_read_the_same_with_and_without_the_memo(tmp_path, name):
    # GIVEN two copies of one dump, and a memo that has seen neither
    first, second = _copies(tmp_path, name)
    memo = CubinMemo()
    # WHEN each is analyzed for its row with the memo, and again without it
    remembered = [_report(first, memo), _report(second, memo)]
    anew = [_report(first, None), _report(second, None)]
    # THEN the second copy's cubins came from the memo, and nothing read differs
    assert memo.hits >= 1
    assert remembered == anew
    assert remembered[0] == remembered[1]


def test_scan_rows_of_two_copies_are_the_same_with_and_without_the_memo(tmp_path):
    paths = _copies(tmp_path, "device_assert.nvcudmp") + _copies(tmp_path, "oob_store.nvcudmp")
    options = WorkOptions(NATIVE, load_rules())
    remembered = [scan_dump(p, options) for p in paths]
    anew = [scan_dump(p, dataclasses.replace(options, remember_cubins=False)) for p in paths]

    def timeless(rows):
        return [dataclasses.replace(r, seconds=0.0) for r in rows]

    assert all(r.error is None for r in remembered)
    assert timeless(remembered) == timeless(anew)


@pytest.mark.parametrize("eager_bytes", [4 << 20, 0], ids=["hashed-first", "hashed-on-use"])
@pytest.mark.parametrize("path", dump_paths(), ids=lambda p: p.name)
def test_every_fixture_dump_maps_its_code_the_same_through_the_memo(path, eager_bytes):
    memo = CubinMemo(eager_bytes=eager_bytes)

    def read(cubins):
        with open_coredump(path) as core:
            code_map = CodeMap(core, cubins)
            summary = summarize(core, code_map)
            sites = localize(core, NATIVE.localize, code_map, summary.faults)
            modules = [loaded.module for loaded in code_map.modules()]
            facts = [
                (
                    code_map.image_bytes(m), code_map.toolkit(m),
                    code_map.line_table(m) is None, code_map.inline_tree(m) is None,
                )
                for m in modules
            ]  # fmt: skip
            return summary, sites, facts, code_map.unreadable, code_map.unreadable_lines

    assert read(memo) == read(None)
    assert read(memo) == read(None)  # the second time, from the memo
    assert memo.hits


def test_a_large_image_shares_its_decoded_facts_once_asked_for(tmp_path):
    # GIVEN a memo that hashes no image up front, and two copies of a dump
    memo = CubinMemo(eager_bytes=0)
    tables = []
    for path in _copies(tmp_path, "oob_store.nvcudmp"):
        with open_coredump(path) as core:
            code_map = CodeMap(core, memo)
            (loaded,) = code_map.modules()
            # WHEN each copy's line table is asked for
            tables.append(code_map.line_table(loaded.module))
    # THEN it was decoded once, for both dumps
    assert tables[0] is not None and tables[0] is tables[1]
    assert len(memo) == 1 and memo.hits == 1


def _distinct_images(count):
    """`count` readable cubins of distinct content: fixture cubins with a trailing byte."""
    base = [path.read_bytes() for path in CUBINS]
    return [base[n % len(base)] + bytes([n // len(base)]) for n in range(count)]


def test_the_memo_keeps_at_most_its_number_of_entries_dropping_the_oldest():
    # GIVEN a memo of four entries
    memo = CubinMemo(max_entries=4)
    images = _distinct_images(10)
    # WHEN ten distinct images go through it
    for image in images:
        memo.facts(image)
    # THEN it holds the last four, and the first must be decoded again
    assert len(memo) == 4
    assert memo.size_bytes == sum(len(i) for i in images[-4:])
    memo.facts(images[-1])
    assert memo.hits == 1
    memo.facts(images[0])
    assert memo.hits == 1 and len(memo) == 4


def test_the_memo_keeps_at_most_its_number_of_bytes():
    images = _distinct_images(12)
    bound = 3 * max(len(i) for i in images)
    memo = CubinMemo(max_entries=100, max_bytes=bound)
    for image in images:
        memo.facts(image)
        assert memo.size_bytes <= bound
    assert 0 < len(memo) < len(images)


def test_an_image_larger_than_the_memo_is_decoded_but_not_kept():
    (image,) = _distinct_images(1)
    memo = CubinMemo(max_bytes=len(image) - 1)
    facts = memo.facts(image)
    assert facts.summary.functions
    assert len(memo) == 0 and memo.size_bytes == 0


def test_a_recently_used_entry_outlives_older_ones():
    memo = CubinMemo(max_entries=2)
    a, b, c = _distinct_images(3)
    memo.facts(a)
    memo.facts(b)
    memo.facts(a)  # a is now the most recent: b goes first
    memo.facts(c)
    hits = memo.hits
    memo.facts(a)
    assert memo.hits == hits + 1
    memo.facts(b)
    assert memo.hits == hits + 1


def test_rebasing_remembered_images_gives_what_rebasing_anew_gives():
    # GIVEN the relocated images of fixture dumps (load addresses to take out)
    images = []
    for path in dump_paths()[:12]:
        with open_coredump(path) as core:
            code_map = CodeMap(core)
            images += [code_map.image_bytes(loaded.module) for loaded in code_map.modules()]
    assert images
    # THEN each rebases the same remembered (the second time from the memo) as anew
    for image in images:
        anew = normalize._rebase(image)
        assert normalize.rebase_to_zero(image) == anew
        assert normalize.rebase_to_zero(bytes(image)) == anew


def test_rebasing_remembers_a_bounded_number_of_small_images():
    normalize._rebase_remembered.cache_clear()
    images = _distinct_images(20)
    for image in images:
        normalize.rebase_to_zero(image)
    assert normalize._rebase_remembered.cache_info().currsize == 8
    # An image past the size bound is rebased, never remembered.
    large = images[0] + bytes(normalize.REMEMBERED_BYTES)
    assert normalize.rebase_to_zero(large) == normalize._rebase(large)
    info = normalize._rebase_remembered.cache_info()
    assert (info.currsize, info.misses) == (8, 20)
