"""The survey of a large header table: the rules of `survey.py`, applied with numpy over
whole columns (a full H100 dump holds 550,000 sections, nearly all registers and
predicates of lanes). `SmallSurvey` applies the same rules one section at a time; a test
holds the two to the same answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from postmortem.coredump import tables as t
from postmortem.coredump.survey import (
    IMAGES,
    READ_TO_END,
    STRUCTURAL,
    DamageKind,
    Survey,
    depth,
    keep_disjoint,
)
from postmortem.model import RowRef

Array = np.ndarray[Any, Any]


def kind_codes(section_types: Array) -> Array:
    """Each section's type as a small code (`tables.kind_code`), so that "is it one of
    these types" is one table lookup per section."""
    codes = section_types.astype(np.uint32) - np.uint32(t.SHT_LOUSER)  # wraps for the others
    codes[codes >= t.KIND_COUNT] = 0
    small: Array = codes.astype(np.uint8)
    return small


def of_types(codes: Array, section_types: Iterable[int]) -> Array:
    """Per section (given its `kind_codes`): is its type one of `section_types`?"""
    wanted = np.zeros(t.KIND_COUNT, dtype=bool)
    for section_type in section_types:
        wanted[t.kind_code(section_type)] = True
    selected: Array = wanted[codes]
    return selected


