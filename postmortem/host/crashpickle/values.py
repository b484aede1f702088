"""The symbolic values the stack machine builds in place of Python's, and its two stops.

Nothing here is ever a real object of the pickle's: a string longer than what is kept, an
opaque value, a class named but never imported, a list, tuple, set or dict kept in part, and
what calling a class would have made.
"""

from __future__ import annotations

from collections import deque


class Text:
    """A string longer than what is kept of it."""

    __slots__ = ("head", "length")

    def __init__(self, head: str, length: int) -> None:
        self.head, self.length = head, length


class Opaque:
    """A value nothing is read from (bytes, a huge int, a persistent id, a buffer)."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label


class Global:
    """A class or function the pickle names, never imported."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label


class Seq:
    """A list, tuple or set: the first and last items kept, all of them counted."""

    __slots__ = ("head", "kind", "length", "tail")

    def __init__(self, kind: str) -> None:
        self.kind, self.length = kind, 0
        self.head: list[object] = []
        self.tail: deque[object] | None = None  # made when the head is full: most never are

    def add(self, item: object, kept: int) -> None:
        self.length += 1
        if len(self.head) < kept:
            self.head.append(item)
            return
        if self.tail is None:
            self.tail = deque(maxlen=kept)
        self.tail.append(item)

    def kept(self) -> list[tuple[int, object]]:
        tail = self.tail or ()
        start = self.length - len(tail)
        return list(enumerate(self.head)) + list(enumerate(tail, start))

    @property
    def cut(self) -> bool:
        return self.length > len(self.head) + len(self.tail or ())


class Map:
    """A dict: its string keys kept, in order, up to a cap; every item counted."""

    __slots__ = ("length", "named")

    def __init__(self) -> None:
        self.length = 0
        self.named: dict[str, object] = {}


class Obj:
    """What calling a class or function would have made: its label and its state."""

    __slots__ = ("args", "items", "label", "mapping", "state")

    def __init__(self, label: str, args: object) -> None:
        self.label, self.args = label, args
        self.state: object = None
        self.items: Seq | None = None  # a list subclass's APPENDs
        self.mapping: Map | None = None  # a dict subclass's SETITEMs


class _Damaged(Exception):
    """The opcodes do not make sense here (a damaged or foreign pickle)."""


class _Capped(Exception):
    """A limit stopped the reading."""


def label_of(value: object) -> str:
    """What `value` is, in words: a class's name, ``a list``, ``a dict``."""
    if isinstance(value, (Global, Opaque)):
        return value.label
    if isinstance(value, Obj):
        return f"a {value.label} object"
    if isinstance(value, Seq):
        return f"a {value.kind}"
    if isinstance(value, Map):
        return "a dict"
    return f"a {type(value).__name__}" if not isinstance(value, Text) else "a str"
