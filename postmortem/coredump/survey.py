"""What of a dump is intact: the sections the reader may use, and what was lost.

Read the way the most tolerant reader reads: only an unreadable ELF header or section
header table is fatal (see `coredump/elf.py`). Everything else is surveyed once, in bulk,
when the dump is opened, and each section is either used (whole, or the part that holds
together) or set aside with a `Damage` record that says what it cost:

- a table is read up to its last whole row inside the file, and up to the most rows its
  kind can mean (`Layout.max_rows`); a stride of 0, a size that is not a whole number of
  rows, or bytes shared with another table (a table overlapping others many times over
  would multiply the work) set it aside;
- a section whose `sh_link`/`sh_info` do not name a usable row of the right table is set
  aside, and so is everything that hangs from it; an image with no usable module row is
  kept as a root-level image (other producers put relocated images at the root);
- a memory or parameter section cut by the end of the file is read up to the end; a cut
  register, predicate or image section is set aside.

Work is bounded by the bytes the file holds, never by what its headers claim.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from postmortem.coredump import tables as t
from postmortem.elf import SHT_NOBITS, Sections


class DamageKind(Enum):
    """Why sections were set aside or read only in part."""

    TRUNCATED = "truncated"
    """Cut by the end of the file: read up to the end, or set aside."""
    OUTSIDE_FILE = "outside-file"
    """Starts past the end of the file."""
    BAD_STRIDE = "bad-stride"
    """A table whose `sh_entsize` is 0, or whose size is not a whole number of rows."""
    TOO_MANY_ROWS = "too-many-rows"
    """A table claiming more rows than its kind can mean: only the first ones are read."""
    OVERLAP = "overlap"
    """A table or image sharing bytes with another one."""
    BAD_LINK = "bad-link"
    """`sh_link`/`sh_info` name no row of the table they must name."""
    ORPHANED = "orphaned"
    """Hangs from a row of a table that was set aside."""
    ROOT_IMAGE = "root-image"
    """An image with no usable module row, kept as a module of unknown context."""


# What a lost section of each kind costs the reader, in words.
_LOSS: dict[int, str] = {
    t.DEV_TABLE: "those devices and everything on them are unknown",
    t.CTX_TABLE: "those contexts and their modules are unknown",
    t.SM_TABLE: "those SMs and every block, warp and lane on them are unknown",
    t.GRID_TABLE: "those launches (grids) are unknown",
    t.MOD_TABLE: "those modules are unknown",
    t.CTA_TABLE: "those blocks and their warps and lanes are unknown",
    t.WP_TABLE: "those warps and their lanes are unknown",
    t.LN_TABLE: "those lanes (threads) are unknown",
    t.DEV_REGS: "the registers of those lanes are unknown",
    t.DEV_PRED: "the predicates of those lanes are unknown",
    t.DEV_UREGS: "the uniform registers of those warps are unknown",
    t.DEV_UPRED: "the uniform predicates of those warps are unknown",
    t.CBU_BAR: "the convergence barriers of those warps are unknown",
    t.BT: "the call stacks of those lanes are unknown",
    t.RELF_IMG: "the code of those modules is unknown (no kernel names, SASS or lines there)",
    t.ELF_IMG: "those non-relocated images are unknown",
    t.PARAM_MEM: "the kernel arguments of those launches are unknown",
    t.CB_TABLE: "the constant banks of those launches are unknown",
    t.GLOBAL_MEM: "that captured global memory is unknown",
    t.MANAGED_MEM: "that captured managed memory is unknown",
    t.SHARED_MEM: "that captured shared memory is unknown",
    t.LOCAL_MEM: "that captured local memory is unknown",
    t.META_DATA: "the dump's metadata is unknown",
}
# Leaves whose bytes mean something up to wherever the file ends.
_READ_TO_END = frozenset({t.GLOBAL_MEM, t.MANAGED_MEM, t.SHARED_MEM, t.LOCAL_MEM, t.PARAM_MEM})
_IMAGES = (t.ELF_IMG, t.RELF_IMG)


@dataclass(frozen=True, slots=True)
class Damage:
    """Sections of one kind set aside, or read only in part, for one reason."""

    kind: DamageKind
    section_type: int
    """The `sh_type` of the sections."""
    count: int
    """How many sections."""
    first: str
    """The first one's name (or `#index`)."""
    detail: str
    """What was wrong with the first one, with the numbers."""

    @property
    def type_name(self) -> str:
        return t.SECTION_TYPE_NAMES.get(self.section_type, f"type 0x{self.section_type:x}")

    @property
    def message(self) -> str:
        """One line: what was set aside, why, and what that costs."""
        what = f"{self.count:,} {self.type_name} section{'s' if self.count != 1 else ''}"
        where = f" (first: {self.first}: {self.detail})"
        reason = _REASON[self.kind][self.count != 1]
        if self.kind is DamageKind.ROOT_IMAGE:
            return (
                f"{what} {reason}, not under a module table{where}: read as modules of unknown "
                "device, context and handle"
            )
        loss = _LOSS.get(self.section_type, "their contents are unknown")
        if self.kind is DamageKind.TRUNCATED and self.section_type in _READ_TO_END:
            loss = "read up to the end of the file; the rest is unknown"
        if self.kind is DamageKind.TOO_MANY_ROWS:
            loss = "only the first rows were read"
        return f"partial dump: {what} {reason}{where}; {loss}"