class BulkSurvey(Survey):
    """The survey over numpy columns (the per-section columns are numpy arrays)."""

    def _start(self) -> None:
        s = self._s
        count = s.count
        self.usable = np.zeros(count, dtype=bool)
        self.rows = np.zeros(count, dtype=np.int64)
        self.size = np.zeros(count, dtype=np.int64)
        self.is_root_image = np.zeros(count, dtype=bool)
        self.kinds = kind_codes(s.type)
        # The sections grouped by type (a stable sort keeps file order within a type): each
        # pass over one type is a slice, not a comparison of every section header.
        self._by_kind = np.argsort(self.kinds, kind="stable")
        self._kind_starts = np.concatenate(
            [[0], np.cumsum(np.bincount(self.kinds, minlength=t.KIND_COUNT))]
        ).tolist()
        self._children_index: dict[int, tuple[Array, Array]] = {}

    # -- queries ------------------------------------------------------------------------

    def members(self, section_type: int) -> Array:
        code = t.kind_code(section_type)
        if not code:  # not one of ours: compare every header
            found: Array = np.flatnonzero(self._s.type == section_type)
            return found
        start, end = self._kind_starts[code], self._kind_starts[code + 1]
        grouped: Array = self._by_kind[start:end]
        return grouped

    def usable_of(self, section_type: int) -> Array:
        members = self.members(section_type)
        usable: Array = members[self.usable[members]]
        return usable

    def attached_of(self, section_type: int) -> Array:
        members = self.usable_of(section_type)
        attached: Array = members[~self.is_root_image[members]]
        return attached

    def row_total(self, section_type: int) -> int:
        return int(np.sum(self.rows[self.usable_of(section_type)]))

    def kind_counts(self) -> list[int]:
        counts: list[int] = np.bincount(self.kinds, minlength=t.KIND_COUNT).tolist()
        return counts

    def children(self, parent: RowRef, child_type: int) -> list[int]:
        keys, members = self._children_of(child_type)
        key = np.uint64((parent.section << 32) | parent.row)
        lo, hi = np.searchsorted(keys, key, "left"), np.searchsorted(keys, key, "right")
        return [int(section) for section in members[lo:hi]]

    def first_children(self, parents: Sequence[RowRef], child_type: int) -> list[int | None]:
        # One search for all: the register tables of 135,000 faulting lanes.
        keys, members = self._children_of(child_type)
        if not len(keys):
            return [None] * len(parents)
        wanted = np.fromiter(
            ((p.section << 32) | p.row for p in parents), dtype=np.uint64, count=len(parents)
        )
        at = np.minimum(np.searchsorted(keys, wanted, "left"), len(keys) - 1)
        firsts = np.where(keys[at] == wanted, members[at], -1).tolist()
        return [None if section < 0 else section for section in firsts]

    def _children_of(self, child_type: int) -> tuple[Array, Array]:
        """Sections of `child_type` sorted by the (section, row) key of the row each hangs
        from, with those keys (a stable sort keeps file order among siblings)."""
        index = self._children_index.get(child_type)
        if index is None:
            members = self.attached_of(child_type)
            s = self._s
            keys = (s.link[members].astype(np.uint64) << np.uint64(32)) | (
                s.info[members].astype(np.uint64)
            )
            order = np.argsort(keys, kind="stable")
            index = (keys[order], members[order])
            self._children_index[child_type] = index
        return index

    # -- passes (every section of a kind at once) -----------------------------------------

    def _survey_tables(self) -> None:
        s = self._s
        end = np.uint64(s.buffer_size)
        for section_type, layout in t.LAYOUTS.items():
            tables = self.members(section_type)
            if not len(tables):
                continue
            stride, size, present = s.entsize[tables], s.size[tables], s.in_file[tables]
            strides = np.maximum(stride, 1)
            bad = (stride == 0) | (size % strides != 0)
            self._note(DamageKind.BAD_STRIDE, tables[bad].tolist(), self._stride_words)
            outside = ~bad & (s.offset[tables] >= end) & (size > 0)
            self._note(DamageKind.OUTSIDE_FILE, tables[outside].tolist(), self._outside_words)
            ok = ~bad & ~outside
            whole = present // strides
            cut = ok & (whole < size // strides)
            self._note(DamageKind.TRUNCATED, tables[cut].tolist(), self._cut_words)
            many = ok & (whole > layout.max_rows)
            self._note(DamageKind.TOO_MANY_ROWS, tables[many].tolist(), self._rows_words)
            # At most max_rows rows of at most the file's bytes: these fit an int64.
            rows = np.minimum(whole, layout.max_rows).astype(np.int64)
            self.usable[tables[ok]] = True
            self.rows[tables[ok]] = rows[ok]
            self.size[tables[ok]] = rows[ok] * stride[ok].astype(np.int64)

    def _survey_leaves(self) -> None:
        # Over every header at once, masked: the leaves are nearly all of a full dump's
        # sections (registers and predicates per lane), so gathering them first costs more.
        s = self._s
        leaf = (self.kinds != 0) & ~of_types(self.kinds, t.LAYOUTS)
        size, present = s.size, s.in_file
        outside = leaf & (size > 0) & (s.offset >= np.uint64(s.buffer_size))
        self._note(DamageKind.OUTSIDE_FILE, np.flatnonzero(outside).tolist(), self._outside_words)
        cut = leaf & ~outside & (present < size)
        to_end = cut & of_types(self.kinds, READ_TO_END)
        self._note(DamageKind.TRUNCATED, np.flatnonzero(cut).tolist(), self._cut_words)
        ok = leaf & ~outside & (~cut | to_end)
        self.usable |= ok
        self.size = np.where(ok, present.astype(np.int64), self.size)

    def _reject_overlaps(self) -> None:
        # A dump with no overlap (every real one) costs one sort.
        s = self._s
        structural = of_types(self.kinds, STRUCTURAL)
        members = np.flatnonzero(structural & self.usable & (self.size > 0))
        if len(members) < 2:
            return
        # Usable, with bytes: each starts inside the file.
        start = s.offset[members].astype(np.int64)
        order = np.argsort(start, kind="stable")
        members, start = members[order], start[order]
        end = start + self.size[members]
        reach = np.maximum.accumulate(end)
        clash = np.zeros(len(members), dtype=bool)
        clash[1:] = start[1:] < reach[:-1]
        if not clash.any():
            return
        # Runs of mutually reachable sections; only those are sorted out one by one.
        involved = clash.copy()
        involved[:-1] |= clash[1:]
        lost = keep_disjoint(
            members[involved].tolist(), start[involved].tolist(), end[involved].tolist()
        )
        self._note(DamageKind.OVERLAP, lost, self._overlap_words)
        self.usable[lost] = False
        self.rows[lost] = 0

    def _follow_links(self) -> None:
        s = self._s
        for child_type in sorted(t.PARENT_TYPE, key=depth):
            parent_type = t.PARENT_TYPE[child_type]
            members = self.usable_of(child_type)
            if not len(members):
                continue
            link = s.link[members].astype(np.int64)
            in_range = link < s.count
            safe = np.where(in_range, link, 0)
            right_type = in_range & (s.type[safe] == parent_type)
            parent_ok = right_type & self.usable[safe]
            row = s.info[members]
            row_ok = parent_ok & (row < self.rows[safe])
            # A row past those read, but inside what the table claims, was lost with the
            # table's cut end (or its excess rows): an orphan, not a bad link. Only rows
            # past those read are asked (in a whole dump, none).
            lost_row = parent_ok & ~row_ok
            if lost_row.any():
                past = safe[lost_row]
                claimed = s.size[past] // np.maximum(s.entsize[past], 1)
                lost_row[lost_row] = row[lost_row].astype(np.uint64) < claimed
            broken = members[~right_type | (parent_ok & ~row_ok & ~lost_row)]
            orphans = members[(right_type & ~parent_ok) | lost_row]
            if child_type in IMAGES:
                self._keep_as_root(members[~row_ok])
                continue
            self._note(DamageKind.BAD_LINK, broken.tolist(), self._link_words)
            self._note(DamageKind.ORPHANED, orphans.tolist(), self._orphan_words)
            self.usable[members[~row_ok]] = False
            self.rows[members[~row_ok]] = 0

    def _keep_as_root(self, images: Array) -> None:
        if not len(images):
            return
        self.root_images.extend(images.tolist())
        self.is_root_image[images] = True
        self._note(DamageKind.ROOT_IMAGE, images.tolist(), self._link_words)
