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

The rules are applied by one of two surveyors that must agree section for section (a test
runs both over every fixture dump and thousands of mutants): `SmallSurvey`, a pass of
plain Python per section, for a header table of up to `elf.SMALL_TABLE` sections, and
`BulkSurvey` (`survey_bulk.py`), numpy over whole columns, past it. `TableIndex` picks.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from postmortem.coredump import tables as t
from postmortem.elf import HeaderColumn, Sections
from postmortem.model import RowRef


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
READ_TO_END = frozenset({t.GLOBAL_MEM, t.MANAGED_MEM, t.SHARED_MEM, t.LOCAL_MEM, t.PARAM_MEM})
IMAGES = (t.ELF_IMG, t.RELF_IMG)
# Tables and images must not share bytes (see `Survey._reject_overlaps`).
STRUCTURAL = (*t.LAYOUTS, *IMAGES)


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
        if self.kind is DamageKind.TRUNCATED and self.section_type in READ_TO_END:
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


Detail = Callable[[int], str]


class Survey(ABC):
    """Per section: may it be used, how many rows or bytes of it; and the damage found.

    The per-section columns are indexed by section number; they are lists or numpy arrays,
    as the section header columns are (`Sections.bulk`). The queries below answer in
    plain values either way.
    """

    usable: HeaderColumn
    """True for every section the reader may use."""
    rows: HeaderColumn
    """Rows of each usable table the reader decodes (0 for other sections)."""
    size: HeaderColumn
    """Bytes of each usable section the reader may read."""
    is_root_image: HeaderColumn
    """True for each image section with no usable module row (a module of unknown context)."""
    kinds: HeaderColumn
    """Each section's type as a small code (`tables.kind_code`)."""

    def __init__(self, sections: Sections) -> None:
        self._s = sections
        self._found: dict[tuple[DamageKind, int], list[tuple[int, str]]] = defaultdict(list)
        self.root_images: list[int] = []
        """The image sections with no usable module row, in file order."""
        self._start()
        # The rules, in the order they depend on each other.
        self._survey_tables()
        self._survey_leaves()
        self._reject_overlaps()
        self._follow_links()
        self.damage: tuple[Damage, ...] = self._damage()

    # -- the passes (each surveyor applies them over its own columns) ---------------------

    @abstractmethod
    def _start(self) -> None:
        """Make the per-section columns, every section unusable until a pass says so."""

    @abstractmethod
    def _survey_tables(self) -> None:
        """Tables: a whole number of rows inside the file, at most `max_rows` of them."""

    @abstractmethod
    def _survey_leaves(self) -> None:
        """Leaves: inside the file; cut ones read to the end where that means something."""

    @abstractmethod
    def _reject_overlaps(self) -> None:
        """Tables and images must not share bytes: a header table that points hundreds of
        tables at the same megabytes would multiply the reader's work.

        Where sections overlap, the smallest are kept first and any that would overlap a
        kept one are set aside, so one huge hostile table cannot push out the real ones
        it covers.
        """

    @abstractmethod
    def _follow_links(self) -> None:
        """Parents before children: a section is usable only if its row is; an image
        without one is kept at the root."""

    # -- queries (each surveyor answers them over its own columns) ------------------------

    @abstractmethod
    def members(self, section_type: int) -> HeaderColumn:
        """Every section of `section_type`, usable or not, in file order."""

    @abstractmethod
    def usable_of(self, section_type: int) -> HeaderColumn:
        """Every usable section of `section_type`, in file order."""

    @abstractmethod
    def attached_of(self, section_type: int) -> HeaderColumn:
        """`usable_of`, less the root-level images (sections that hang from no row)."""

    @abstractmethod
    def row_total(self, section_type: int) -> int:
        """Usable rows in all tables of `section_type` together."""

    @abstractmethod
    def kind_counts(self) -> list[int]:
        """How many sections there are of each kind code (`tables.kind_code`)."""

    @abstractmethod
    def children(self, parent: RowRef, child_type: int) -> list[int]:
        """Usable sections of `child_type` whose sh_link/sh_info name `parent`, in file
        order (root-level images excepted)."""

    def first_children(self, parents: Sequence[RowRef], child_type: int) -> list[int | None]:
        """The first of `children` of each parent (None for one without), in one query."""
        found = (self.children(parent, child_type) for parent in parents)
        return [sections[0] if sections else None for sections in found]

    def table_ranges(self) -> list[tuple[int, int]]:
        """(offset, size) of the rows read from every usable table."""
        s = self._s
        return [
            (int(s.offset[section]), int(self.rows[section]) * int(s.entsize[section]))
            for section_type in t.LAYOUTS
            for section in self.usable_of(section_type)
        ]

    # -- recording ----------------------------------------------------------------------

    def _note(self, kind: DamageKind, members: Iterable[int], detail: Detail) -> None:
        """Record damage for `members`; `detail(index)` words the problem of one of them."""
        for index in members:
            found = self._found[(kind, int(self._s.type[index]))]
            # Only the first section's words are shown; the rest are counted.
            found.append((int(index), detail(int(index)) if not found else ""))

    def _damage(self) -> tuple[Damage, ...]:
        order = {kind: rank for rank, kind in enumerate(DamageKind)}
        found = sorted(self._found.items(), key=lambda item: (order[item[0][0]], item[0][1]))
        return tuple(
            Damage(kind, section_type, len(members), self._s.label(members[0][0]), members[0][1])
            for (kind, section_type), members in found
        )

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


