"""Pickle's virtual machine over symbolic values: the opcodes build lists, tuples, dicts,
memo references and opaque objects of its own; nothing the pickle names is imported or
called. It knows nothing of what the pickle holds."""

from __future__ import annotations

import _compat_pickle
from collections.abc import Callable

from postmortem.host.crashpickle.limits import CrashPickleLimits
from postmortem.host.crashpickle.values import (
    Global,
    Map,
    Obj,
    Opaque,
    Seq,
    Text,
    _Capped,
    _Damaged,
    label_of,
)

_CONTAINERS = {
    "EMPTY_LIST": "list", "EMPTY_TUPLE": "tuple", "EMPTY_SET": "set", "LIST": "list",
    "TUPLE": "tuple", "FROZENSET": "set", "TUPLE1": "tuple", "TUPLE2": "tuple",
    "TUPLE3": "tuple",
}  # fmt: skip
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_TEXT_OPS = frozenset(
    {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE",
     "BINUNICODE8"}
)  # fmt: skip
_NUMBER_OPS = frozenset(
    {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT"}
)
_BYTES_OPS = frozenset({"BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"})
_MEMO_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_NO_EFFECT = frozenset({"FRAME", "READONLY_BUFFER"})
_BATCH_OPENERS = frozenset(
    {"EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "APPENDS", "SETITEMS", "ADDITEMS"}
)
_RECONSTRUCTORS = frozenset({"copyreg._reconstructor"})


class Machine:
    """Pickle's virtual machine, with symbolic values: nothing is imported or called."""

    def __init__(self, limits: CrashPickleLimits) -> None:
        self.limits = limits
        self.stack: list[object] = []
        self.marks: list[int] = []
        self.batches: list[bool] = []  # per mark: whether it opened a batch of items
        self.last_op = ""
        self.memo: dict[int, object] = {}
        self.protocol: int | None = None
        self.classes: dict[str, None] = {}
        self.result: object = None
        self.kept_cut = False  # a string or a container kept only in part
        self.values = 0
        self.chars = 0
        self._ops: dict[str, Callable[[str, object], None]] = {
            "MARK": self._mark, "POP": self._pop_op, "POP_MARK": self._pop_mark_op,
            "DUP": self._dup, "APPEND": self._append, "APPENDS": self._appends,
            "ADDITEMS": self._appends, "SETITEM": self._setitem, "SETITEMS": self._setitems,
            "EMPTY_DICT": self._empty_dict, "DICT": self._dict, "MEMOIZE": self._memoize,
            "GLOBAL": self._global, "STACK_GLOBAL": self._stack_global, "INST": self._inst,
            "OBJ": self._obj, "NEWOBJ": self._newobj, "NEWOBJ_EX": self._newobj_ex,
            "REDUCE": self._reduce, "BUILD": self._build, "PROTO": self._proto,
            "STOP": self._stop, "EXT1": self._ext, "EXT2": self._ext, "EXT4": self._ext,
            "PERSID": self._persid, "BINPERSID": self._binpersid,
            "NEXT_BUFFER": self._buffer,
        }  # fmt: skip

    def step(self, name: str, arg: object) -> None:
        self._step(name, arg)
        if name not in _MEMO_PUTS and name not in _NO_EFFECT and name != "MEMOIZE":
            self.last_op = name

    def _step(self, name: str, arg: object) -> None:
        if name in _TEXT_OPS:
            self.push(self.text(arg))
        elif name in _NUMBER_OPS:
            self.push(_number(arg))
        elif name in _CONSTANTS:
            self.push(_CONSTANTS[name])
        elif name in _CONTAINERS:
            self._container(name)
        elif name in _BYTES_OPS:
            self.push(Opaque(f"bytes ({len(arg) if isinstance(arg, bytes) else '?'})"))
        elif name in _MEMO_GETS:
            self._get(arg)
        elif name in _MEMO_PUTS:
            self._put(arg)
        elif name in self._ops:
            self._ops[name](name, arg)
        elif name not in _NO_EFFECT:
            raise _Damaged(f"opcode {name} is not modelled")

    # stack primitives

    def push(self, value: object) -> None:
        if len(self.stack) >= self.limits.max_depth:
            raise _Capped(f"depth limit: a stack of {self.limits.max_depth:,} values")
        self.stack.append(value)

    def pop(self) -> object:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise _Damaged("a value is taken from an empty stack")
        return self.stack.pop()

    def top(self) -> object:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise _Damaged("the stack is empty where a value is needed")
        return self.stack[-1]

    def pop_mark(self) -> list[object]:
        if not self.marks:
            raise _Damaged("no MARK to go back to")
        self.batches.pop()
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def text(self, value: object) -> object:
        if not isinstance(value, str):
            return Opaque("text")
        kept = self.limits.kept_chars
        if self.chars > self.limits.kept_chars_total:
            kept = self.limits.kept_chars_past_total
        self.chars += min(len(value), kept)
        if len(value) <= kept:
            return value
        self.kept_cut = True
        return Text(value[:kept], len(value))

    def count_value(self) -> None:
        self.values += 1
        if self.values > self.limits.max_values:
            raise _Capped(f"value limit: {self.limits.max_values:,} containers and objects")

    def seq(self, kind: str, items: list[object]) -> Seq:
        seq = Seq(kind)
        self.count_value()
        for item in items:
            seq.add(item, self.limits.kept_items)
        self.kept_cut |= seq.cut
        return seq

    def set_items(self, target: object, pairs: list[object]) -> None:
        if isinstance(target, Obj):
            target.mapping = target.mapping or self.new_map()
            target = target.mapping
        if not isinstance(target, Map):
            raise _Damaged(f"SETITEM on {label_of(target)}, not a dict")
        if len(pairs) % 2:
            raise _Damaged("SETITEMS with an odd number of values")
        for key, value in zip(pairs[::2], pairs[1::2], strict=True):
            target.length += 1
            if not isinstance(key, str):
                continue  # an enum or a number: no field of SGLang's is read by one
            if key in target.named or len(target.named) < self.limits.kept_keys:
                target.named[key] = value
            else:
                self.kept_cut = True

    def extend(self, target: object, items: list[object]) -> None:
        if isinstance(target, Obj):
            target.items = target.items or self.seq("list", [])
            target = target.items
        if not isinstance(target, Seq) or target.kind == "tuple":
            raise _Damaged(f"APPEND to {label_of(target)}, not a list")
        for item in items:
            target.add(item, self.limits.kept_items)
        self.kept_cut |= target.cut

    def call(self, func: object, args: object) -> Obj:
        """What calling `func` would make: an opaque object named for the class it makes."""
        label = label_of(func)
        # Protocols 0 and 1 pickle an object as copyreg._reconstructor(cls, base, state).
        if label in _RECONSTRUCTORS and isinstance(args, Seq) and args.head:
            label = label_of(args.head[0])
        self.count_value()
        return Obj(label, args)

    def new_map(self) -> Map:
        self.count_value()
        return Map()

    def name_global(self, module: str, qualname: str) -> Global:
        # Protocols 0 to 2 name Python 2's modules (__builtin__, copy_reg), which CPython's
        # Unpickler maps to Python 3's: the same table, as data.
        if self.protocol is None or self.protocol < 3:
            module, qualname = _compat_pickle.NAME_MAPPING.get(
                (module, qualname), (module, qualname)
            )
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        label = f"{module}.{qualname}"
        if len(self.classes) < 10_000:
            self.classes.setdefault(label, None)
        return Global(label)

    def salvage(self) -> object:
        """The outermost value, every container still open where reading stopped closed on
        what it had: a dict gets its complete pairs, a list its items, an object the state
        dict that was being built for it; the items of anything else become a tuple."""
        if self.result is not None:
            return self.result
        while self.marks:
            batch = self.batches[-1]
            items = _settled(self.pop_mark())
            if not (batch and self._closed(self.stack[-1] if self.stack else None, items)):
                self.stack.append(self.seq("tuple", items))
        items = _settled(self.stack)
        if items:
            self._closed(items[0], items[1:])
        return items[0] if items else None

    def _closed(self, below: object, items: list[object]) -> bool:
        try:
            if isinstance(below, Map):
                self.set_items(below, items[: len(items) - len(items) % 2])
            elif isinstance(below, Seq) and below.kind != "tuple":
                self.extend(below, items)
            else:
                return False
        except _Damaged:
            return False
        return True

    # opcode handlers, each taking (opcode name, argument)

    def _container(self, name: str) -> None:
        size = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}.get(name)
        if name.startswith("EMPTY"):
            items: list[object] = []
        elif size is None:
            items = self.pop_mark()
        else:
            items = [self.pop() for _ in range(size)][::-1]
        self.push(self.seq(_CONTAINERS[name], items))

    def _mark(self, name: str, arg: object) -> None:
        if len(self.marks) >= self.limits.max_depth:
            raise _Capped(f"depth limit: {self.limits.max_depth:,} open marks")
        self.marks.append(len(self.stack))
        # Pickle opens a batch of APPENDS or SETITEMS right after the empty container or
        # the batch before; any other MARK opens a tuple (or an object's arguments).
        self.batches.append(self.last_op in _BATCH_OPENERS)

    def _pop_op(self, name: str, arg: object) -> None:
        if self.marks and len(self.stack) == self.marks[-1]:
            self.marks.pop()  # as CPython's Unpickler: POP on an empty frame drops its mark
            self.batches.pop()
        else:
            self.pop()

    def _pop_mark_op(self, name: str, arg: object) -> None:
        self.pop_mark()

    def _dup(self, name: str, arg: object) -> None:
        self.push(self.top())

    def _append(self, name: str, arg: object) -> None:
        item = self.pop()
        self.extend(self.top(), [item])

    def _appends(self, name: str, arg: object) -> None:
        items = self.pop_mark()
        self.extend(self.top(), items)

    def _setitem(self, name: str, arg: object) -> None:
        value = self.pop()
        key = self.pop()
        self.set_items(self.top(), [key, value])

    def _setitems(self, name: str, arg: object) -> None:
        items = self.pop_mark()
        self.set_items(self.top(), items)

    def _empty_dict(self, name: str, arg: object) -> None:
        self.push(self.new_map())

    def _dict(self, name: str, arg: object) -> None:
        items = self.pop_mark()
        mapping = self.new_map()
        self.set_items(mapping, items)
        self.push(mapping)

    def _get(self, arg: object) -> None:
        if not isinstance(arg, int) or arg not in self.memo:
            raise _Damaged(f"memo entry {arg!r} read before it is stored")
        self.push(self.memo[arg])

    def _put(self, arg: object) -> None:
        if not isinstance(arg, int) or arg < 0:
            raise _Damaged(f"memo entry {arg!r} is not an index")
        self._store(arg)

    def _memoize(self, name: str, arg: object) -> None:
        self._store(len(self.memo))

    def _store(self, index: int) -> None:
        if index not in self.memo and len(self.memo) >= self.limits.max_memo:
            raise _Capped(f"memo limit: {self.limits.max_memo:,} entries")
        self.memo[index] = self.top()

    def _global(self, name: str, arg: object) -> None:
        module, _, qualname = str(arg).partition(" ")
        self.push(self.name_global(module, qualname))

    def _stack_global(self, name: str, arg: object) -> None:
        qualname, module = self.pop(), self.pop()
        if not (isinstance(module, str) and isinstance(qualname, str)):
            raise _Damaged("STACK_GLOBAL of a name that is not text")
        self.push(self.name_global(module, qualname))

    def _inst(self, name: str, arg: object) -> None:
        items = self.pop_mark()
        self.push(self.call(self._named(arg), self.seq("tuple", items)))

    def _named(self, arg: object) -> Global:
        module, _, qualname = str(arg).partition(" ")
        return self.name_global(module, qualname)

    def _obj(self, name: str, arg: object) -> None:
        items = self.pop_mark()
        if not items:
            raise _Damaged("OBJ without a class")
        self.push(self.call(items[0], self.seq("tuple", items[1:])))

    def _newobj(self, name: str, arg: object) -> None:
        args = self.pop()
        self.push(self.call(self.pop(), args))

    def _newobj_ex(self, name: str, arg: object) -> None:
        self.pop()  # keyword arguments
        args = self.pop()
        self.push(self.call(self.pop(), args))

    def _reduce(self, name: str, arg: object) -> None:
        args = self.pop()
        self.push(self.call(self.pop(), args))

    def _build(self, name: str, arg: object) -> None:
        state = self.pop()
        target = self.top()
        if isinstance(target, Obj):
            target.state = state

    def _proto(self, name: str, arg: object) -> None:
        if self.protocol is None and isinstance(arg, int):
            self.protocol = arg

    def _stop(self, name: str, arg: object) -> None:
        self.result = self.pop()

    def _ext(self, name: str, arg: object) -> None:
        self.push(self.name_global("copyreg extension", str(arg)))

    def _persid(self, name: str, arg: object) -> None:
        self.push(Opaque("persistent id"))

    def _binpersid(self, name: str, arg: object) -> None:
        self.pop()
        self.push(Opaque("persistent id"))

    def _buffer(self, name: str, arg: object) -> None:
        self.push(Opaque("out-of-band buffer"))


def _number(value: object) -> object:
    # An int of thousands of digits cannot even be printed (int_max_str_digits).
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return Opaque(f"int of {value.bit_length()} bits")
    return value


def _settled(items: list[object]) -> list[object]:
    # An object followed by the state dict being built for it: the BUILD that would follow.
    items = list(items)
    target = items[-2] if len(items) >= 2 else None
    if isinstance(target, Obj) and target.state is None and isinstance(items[-1], (Map, Seq)):
        target.state = items.pop()
    return items
