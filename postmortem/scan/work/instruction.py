"""The instruction at a row's faulting PC: nvdisasm once per (cubin content, function), ever.

A signature scan needs no tool: the signature comes from the cubin's own line table. What
nvdisasm still gives a row is the SASS instruction at the faulting PC, and a fleet's dumps
carry the same few functions, so each function's listing (offset → instruction text) is
worked out once and remembered, refusals included, under a `code_key`: the content hash of
the module's image with its load addresses taken out (`rebase_to_zero`: the same cubin
loaded at another address is the same key), the function's name, and the nvdisasm (path,
version) and time limit used. An outcome is remembered in the worker's memory and, with a
cache, in the scan cache's ``code`` table, where every worker of this scan and of later ones
finds it. A worker claims a key before running nvdisasm; another that needs the same key
waits for the outcome (its own time limit still applies), and takes the claim over when the
claiming process is gone (killed for its time limit). A row that still lacks its
instruction (a scan interrupted meanwhile) has it filled in from the table at the end of the
scan (`fill_instructions`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from postmortem.analysis.fault.disassembly import ToolOptions, disassemble_function
from postmortem.analysis.fault.fault import FaultSite
from postmortem.codemap import CodeMap
from postmortem.coredump import Coredump
from postmortem.cubin.normalize import rebase_to_zero
from postmortem.errors import MalformedElf, ToolNotFound
from postmortem.findings import FindingCode
from postmortem.scan.row import DumpRow
from postmortem.tools import tool_version

CREATE_CODE_TABLE = """
create table if not exists code (
    key text primary key, state text not null, outcome text not null,
    recorded_ns integer not null
)
"""
"""The ``code`` table of the scan cache: key → "pending" (claimed; the outcome holds the
claiming process's id) or "done" with its outcome as JSON: ``{"listing": [[offset, text],
...]}`` or ``{"refused": message}``."""

# A claim older than this is taken over even when its process seems alive (another
# machine's process id, or one reused).
_STALE_CLAIM_NS = 600 * 1_000_000_000
_POLL_S = 0.02
_MEMORY_MAX = 512


@dataclass(frozen=True, slots=True)
class Outcome:
    """What nvdisasm made of one function: its instructions by offset, or why none."""

    listing: dict[int, str] | None
    refused: str | None

    def at(self, offset: int) -> str | None:
        return None if self.listing is None else self.listing.get(offset)

    def to_json(self) -> str:
        if self.listing is None:
            return json.dumps({"refused": self.refused})
        return json.dumps({"listing": sorted(self.listing.items())})

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        data = json.loads(text)
        if "listing" in data:
            return cls({int(o): str(t) for o, t in data["listing"]}, None)
        return cls(None, str(data["refused"]))


class InstructionMemo:
    """The instructions at faulting PCs of one worker: its memory, then the cache's table."""

    def __init__(self, database: Path | None) -> None:
        self._database = database
        self._db: sqlite3.Connection | None = None
        self._memory: dict[str, Outcome] = {}
        self._tools: dict[tuple[str, float], str] = {}
        """(the nvdisasm asked for, its time limit) → the identity in the code keys."""
        self.runs = 0
        """Functions this worker disassembled (outcomes it did not find remembered)."""

    def row_facts(
        self, core: Coredump, code_map: CodeMap, site: FaultSite, options: ToolOptions
    ) -> tuple[str | None, str | None, str | None, bool]:
        """(code key, instruction text, why there is none, whether a later scan should try
        again: nvdisasm timed out or was killed) for the site's PC."""
        if site.module is None or site.function is None or site.offset is None:
            return None, None, None, False
        location = site.faults[0].location if site.faults else None
        if location is None:
            return None, None, None, False
        tool = self._tool_identity(options)
        if tool is None:  # the scan's settings name the nvdisasm found: none, here
            return None, None, "nvdisasm not found", False
        key = code_key(code_map.image_bytes(site.module), site.function.name, tool)
        outcome = self._find(key)
        while outcome is None and not self._claim(key):
            time.sleep(_POLL_S)  # another worker is on it
            outcome = self._find(key)
        if outcome is None:
            outcome, failure = self._work_out(
                core, code_map, site, location.section_address, options
            )
            if outcome is None:  # no nvdisasm, or it timed out: nothing remembered
                self._release(key)
                return key, None, failure, True
            self._store(key, outcome)
        return key, outcome.at(site.offset), outcome.refused, False

    def _tool_identity(self, options: ToolOptions) -> str | None:
        asked = (str(options.nvdisasm.path), options.timeout)
        if asked not in self._tools:
            try:
                path = options.nvdisasm.locate("nvdisasm").path
            except ToolNotFound:
                return None
            self._tools[asked] = f"{path}|{tool_version(path)}|{options.timeout:g}"
        return self._tools[asked]

    def _work_out(
        self,
        core: Coredump,
        code_map: CodeMap,
        site: FaultSite,
        section_address: int,
        options: ToolOptions,
    ) -> tuple[Outcome | None, str]:
        """The outcome to remember (a listing, or every copy of the image refused), or none
        and why: no nvdisasm, or one that timed out or was killed, which a later dump may
        try again."""
        assert site.module is not None and site.function is not None
        self.runs += 1
        result, note = disassemble_function(
            core, code_map, site.module, site.function.symbol_index, section_address, options
        )
        if result is not None:
            listing = {i.offset: i.text for i in result.listing.instructions}
            return Outcome(listing, None), ""
        if note is None:
            return None, "nvdisasm gave no listing"
        # a refusal lists each copy of the image refused; a timeout has nothing to list
        if note.code is FindingCode.NVDISASM_MISSING or not note.evidence:
            return None, note.message
        return Outcome(None, note.message), ""

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is None and self._database is not None:
            try:
                self._db = sqlite3.connect(self._database, timeout=30)
                self._db.execute(CREATE_CODE_TABLE)
                self._db.commit()
            except sqlite3.Error:
                self._database = None  # no table: this worker's memory only
                return None
        return self._db

    def _find(self, key: str) -> Outcome | None:
        found = self._memory.get(key)
        if found is not None:
            return found
        db = self._connect()
        if db is None:
            return None
        try:
            row = db.execute(
                "select outcome from code where key = ? and state = 'done'", (key,)
            ).fetchone()
        except sqlite3.Error:
            return None
        if row is None:
            return None
        try:
            found = Outcome.from_json(row[0])
        except (ValueError, KeyError, TypeError):
            return None
        self._remember(key, found)
        return found

    def _claim(self, key: str) -> bool:
        """True when this worker is to work `key` out (no other worker is on it)."""
        db = self._connect()
        if db is None:
            return True
        now, me = time.time_ns(), str(os.getpid())
        try:
            with db:
                taken = db.execute(
                    "insert or ignore into code values (?, 'pending', ?, ?)", (key, me, now)
                ).rowcount
                found = db.execute(
                    "select state, outcome, recorded_ns from code where key = ?", (key,)
                ).fetchone()
                if not taken and found is not None and found[0] == "pending":
                    owner, since = found[1], found[2]
                    if owner == me or not _alive(owner) or since < now - _STALE_CLAIM_NS:
                        # a claim left by a killed worker: taken over, unless another took it
                        taken = db.execute(
                            "update code set outcome = ?, recorded_ns = ? "
                            "where key = ? and state = 'pending' and outcome = ?",
                            (me, now, key, owner),
                        ).rowcount
        except sqlite3.Error:
            return True
        return bool(taken)

    def _release(self, key: str) -> None:
        db = self._connect()
        if db is not None:
            with contextlib.suppress(sqlite3.Error), db:
                db.execute("delete from code where key = ? and state = 'pending'", (key,))

    def _store(self, key: str, outcome: Outcome) -> None:
        self._remember(key, outcome)
        db = self._connect()
        if db is not None:
            with contextlib.suppress(sqlite3.Error), db:
                db.execute(
                    "insert or replace into code values (?, 'done', ?, ?)",
                    (key, outcome.to_json(), time.time_ns()),
                )

    def _remember(self, key: str, outcome: Outcome) -> None:
        if len(self._memory) >= _MEMORY_MAX:
            self._memory.pop(next(iter(self._memory)))
        self._memory[key] = outcome