class SmallSurvey(Survey):
    """The survey as a pass of plain Python per section: for a header table small enough
    that numpy's import would cost more than the whole survey."""

    def _start(self) -> None:
        s = self._s
        count = s.count
        self.usable = [False] * count
        self.rows = [0] * count
        self.size = [0] * count
        self.is_root_image = [False] * count
        self.kinds = [t.kind_code(section_type) for section_type in s.type]
        self._by_kind: dict[int, list[int]] = defaultdict(list)
        for index, code in enumerate(self.kinds):
            if code:
                self._by_kind[code].append(index)
        self._children: dict[int, dict[tuple[int, int], list[int]]] = {}

    # -- queries ------------------------------------------------------------------------

    def members(self, section_type: int) -> list[int]:
        code = t.kind_code(section_type)
        if not code:  # not one of ours: compare every header
            return [i for i, kind in enumerate(self._s.type) if kind == section_type]
        return self._by_kind.get(code, [])

    def usable_of(self, section_type: int) -> list[int]:
        return [i for i in self.members(section_type) if self.usable[i]]

    def attached_of(self, section_type: int) -> list[int]:
        return [i for i in self.usable_of(section_type) if not self.is_root_image[i]]

    def row_total(self, section_type: int) -> int:
        return sum(self.rows[i] for i in self.usable_of(section_type))

    def kind_counts(self) -> list[int]:
        counts = [0] * t.KIND_COUNT
        for code in self.kinds:
            counts[code] += 1
        return counts

    def children(self, parent: RowRef, child_type: int) -> list[int]:
        index = self._children.get(child_type)
        if index is None:
            index = defaultdict(list)
            s = self._s
            for section in self.attached_of(child_type):
                index[(s.link[section], s.info[section])].append(section)
            self._children[child_type] = index
        return list(index.get((parent.section, parent.row), ()))

    # -- passes (the rules, one section at a time) ----------------------------------------

    def _survey_tables(self) -> None:
        s = self._s
        for section_type, layout in t.LAYOUTS.items():
            for i in self.members(section_type):
                stride, size = s.entsize[i], s.size[i]
                if stride == 0 or size % stride:
                    self._note(DamageKind.BAD_STRIDE, [i], self._stride_words)
                    continue
                if size > 0 and s.offset[i] >= s.buffer_size:
                    self._note(DamageKind.OUTSIDE_FILE, [i], self._outside_words)
                    continue
                whole = s.in_file[i] // stride
                if whole < size // stride:
                    self._note(DamageKind.TRUNCATED, [i], self._cut_words)
                if whole > layout.max_rows:
                    self._note(DamageKind.TOO_MANY_ROWS, [i], self._rows_words)
                rows = min(whole, layout.max_rows)
                self.usable[i], self.rows[i], self.size[i] = True, rows, rows * stride

    def _survey_leaves(self) -> None:
        s = self._s
        tables = {t.kind_code(section_type) for section_type in t.LAYOUTS}
        to_end = {t.kind_code(section_type) for section_type in READ_TO_END}
        for code, members in sorted(self._by_kind.items()):
            if code in tables:
                continue
            for i in members:
                size, present = s.size[i], s.in_file[i]
                if size > 0 and s.offset[i] >= s.buffer_size:
                    self._note(DamageKind.OUTSIDE_FILE, [i], self._outside_words)
                    continue
                if present < size:
                    self._note(DamageKind.TRUNCATED, [i], self._cut_words)
                    if code not in to_end:
                        continue
                self.usable[i], self.size[i] = True, present

    def _reject_overlaps(self) -> None:
        s = self._s
        structural = {t.kind_code(section_type) for section_type in STRUCTURAL}
        members = [
            i
            for code in sorted(structural)
            for i in self._by_kind.get(code, ())
            if self.usable[i] and self.size[i] > 0
        ]
        # By start; equal starts in file order (as a stable sort of file order leaves them).
        members.sort(key=lambda i: (s.offset[i], i))
        starts = [s.offset[i] for i in members]
        ends = [start + self.size[i] for start, i in zip(starts, members, strict=True)]
        clash = [False] * len(members)
        reach = ends[0] if ends else 0
        for k in range(1, len(members)):
            clash[k] = starts[k] < reach
            reach = max(reach, ends[k])
        if not any(clash):
            return
        involved = [
            k for k in range(len(members)) if clash[k] or (k + 1 < len(clash) and clash[k + 1])
        ]
        lost = keep_disjoint(
            [members[k] for k in involved],
            [starts[k] for k in involved],
            [ends[k] for k in involved],
        )
        self._note(DamageKind.OVERLAP, lost, self._overlap_words)
        for i in lost:
            self.usable[i], self.rows[i] = False, 0

    def _follow_links(self) -> None:
        s = self._s
        for child_type in sorted(t.PARENT_TYPE, key=depth):
            parent_type = t.PARENT_TYPE[child_type]
            broken, orphans, cut_off = [], [], []
            for i in self.usable_of(child_type):
                link, row = s.link[i], s.info[i]
                right_type = link < s.count and s.type[link] == parent_type
                parent_ok = right_type and self.usable[link]
                if parent_ok and row < self.rows[link]:
                    continue
                cut_off.append(i)
                # A row past those read, but inside what the table claims, was lost with
                # the table's cut end (or its excess rows): an orphan, not a bad link.
                lost_row = parent_ok and row < s.size[link] // max(s.entsize[link], 1)
                if not right_type or (parent_ok and not lost_row):
                    broken.append(i)
                else:
                    orphans.append(i)
            if child_type in IMAGES:
                self._keep_as_root(cut_off)
                continue
            self._note(DamageKind.BAD_LINK, broken, self._link_words)
            self._note(DamageKind.ORPHANED, orphans, self._orphan_words)
            for i in cut_off:
                self.usable[i], self.rows[i] = False, 0

    def _keep_as_root(self, images: list[int]) -> None:
        self.root_images.extend(images)
        for i in images:
            self.is_root_image[i] = True
        self._note(DamageKind.ROOT_IMAGE, images, self._link_words)


def keep_disjoint(members: list[int], start: list[int], end: list[int]) -> list[int]:
    """The members to set aside so that the rest are disjoint, keeping the smallest first
    (equal sizes: the earlier start, then the earlier in the list)."""
    kept_starts: list[int] = []
    kept_ends: list[int] = []
    lost = []
    for i in sorted(range(len(members)), key=lambda i: (end[i] - start[i], start[i])):
        a, b = start[i], end[i]
        at = bisect.bisect_right(kept_starts, a)
        if (at and kept_ends[at - 1] > a) or (at < len(kept_starts) and kept_starts[at] < b):
            lost.append(members[i])
            continue
        kept_starts.insert(at, a)
        kept_ends.insert(at, b)
    return sorted(lost)


def depth(section_type: int) -> int:
    """How far below the device table a section type hangs."""
    level = 0
    while section_type in t.PARENT_TYPE:
        section_type, level = t.PARENT_TYPE[section_type], level + 1
    return level
