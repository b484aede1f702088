"""Catch a hang while the evidence is still there: the conditions `trigger --watch` and
`capture --hang-after` wait for before they write the user-triggered coredump trigger.

A serving engine's watchdog (vLLM's, SGLang's, NCCL's) kills a hung process, and its GPU
state with it, before anyone runs `postmortem trigger`; in a container without ptrace no
debugger can attach either. The driver's coredump pipe needs neither, so a watch only has to
notice the hang in time. It polls, every `POLL_S` at most, what the process leaves behind:

- a line of its log matching a pattern (`LineCondition`), the log followed as ``tail -F``
  follows one (NCCL's "Watchdog caught collective operation timeout", SGLang's "Scheduler
  watchdog timeout", vLLM's "EngineDeadError"): from its end when the watch is armed, then
  across rotation (a new file under the name is read from its start, after the rest of the
  old one) and truncation;
- a file that stopped changing, its size, time and identity the same for N seconds
  (`QuietCondition`), or output that stopped (`SilenceCondition`, the captured command's);
- a deadline (`DeadlineCondition`).

The first condition that holds ends the watch (one dump per firing) with a `Fired` saying
what held. The log is untrusted: it is only read, never run, decoded with each undecodable
byte a character of its own (shown replaced), and each line is cut to `MAX_LINE_BYTES` (the
rest of a longer one is skipped, however long it gets), so neither binary junk nor a line of
gigabytes without a newline costs more than that memory. It is read in blocks of whole
lines, and the pattern (compiled once, when the watch is armed) searches each block at once,
with `^` and `$` at the ends of its lines; a match is then confirmed on its own line, cut, so
no match spans two lines. A log written faster than it is searched is not followed for ever
behind: once more than `READ_PER_POLL` bytes are unread at a poll, the older ones are skipped
and the newest read (what a hang leaves last), and the firing message says how many bytes
were skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from postmortem.errors import BadOption, UnreadableFile

POLL_S = 0.2
"""The longest wait between two looks at the conditions and the process."""
MAX_LINE_BYTES = 64 << 10
"""The most of one log line that is kept and matched; a longer line is cut there."""
READ_PER_POLL = 8 << 20
"""The most of a log read in one poll: when more is unread, the older bytes are skipped (a
block of short lines is searched at about 50 MB/s, so a poll stays well under a second)."""
SHOWN_CHARS = 200
"""The most of a matched line the firing message quotes."""
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """What a watch waits for: any one of the armed conditions fires it."""

    on_line: str | None = None
    """A regular expression (Python's); fires on the first new line of `log` it matches."""
    log: Path | None = None
    """The log followed for `on_line`, and watched for `quiet_s`."""
    metrics: Path | None = None
    """A metrics or heartbeat file watched for `quiet_s`."""
    quiet_s: float | None = None
    """Fires when `log` or `metrics` has not changed for this many seconds."""
    deadline_s: float | None = None
    """Fires this many seconds after the watch is armed."""

    @property
    def armed(self) -> bool:
        """True when at least one condition is asked for."""
        return any(v is not None for v in (self.on_line, self.quiet_s, self.deadline_s))

    def describe(self) -> str:
        """The armed conditions, for the line a watch starts with."""
        parts = []
        if self.on_line is not None:
            parts.append(f"a line of {self.log} matching {self.on_line!r}")
        if self.quiet_s is not None:
            files = " or ".join(str(p) for p in (self.log, self.metrics) if p is not None)
            parts.append(f"{files} unchanged for {self.quiet_s:g} s")
        if self.deadline_s is not None:
            parts.append(f"{self.deadline_s:g} s passed")
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Fired:
    """Why a watch fired."""

    reason: str
    """One line: the matched line (cut to `SHOWN_CHARS`), the quiet time, or the deadline.
    Not escaped: whoever prints it escapes it."""
    after_s: float
    """Seconds from arming to firing."""


class Condition(Protocol):
    """One thing a watch waits for."""

    def check(self, now: float) -> str | None:
        """Why it holds at monotonic time `now` (one line); None while it does not."""
        ...


def check_spec(spec: WatchSpec) -> re.Pattern[str] | None:
    """The compiled `on_line` pattern, after checking that the options go together.

    Raises:
        BadOption: no condition, a condition without the file it needs, a pattern that does
            not compile, or a time that is not positive.
    """
    if not spec.armed:
        raise BadOption("--watch", "give --on-line, --quiet-for or --deadline")
    if spec.on_line is not None and spec.log is None:
        raise BadOption("--on-line", "needs --log FILE, the log to follow")
    if spec.quiet_s is not None and spec.log is None and spec.metrics is None:
        raise BadOption("--quiet-for", "needs --log FILE or --metrics FILE, the file to watch")
    for name, value in (("--quiet-for", spec.quiet_s), ("--deadline", spec.deadline_s)):
        if value is not None and not value > 0:
            raise BadOption(name, f"{value:g}: not a positive number of seconds")
    if spec.on_line is None:
        return None
    try:
        return re.compile(spec.on_line)
    except (re.error, RecursionError, OverflowError) as error:
        reason = f"{spec.on_line!r}: not a regular expression: {error}"
        raise BadOption("--on-line", reason) from None


def arm(spec: WatchSpec, now: float) -> list[Condition]:
    """The conditions of `spec`, armed at monotonic time `now`: the log's end is where its
    lines start to count, and each file's state now is where its quiet time starts.

    Raises:
        BadOption: see `check_spec`.
        UnreadableFile: a watched file that does not exist or is not a regular file.
    """
    pattern = check_spec(spec)
    for path in (spec.log, spec.metrics):
        if path is not None:
            _check_regular(path)
    conditions: list[Condition] = []
    if pattern is not None:
        assert spec.log is not None
        conditions.append(LineCondition(LogFollower(spec.log), pattern))
    if spec.quiet_s is not None:
        quiet = spec.quiet_s
        files = (path for path in (spec.log, spec.metrics) if path is not None)
        conditions.extend(QuietCondition(path, quiet, now) for path in files)
    if spec.deadline_s is not None:
        conditions.append(DeadlineCondition(spec.deadline_s, now))
    return conditions


def watch(
    conditions: Sequence[Condition],
    alive: Callable[[], bool],
    *,
    interval: float = POLL_S,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Fired | None:
    """Poll `conditions` until one holds; None when the process is gone first (`alive`
    returned False) or `stop` was set."""
    start = clock()
    stop = stop or threading.Event()
    while not stop.is_set():
        if not alive():
            return None
        now = clock()
        for condition in conditions:
            reason = condition.check(now)
            if reason is not None:
                return Fired(reason, now - start)
        stop.wait(max(0.0, interval - (clock() - now)))
    return None


class DeadlineCondition:
    """Holds `seconds` after it was armed."""

    def __init__(self, seconds: float, armed_at: float) -> None:
        self._seconds = seconds
        self._at = armed_at + seconds

    def check(self, now: float) -> str | None:
        return f"deadline of {self._seconds:g} s reached" if now >= self._at else None


class QuietCondition:
    """Holds once `path` has not changed (size, modification time, identity, existence) for
    `seconds`."""

    def __init__(self, path: Path, seconds: float, armed_at: float) -> None:
        self._path = path
        self._seconds = seconds
        self._state = file_state(path)
        self._since = armed_at

    def check(self, now: float) -> str | None:
        state = file_state(self._path)
        if state != self._state:
            self._state, self._since = state, now
            return None
        if now - self._since < self._seconds:
            return None
        quiet = now - self._since
        return f"{self._path} unchanged for {quiet:.1f} s (--quiet-for {self._seconds:g})"


class SilenceCondition:
    """Holds once `activity` has seen no output for `seconds` (the captured command's)."""

    def __init__(self, activity: Activity, seconds: float) -> None:
        self._activity = activity
        self._seconds = seconds

    def check(self, now: float) -> str | None:
        quiet = now - self._activity.last
        if quiet < self._seconds:
            return None
        return f"no output for {quiet:.1f} s (--hang-after {self._seconds:g})"


class LineCondition:
    """Holds on the first new line of a followed log that `pattern` matches."""

    def __init__(self, follower: LogFollower, pattern: re.Pattern[str]) -> None:
        self._follower = follower
        self._pattern = pattern
        # The same pattern over a block of lines: `^` and `$` hold at each line's ends.
        self._scan = re.compile(pattern.pattern, pattern.flags | re.MULTILINE)

    def check(self, now: float) -> str | None:
        follower = self._follower
        for block in follower.iter_blocks():
            line = first_match(block, self._pattern, self._scan, follower.max_line)
            if line is not None:
                reason = f"{follower.path}: matched {shorten(line)}"
                if follower.skipped_bytes:
                    reason += (
                        f" (the watch fell behind the log and skipped {follower.skipped_bytes}"
                        " bytes of it)"
                    )
                return reason
        return None


def first_match(
    block: bytes, pattern: re.Pattern[str], scan: re.Pattern[str], max_line: int
) -> str | None:
    """The first line of `block` (whole lines, each ended by a newline) that `pattern`
    matches, cut to `max_line` bytes as it is matched; None when none does. `scan` is
    `pattern` with `re.MULTILINE`: one search over the block finds each candidate line."""
    text = block.decode("utf-8", "surrogateescape")
    pos = 0
    while (found := scan.search(text, pos)) is not None and found.start() < len(text):
        start = text.rfind("\n", 0, found.start()) + 1
        end = text.find("\n", found.start())
        line = _cut(text[start:end], max_line)
        if pattern.search(line):
            return line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        pos = end + 1  # a match across lines, or past the cut: go on from the next line
    return None


def _cut(line: str, max_line: int) -> str:
    """`line` cut to its first `max_line` bytes (as read: each undecodable byte one char)."""
    if len(line) <= max_line // 4:  # a character is at most 4 bytes: short enough
        return line
    raw = line.encode("utf-8", "surrogateescape")
    return raw[:max_line].decode("utf-8", "surrogateescape") if len(raw) > max_line else line


class Activity:
    """When output was last seen, monotonic seconds; touched by the readers of a command's
    streams, read by the watch (a float is read and written whole)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def touch(self) -> None:
        """Output was seen now."""
        self.last = time.monotonic()


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` cut to `limit` characters, with `…` when it was longer."""
    return text if len(text) <= limit else text[:limit] + "…"


FileState = tuple[int, int, int, int] | None
"""A file's device, inode, size and modification time (ns); None when it is not there."""


def file_state(path: Path) -> FileState:
    """What `QuietCondition` compares: identity, size and time of `path`, or None."""
    try:
        info = path.stat()
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class LogFollower:
    """The new lines of a log, as ``tail -F`` shows them, each cut to `max_line` bytes.

    Reading starts at the end of the file as it is now (at its start with `from_start`).
    When the name comes to lead to another file (the log was rotated), the rest of the old
    file is read, then the new one from its start; when the file gets shorter than what was
    read (truncated in place), reading starts again from its start. A name that leads to
    nothing, or to something other than a regular file, is waited on. At most `READ_PER_POLL`
    bytes of a file are read a poll: when more is unread, the older bytes are skipped
    (`skipped_bytes`).
    """

    def __init__(
        self, path: Path, *, from_start: bool = False, max_line: int = MAX_LINE_BYTES
    ) -> None:
        self.path = path
        self.max_line = max_line
        """The most of one line that is kept: a longer one is cut there."""
        self.skipped_bytes = 0
        """The bytes never read because the log was written faster than it was read."""
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._pending = b""
        self._last_read = 0
        """The bytes the last `_read` read."""
        self._skipping = False
        """Inside a line longer than `max_line`, whose start was given already (or one
        skipped into)."""
        self._open(at_end=not from_start)

    def close(self) -> None:
        """Stop following (the file is closed)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def poll(self) -> list[bytes]:
        """The whole lines written since the last poll (without their line ends)."""
        lines: list[bytes] = []
        for block in self.iter_blocks():
            lines += (line[: self.max_line] for line in block.split(b"\n")[:-1])
        return lines

    def iter_blocks(self) -> Iterator[bytes]:
        """What was written since the last poll, in blocks of whole lines, each line ended
        by ``\\n`` alone (one ``\\r`` before it dropped); a line may be longer than
        `max_line` inside a block, and is for its reader to cut. A reader that stops taking
        blocks ends the poll (what was read of the last chunk and not taken is dropped)."""
        now_at = _ident(self.path)
        yield from self._read(READ_PER_POLL)
        budget = READ_PER_POLL - self._last_read
        if now_at is not None and now_at != self._ident:
            # Rotated (or made for the first time): the old file was read to its end above.
            self.close()
            self._pending, self._skipping = b"", False
            self._open(at_end=False)
            yield from self._read(budget)
        elif self._fd is not None and _ends_before(self._fd, self._offset):
            # Truncated in place: what is there now was written since. (The size is taken
            # after the read: a line written after the look at the name is no truncation.)
            with contextlib.suppress(OSError):
                os.lseek(self._fd, 0, os.SEEK_SET)
            self._offset, self._pending, self._skipping = 0, b"", False
            yield from self._read(budget)

    def _open(self, *, at_end: bool) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                os.close(fd)  # a pipe or a device is never read: it could block or never end
                return
            self._offset = os.lseek(fd, 0, os.SEEK_END) if at_end else 0
        except OSError:
            os.close(fd)
            return
        self._fd, self._ident = fd, (info.st_dev, info.st_ino)

    def _read(self, budget: int) -> Iterator[bytes]:
        """The blocks of what is there, up to `budget` bytes read (`_last_read`)."""
        self._last_read = 0
        if self._fd is None:
            return
        self._catch_up(budget)
        while self._last_read < budget:
            try:
                chunk = os.read(self._fd, min(_CHUNK, budget - self._last_read))
            except OSError:
                break
            if not chunk:
                break
            self._last_read += len(chunk)
            self._offset += len(chunk)
            yield from self._blocks(chunk)  # a list: the state is whole before a block is taken

    def _catch_up(self, budget: int) -> None:
        """Skip to the last `budget` bytes when more is unread (the newest lines matter)."""
        assert self._fd is not None
        try:
            to = os.fstat(self._fd).st_size - budget
            if to <= self._offset:
                return
            os.lseek(self._fd, to, os.SEEK_SET)
            # Into the middle of a line, unless the byte before is a newline: the rest of
            # that line is skipped too.
            in_line = os.pread(self._fd, 1, to - 1) != b"\n"
        except OSError:
            return
        self.skipped_bytes += to - self._offset
        self._offset, self._pending, self._skipping = to, b"", in_line

    def _blocks(self, data: bytes) -> list[bytes]:
        """The blocks `data` completes, read after what was read before."""
        blocks = []
        if self._skipping:
            end = data.find(b"\n")
            if end < 0:
                return []
            data, self._skipping = data[end + 1 :], False
        last = data.rfind(b"\n")
        if last >= 0:
            blocks.append((self._pending + data[: last + 1]).replace(b"\r\n", b"\n"))
            self._pending, data = b"", data[last + 1 :]
        self._pending += data
        if len(self._pending) > self.max_line:
            # The start of a line too long to keep: given cut (with no \r dropped: its end
            # is not here), and the rest of it skipped.
            blocks.append(self._pending[: self.max_line] + b"\n")
            self._pending, self._skipping = b"", True
        return blocks


def _ident(path: Path) -> tuple[int, int] | None:
    """The identity of the regular file `path` leads to; None for anything else."""
    try:
        info = path.stat()
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return info.st_dev, info.st_ino


def _ends_before(fd: int, offset: int) -> bool:
    """Whether the open file now ends before `offset` (truncated); False when it cannot say."""
    try:
        return os.fstat(fd).st_size < offset
    except OSError:
        return False


def _check_regular(path: Path) -> None:
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise UnreadableFile(path, error.strerror or str(error)) from None
    if not stat.S_ISREG(mode):
        raise UnreadableFile(path, "not a regular file")


def process_alive(pid: int) -> Callable[[], bool]:
    """A check that process `pid` is still the one running now: not gone, not a zombie, and
    not another process that took its id (its start time, from /proc, has not changed)."""
    started = _start_ticks(pid)

    def alive() -> bool:
        if started is not None:
            return _start_ticks(pid) == started
        # No start time was read (the first look raced its start, or /proc is elsewhere): a
        # zombie still answers kill(0), so its /proc state decides where there is one.
        if Path(f"/proc/{pid}/stat").exists() and _start_ticks(pid) is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    return alive


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time); None when unreadable or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold anything: split after it.
    fields = text.rpartition(")")[2].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None