def _alive(pid_text: str) -> bool:
    try:
        os.kill(int(pid_text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def code_key(image: bytes, function: str, tool: str) -> str:
    """The key of one function of one cubin for one nvdisasm (`tool`: its path, version and
    time limit); the image's load addresses do not count."""
    try:
        rebased = rebase_to_zero(image)
    except MalformedElf:
        rebased = None
    content = hashlib.blake2b(rebased or image, digest_size=16)
    content.update(b"\0" + function.encode("utf-8", "surrogateescape"))
    content.update(b"\0" + tool.encode("utf-8", "surrogateescape"))
    return content.hexdigest()


def fill_instructions(rows: Sequence[DumpRow], database: Path | None) -> list[DumpRow]:
    """`rows` with the instructions other workers worked out filled in from the table."""
    wanted = {r.code_key for r in rows if r.code_key and r.instruction is None and not r.failed}
    if not wanted or database is None or not os.path.exists(database):
        return list(rows)
    outcomes: dict[str, Outcome] = {}
    try:
        with contextlib.closing(sqlite3.connect(database, timeout=30)) as db:
            for key in wanted:
                found = db.execute(
                    "select outcome from code where key = ? and state = 'done'", (key,)
                ).fetchone()
                if found is not None:
                    outcomes[key] = Outcome.from_json(found[0])
    except (sqlite3.Error, ValueError, KeyError, TypeError):
        return list(rows)
    filled = []
    for row in rows:
        outcome = outcomes.get(row.code_key or "")
        offset = row.signature.offset if row.signature else None
        if outcome is not None and row.instruction is None and offset is not None:
            row = replace(row, instruction=outcome.at(offset), instruction_note=outcome.refused)
        filled.append(row)
    return filled
