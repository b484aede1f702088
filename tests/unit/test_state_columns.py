"""Each warp's lane PCs, read as column gathers, are what its rows decoded one by one say:
for every fixture dump, read as a small dump and in bulk, and for mutants of them."""

from __future__ import annotations

from collections import Counter

import pytest

from postmortem import elf
from postmortem.analysis.state import WarpPcs, warp_pcs
from postmortem.coredump import open_coredump
from postmortem.coredump import tables as t
from postmortem.coredump.rows import make_cta, make_sm, make_warp
from postmortem.errors import PostmortemError
from tests.conftest import FIXTURES, dump_paths
from tests.fuzz.mutant import NotApplicable, build, dump_names

_NO_LANE_ID = 0xFFFFFFFF
FOREIGN = sorted((FIXTURES / "foreign").glob("*.nvcudmp"))


def _by_rows(core):
    """The warps as the rows say them, one row and one lane at a time."""
    index = core.tables
    lanes: dict[int, Counter] = {}
    faulting: dict[int, Counter] = {}
    for table in index.of_type(t.LN_TABLE):
        table = int(table)
        if int(index.sections.entsize[table]) < t.LAYOUTS[t.LN_TABLE].field("phys_pc").end:
            continue
        ref = index.parent_of(table)
        cta_ref = index.parent_of(ref.section)
        sm_ref = index.parent_of(cta_ref.section)
        device = index.parent_of(sm_ref.section).row
        sm = make_sm(index.rows(sm_ref.section, t.SM_TABLE)[sm_ref.row], device, sm_ref,
                     core.string)  # fmt: skip
        cta = make_cta(index.rows(cta_ref.section, t.CTA_TABLE)[cta_ref.row], sm, cta_ref)
        warp = make_warp(index.rows(ref.section, t.WP_TABLE)[ref.row], cta, ref, core.string)
        mask = warp.valid_lanes_mask
        for row in index.rows(table, t.LN_TABLE):
            # A lane id of 0xFFFFFFFF reads as a row too short to hold one (warp_pcs's mark).
            lane = row.get("ln", _NO_LANE_ID)
            if lane != _NO_LANE_ID and (lane >= 32 or (mask is not None and not mask >> lane & 1)):
                continue
            lanes.setdefault(table, Counter())[row["phys_pc"]] += 1
            if row.get("exception", 0):
                faulting.setdefault(table, Counter())[row["phys_pc"]] += 1
        if table in lanes:
            yield WarpPcs(
                warp.device_index, warp.grid_id, warp.block_idx, warp.sm_id, warp.warp_id,
                tuple(sorted(lanes[table].items(), key=lambda item: (-item[1], item[0]))),
                tuple(sorted(faulting.get(table, Counter()).items())),
                warp.barrier_scope, warp.additional_barrier_info,
            )  # fmt: skip


def _both_ways(monkeypatch, path):
    said = []
    for small_table in (elf.SMALL_TABLE, 0):
        with monkeypatch.context() as patch:
            patch.setattr(elf, "SMALL_TABLE", small_table)
            try:
                with open_coredump(path) as core:
                    assert core.sections.bulk is (small_table == 0)
                    said.append((warp_pcs(core), tuple(_by_rows(core)), core.string_problems))
            except PostmortemError as error:
                said.append(str(error))
    return said


@pytest.mark.parametrize("path", dump_paths() + FOREIGN, ids=lambda p: p.name)
def test_warp_pcs_are_what_the_rows_say_read_either_way(path, monkeypatch):
    small, bulk = _both_ways(monkeypatch, path)
    assert small == bulk
    if not isinstance(small, str):
        gathered, decoded, _ = small
        assert gathered == decoded


@pytest.mark.parametrize(
    "mutator",
    ["shdr_link", "shdr_info", "shdr_entsize", "shdr_size", "link_cycle", "row_fields",
     "row_pcs", "row_exceptions", "row_counts"],
)  # fmt: skip
def test_warp_pcs_of_mutants_are_what_the_rows_say(mutator, monkeypatch, tmp_path):
    compared = 0
    for dump in dump_names()[::2]:
        for seed in range(2):
            try:
                mutant = build(dump, mutator, seed)
            except NotApplicable:
                continue
            path = tmp_path / f"{dump}-{seed}.nvcudmp"
            mutant.write(path)
            small, bulk = _both_ways(monkeypatch, path)
            assert small == bulk, (dump, seed)
            if not isinstance(small, str):
                assert small[0] == small[1], (dump, seed)
            compared += 1
    assert compared
