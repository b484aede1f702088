"""The control-flow graph of one function's SASS: basic blocks, loops, and what a PC can reach.

Built from an nvdisasm listing (`SassListing`). A branch names its target by label
(``BRA `(.L_x_1)``); a predicated branch also falls through; an unpredicated `BRA`, `EXIT`,
`RET` or `BRX`/`JMX` ends its block with no fall-through; a `CALL` returns (its callee is
another function). An indirect branch (`BRX`, `JMX`) names no target: its block is marked, and
every question about where it leads is answered "unknown" rather than "no".

Loops are the strongly connected components of the graph (Tarjan, iterative), so a loop is
found whatever its shape (a retry loop placed out of line, a loop whose test is at the top).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from postmortem.cubin.sass import SassInstruction, SassListing

_LABEL = re.compile(r"`\((?P<label>[^)]+)\)")
_ENDS = frozenset({"EXIT", "RET", "BRX", "JMX", "KILL"})
_BRANCHES = frozenset({"BRA", "JMP", "BRX", "JMX"})


@dataclass(frozen=True, slots=True)
class BasicBlock:
    """Instructions that run one after the other, entered only at the first."""

    index: int
    start: int
    """Offset of the first instruction."""
    instructions: tuple[SassInstruction, ...]
    successors: tuple[int, ...]
    """Indices of the blocks control can pass to next."""
    indirect: bool
    """The block ends in a branch whose targets the listing does not name (`BRX`, `JMX`)."""


def is_unconditional(instruction: SassInstruction) -> bool:
    """An instruction without a guard, or guarded by the always-true `PT`."""
    return instruction.predicate in (None, "PT")


def branch_label(instruction: SassInstruction) -> str | None:
    """The label a branch names (``.L_x_1``), or None."""
    return next((m["label"] for op in instruction.operands if (m := _LABEL.search(op))), None)


class ControlFlowGraph:
    """A function's basic blocks and the questions the hang analysis asks of them."""

    def __init__(self, listing: SassListing) -> None:
        self.listing = listing
        self.blocks = _blocks(listing.instructions)
        self._block_of = {i.offset: b.index for b in self.blocks for i in b.instructions}
        self._reach: dict[int, frozenset[int]] = {}

    def block_of(self, offset: int) -> BasicBlock | None:
        """The block holding the instruction at `offset`."""
        index = self._block_of.get(offset)
        return None if index is None else self.blocks[index]

    @cached_property
    def loops(self) -> tuple[frozenset[int], ...]:
        """Every loop, outermost first, as the set of its block indices: the strongly
        connected components with a cycle, and within each, once the edges back to its header
        are taken away, the loops nested in it."""
        found: list[frozenset[int]] = []
        work = [frozenset(range(len(self.blocks)))]
        while work:
            nodes = work.pop()
            removed = self._back_edges(nodes) if len(nodes) < len(self.blocks) else set()
            for component in _components(self.blocks, nodes, removed):
                if self._cycles(component, removed):
                    found.append(component)
                    work.append(component)
        return tuple(sorted(found, key=len, reverse=True))

    def loop_of(self, offset: int) -> frozenset[int] | None:
        """The innermost loop holding `offset`, or None."""
        block = self.block_of(offset)
        return None if block is None else self._innermost.get(block.index)

    @cached_property
    def _innermost(self) -> dict[int, frozenset[int]]:
        found: dict[int, frozenset[int]] = {}
        for loop in self.loops:  # outermost first: an inner loop overwrites
            for block in loop:
                found[block] = loop
        return found

    def _back_edges(self, loop: frozenset[int]) -> set[tuple[int, int]]:
        # The header is where control enters the loop from outside (the lowest such block
        # when several do): the edges to it from inside close the loop.
        entries = [b for b in loop if any(p not in loop for p in self._predecessors[b])]
        header = min(entries) if entries else min(loop)
        return {(p, header) for p in self._predecessors[header] if p in loop}

    def _cycles(self, component: frozenset[int], removed: set[tuple[int, int]]) -> bool:
        if len(component) > 1:
            return True
        only = next(iter(component))
        return only in self.blocks[only].successors and (only, only) not in removed

    @cached_property
    def _predecessors(self) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {b.index: [] for b in self.blocks}
        for block in self.blocks:
            for successor in block.successors:
                found[successor].append(block.index)
        return found

    def predecessors(self, index: int) -> tuple[int, ...]:
        """The blocks control can come to block `index` from."""
        return tuple(self._predecessors.get(index, ()))

    def loop_instructions(self, loop: frozenset[int]) -> tuple[SassInstruction, ...]:
        """The instructions of a loop's blocks, in address order."""
        found = [i for b in sorted(loop) for i in self.blocks[b].instructions]
        return tuple(sorted(found, key=lambda i: i.offset))

    def exits_of(self, loop: frozenset[int]) -> tuple[SassInstruction, ...]:
        """The branches and guarded exits by which control leaves `loop`."""
        found = []
        for index in loop:
            block = self.blocks[index]
            last = block.instructions[-1]
            leaves = any(s not in loop for s in block.successors)
            if leaves or (last.base_opcode == "EXIT" and not is_unconditional(last)):
                found.append(last)
        return tuple(found)

    def reachable(self, offset: int) -> frozenset[int] | None:
        """The offsets of every instruction that can run after the one at `offset` (itself
        included), or None when an indirect branch on the way hides where control goes."""
        block = self.block_of(offset)
        if block is None:
            return None
        if block.index not in self._reach:
            self._reach[block.index] = self._walk(block.index)
        blocks = self._reach[block.index]
        if any(self.blocks[b].indirect for b in blocks):
            return None
        offsets = {
            i.offset for b in blocks if b != block.index for i in self.blocks[b].instructions
        }
        offsets.update(i.offset for i in block.instructions if i.offset >= offset)
        # The start block is entered again (its earlier instructions run too) when a block
        # reachable from it leads back to it.
        if any(block.index in self.blocks[b].successors for b in blocks):
            offsets.update(i.offset for i in block.instructions)
        return frozenset(offsets)

    def _walk(self, start: int) -> frozenset[int]:
        seen = {start}
        stack = [start]
        while stack:
            for successor in self.blocks[stack.pop()].successors:
                if successor not in seen:
                    seen.add(successor)
                    stack.append(successor)
        return frozenset(seen)