# (one section, several sections)
_REASON = {
    DamageKind.TRUNCATED: ("cut short by the end of the file",) * 2,
    DamageKind.OUTSIDE_FILE: ("lies past the end of the file", "lie past the end of the file"),
    DamageKind.BAD_STRIDE: ("has an impossible row size", "have an impossible row size"),
    DamageKind.TOO_MANY_ROWS: (
        "claims more rows than such a table can hold",
        "claim more rows than such a table can hold",
    ),
    DamageKind.OVERLAP: ("overlaps other tables or images", "overlap other tables or images"),
    DamageKind.BAD_LINK: (
        "links to no row of the table it must hang from",
        "link to no row of the table they must hang from",
    ),
    DamageKind.ORPHANED: (
        "hangs from a row that was lost or set aside",
        "hang from rows that were lost or set aside",
    ),
    DamageKind.ROOT_IMAGE: ("sits at the root", "sit at the root"),
}


class Survey:
    """Per section: may it be used, how many rows or bytes of it; and the damage found."""

    def __init__(self, sections: Sections) -> None:
        self._s = sections
        count = sections.count
        self.usable = np.zeros(count, dtype=bool)
        """True for every section the reader may use."""
        self.rows = np.zeros(count, dtype=np.int64)
        """Rows of each usable table the reader decodes (0 for other sections)."""
        self.size = np.zeros(count, dtype=np.int64)
        """Bytes of each usable section the reader may read."""
        self.root_images = np.zeros(0, dtype=np.int64)
        """Image sections with no usable module row: modules of unknown context."""
        self.is_root_image = np.zeros(count, dtype=bool)
        """True for each of `root_images`."""
        self.kinds = t.kind_codes(sections.type)
        """Each section's type as a small code (see `tables.of_types`)."""
        # The sections grouped by type (a stable sort keeps file order within a type): each
        # pass over one type is a slice, not a comparison of every section header.
        self._by_kind = np.argsort(self.kinds, kind="stable")
        self._kind_starts = np.concatenate(
            [[0], np.cumsum(np.bincount(self.kinds, minlength=t.KIND_COUNT))]
        ).tolist()
        self._found: dict[tuple[DamageKind, int], list[tuple[int, str]]] = defaultdict(list)
        self._survey_tables()
        self._survey_leaves()
        self._reject_overlaps()
        self._follow_links()
        self.damage: tuple[Damage, ...] = self._damage()

    def members(self, section_type: int) -> np.ndarray[Any, Any]:
        """Every section of `section_type`, usable or not, in file order."""
        code = section_type - t.SHT_LOUSER
        if not 0 < code < t.KIND_COUNT:  # not one of ours: compare every header
            found: np.ndarray[Any, Any] = np.flatnonzero(self._s.type == section_type)
            return found
        start, end = self._kind_starts[code], self._kind_starts[code + 1]
        grouped: np.ndarray[Any, Any] = self._by_kind[start:end]
        return grouped

    # -- recording ----------------------------------------------------------------------

    def _note(self, kind: DamageKind, members: np.ndarray[Any, Any], detail: Any) -> None:
        """Record damage for `members`; `detail(index)` words the problem of one of them."""
        members = np.asarray(members, dtype=np.int64)
        for index in members.tolist():
            found = self._found[(kind, int(self._s.type[index]))]
            # Only the first section's words are shown; the rest are counted.
            found.append((index, detail(index) if not found else ""))

    def _damage(self) -> tuple[Damage, ...]:
        order = {kind: rank for rank, kind in enumerate(DamageKind)}
        found = sorted(self._found.items(), key=lambda item: (order[item[0][0]], item[0][1]))
        return tuple(
            Damage(kind, section_type, len(members), self._s.label(members[0][0]), members[0][1])
            for (kind, section_type), members in found
        )

    # -- passes --------------------------------------------------------------------------

    def _survey_tables(self) -> None:
        s = self._s
        for section_type, layout in t.LAYOUTS.items():
            tables = self.members(section_type)
            if not len(tables):
                continue
            stride = s.entsize[tables].astype(np.int64)
            size, present = s.size[tables], s.in_file[tables]
            strides = np.maximum(stride, 1).astype(np.uint64)
            bad = (stride <= 0) | (size % strides != 0)
            self._note(DamageKind.BAD_STRIDE, tables[bad], self._stride_words)
            outside = ~bad & (s.offset[tables] >= np.uint64(s.buffer_size)) & (size > 0)
            self._note(DamageKind.OUTSIDE_FILE, tables[outside], self._outside_words)
            ok = ~bad & ~outside
            whole = (present // strides).astype(np.int64)
            claimed = (size // strides).astype(np.int64)
            cut = ok & (whole < claimed)
            self._note(DamageKind.TRUNCATED, tables[cut], self._cut_words)
            many = ok & (whole > layout.max_rows)
            self._note(DamageKind.TOO_MANY_ROWS, tables[many], self._rows_words)
            rows = np.minimum(whole, layout.max_rows)
            self.usable[tables[ok]] = True
            self.rows[tables[ok]] = rows[ok]
            self.size[tables[ok]] = rows[ok] * stride[ok]

    def _survey_leaves(self) -> None:
        # Over every header at once, masked: the leaves are nearly all of a full dump's
        # sections (registers and predicates per lane), so gathering them first costs more.
        s = self._s
        leaf = (self.kinds != 0) & ~t.of_types(self.kinds, t.LAYOUTS)
        nobits = s.type == SHT_NOBITS
        size, present = s.size.astype(np.int64), s.in_file.astype(np.int64)
        outside = leaf & ~nobits & (size > 0) & (s.offset >= np.uint64(s.buffer_size))
        self._note(DamageKind.OUTSIDE_FILE, np.flatnonzero(outside), self._outside_words)
        cut = leaf & ~nobits & ~outside & (present < size)
        to_end = cut & t.of_types(self.kinds, _READ_TO_END)
        self._note(DamageKind.TRUNCATED, np.flatnonzero(cut), self._cut_words)
        ok = leaf & ~outside & (~cut | to_end)
        self.usable |= ok
        self.size = np.where(ok, np.where(nobits, 0, present), self.size)

    def _reject_overlaps(self) -> None:
        """Tables and images must not share bytes: a header table that points hundreds of
        tables at the same megabytes would multiply the reader's work.

        Where sections overlap, the smallest are kept first and any that would overlap a
        kept one are set aside, so one huge hostile table cannot push out the real ones
        it covers. A dump with no overlap (every real one) costs one sort.
        """
        s = self._s
        structural = t.of_types(self.kinds, [*t.LAYOUTS, *_IMAGES])
        members = np.flatnonzero(structural & self.usable & (self.size > 0))
        if len(members) < 2:
            return
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
        lost = _keep_disjoint(members[involved], start[involved], end[involved])
        self._note(DamageKind.OVERLAP, lost, self._overlap_words)
        self.usable[lost] = False
        self.rows[lost] = 0

    def _follow_links(self) -> None:
        """Parents before children: a section is usable only if its row is."""
        s = self._s
        for child_type in sorted(t.PARENT_TYPE, key=_depth):
            parent_type = t.PARENT_TYPE[child_type]
            members = self.members(child_type)
            members = members[self.usable[members]]
            if not len(members):
                continue
            link = s.link[members].astype(np.int64)
            in_range = link < s.count
            safe = np.where(in_range, link, 0)
            right_type = in_range & (s.type[safe] == parent_type)
            parent_ok = right_type & self.usable[safe]
            row = s.info[members].astype(np.int64)
            row_ok = parent_ok & (row < self.rows[safe])
            # A row past those read, but inside what the table claims, was lost with the
            # table's cut end (or its excess rows): an orphan, not a bad link.
            claimed = s.size[safe] // np.maximum(s.entsize[safe], 1)
            lost_row = parent_ok & ~row_ok & (row < claimed.astype(np.int64))
            broken = members[~right_type | (parent_ok & ~row_ok & ~lost_row)]
            orphans = members[(right_type & ~parent_ok) | lost_row]
            if child_type in _IMAGES:
                self._keep_as_root(members[~row_ok])
                continue
            self._note(DamageKind.BAD_LINK, broken, self._link_words)
            self._note(DamageKind.ORPHANED, orphans, self._orphan_words)
            self.usable[members[~row_ok]] = False
            self.rows[members[~row_ok]] = 0

    def _keep_as_root(self, images: np.ndarray[Any, Any]) -> None:
        if not len(images):
            return
        self.root_images = np.concatenate([self.root_images, images]).astype(np.int64)
        self.is_root_image[images] = True
        self._note(DamageKind.ROOT_IMAGE, images, self._link_words)

    # -- words ---------------------------------------------------------------------------

    def _stride_words(self, index: int) -> str:
        s = self._s
        return f"sh_entsize {int(s.entsize[index])}, sh_size {int(s.size[index]):,}"

    def _outside_words(self, index: int) -> str:
        s = self._s
        return f"starts at byte {int(s.offset[index]):,} of {s.buffer_size:,}"

    def _cut_words(self, index: int) -> str:
        s = self._s
        return f"{int(s.in_file[index]):,} of {int(s.size[index]):,} bytes in the file"

    def _rows_words(self, index: int) -> str:
        s = self._s
        rows = int(s.in_file[index]) // max(int(s.entsize[index]), 1)
        limit = t.LAYOUTS[int(s.type[index])].max_rows
        return f"{rows:,} rows; read {limit:,}"

    def _overlap_words(self, index: int) -> str:
        s = self._s
        end = int(s.offset[index]) + int(self.size[index])
        return f"bytes {int(s.offset[index]):,}-{end:,} are shared"

    def _link_words(self, index: int) -> str:
        s = self._s
        return f"sh_link {int(s.link[index])}, sh_info {int(s.info[index])}"

    def _orphan_words(self, index: int) -> str:
        s = self._s
        parent = int(s.link[index])
        if self.usable[parent]:
            return f"row {int(s.info[index])} of {s.label(parent)} was lost"
        return f"its parent {s.label(parent)} was set aside"


def _keep_disjoint(
    members: np.ndarray[Any, Any], start: np.ndarray[Any, Any], end: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """The members to set aside so that the rest are disjoint, keeping the smallest first."""
    kept_starts: list[int] = []
    kept_ends: list[int] = []
    lost = []
    for i in np.lexsort((start, end - start)).tolist():
        a, b = int(start[i]), int(end[i])
        at = bisect.bisect_right(kept_starts, a)
        if (at and kept_ends[at - 1] > a) or (at < len(kept_starts) and kept_starts[at] < b):
            lost.append(int(members[i]))
            continue
        kept_starts.insert(at, a)
        kept_ends.insert(at, b)
    return np.array(sorted(lost), dtype=np.int64)


def _depth(section_type: int) -> int:
    depth = 0
    while section_type in t.PARENT_TYPE:
        section_type, depth = t.PARENT_TYPE[section_type], depth + 1
    return depth