def _blocks(instructions: tuple[SassInstruction, ...]) -> tuple[BasicBlock, ...]:
    if not instructions:
        return ()
    labels = {label: i.offset for i in instructions for label in i.labels}
    leaders = {instructions[0].offset}
    for n, instruction in enumerate(instructions):
        leaders.update(instruction.offset for _ in instruction.labels)
        if _ends_block(instruction) and n + 1 < len(instructions):
            leaders.add(instructions[n + 1].offset)
        target = labels.get(branch_label(instruction) or "")
        if instruction.base_opcode in _BRANCHES and target is not None:
            leaders.add(target)
    starts = sorted(leaders)
    index_of = {offset: n for n, offset in enumerate(starts)}
    groups: list[list[SassInstruction]] = [[] for _ in starts]
    current = -1
    for instruction in instructions:
        if instruction.offset in index_of:
            current = index_of[instruction.offset]
        groups[current].append(instruction)
    found = []
    for n, group in enumerate(groups):
        last = group[-1]
        successors: list[int] = []
        target = labels.get(branch_label(last) or "")
        if last.base_opcode in _BRANCHES and target is not None:
            successors.append(index_of[target])
        falls = not (_ends_block(last) and is_unconditional(last)) or last.base_opcode == "CALL"
        if last.base_opcode in {"BRA", "JMP"} and not is_unconditional(last):
            falls = True
        if falls and n + 1 < len(groups):
            successors.append(n + 1)
        indirect = last.base_opcode in {"BRX", "JMX"}
        found.append(
            BasicBlock(n, group[0].offset, tuple(group), tuple(dict.fromkeys(successors)), indirect)
        )
    return tuple(found)


def _ends_block(instruction: SassInstruction) -> bool:
    return instruction.base_opcode in _BRANCHES or instruction.base_opcode in _ENDS


def _components(
    blocks: tuple[BasicBlock, ...], nodes: frozenset[int], removed: set[tuple[int, int]]
) -> list[frozenset[int]]:
    """Tarjan's strongly connected components of the blocks `nodes`, without the edges
    `removed`, and without recursion (kernels have thousands of blocks)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    found: list[frozenset[int]] = []
    counter = 0

    def successors(node: int) -> list[int]:
        return [s for s in blocks[node].successors if s in nodes and (node, s) not in removed]

    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            following = successors(node)
            if child < len(following):
                work.append((node, child + 1))
                nxt = following[child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(frozenset(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found
