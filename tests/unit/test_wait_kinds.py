"""The control-flow graph and the wait kinds, on recorded nvdisasm listings of the fixture
kernels (fixtures/transcripts/nvdisasm/13.5): no tool runs here."""

from __future__ import annotations

from functools import cache

import pytest

from postmortem.analysis.hang.lanes import convergence_state, exit_taken, lane_states
from postmortem.analysis.hang.waits import WaitKind, kernel_code_of
from postmortem.cubin.sass import SassListing, parse_sass
from tests.tooling import REPO

LISTINGS = REPO / "fixtures" / "transcripts" / "nvdisasm" / "13.5"


@cache
def listing(name: str) -> SassListing:
    text = (LISTINGS / f"{name}.sm_90.v8.txt").read_text()
    return parse_sass("\n".join(line for line in text.splitlines() if not line.startswith("# ")))


def test_the_spin_loop_is_a_loop_and_the_barrier_path_is_not():
    code = kernel_code_of(listing("divergent_barrier"))
    graph = code.graph
    spin = graph.loop_of(0x0080)
    assert spin is not None
    assert [i.offset for i in graph.loop_instructions(spin)] == [0x80, 0x90, 0xA0, 0xB0]
    assert graph.loop_of(0x0140) is None
    # from the spin loop a warp reaches its own exit, never the barrier or the flag's store
    reach = graph.reachable(0x00A0)
    assert reach is not None and 0x00E0 in reach and 0x0080 in reach
    assert 0x0140 not in reach and 0x0150 not in reach


@pytest.mark.parametrize(
    ("offset", "kind"),
    [
        (0x0080, WaitKind.POLL),
        (0x00B0, WaitKind.POLL),
        (0x0100, WaitKind.CONVERGENCE),
        (0x0140, WaitKind.BARRIER),
        (0x0150, WaitKind.BARRIER),  # held after a deferred-blocking barrier
        (0x0120, WaitKind.RUNNING),
        (0x00D0, WaitKind.RUNNING),
    ],
)
def test_each_pc_of_the_divergent_barrier_kernel_has_its_wait(offset, kind):
    wait = kernel_code_of(listing("divergent_barrier")).wait_at(offset)
    assert wait.kind is kind
    if kind is WaitKind.BARRIER:
        assert (wait.at, wait.barrier_id, wait.whole_block) == (0x0140, 0, True)


def test_a_poll_names_its_load_its_test_its_argument_and_its_exit():
    poll = kernel_code_of(listing("divergent_barrier")).wait_at(0x0090).poll
    assert poll is not None
    assert poll.load.text == "LDG.E.STRONG.SYS R0, desc[UR4][R4.64]"
    assert poll.test is not None and poll.test.text == "ISETP.NE.AND P0, PT, R0, RZ, PT"
    assert poll.base_origin == "c[0x0][0x210]" and poll.pauses == ("YIELD",)
    # `@!P0 BRA` back to the loop: the loop is left when P0 (the word is not 0)
    assert poll.leaves_when is True
    values = {"R0": 0}
    assert exit_taken(poll, values.get) is False
    values["R0"] = 1
    assert exit_taken(poll, values.get) is True
    assert exit_taken(poll, {}.get) is None


def test_a_named_barrier_keeps_its_id_and_count_and_a_copy_loop_is_no_poll():
    code = kernel_code_of(listing("named_barrier"))
    waits = [code.wait_at(i.offset) for i in code.listing.instructions]
    named = [w for w in waits if w.kind is WaitKind.BARRIER and w.barrier_id == 1]
    assert named and all(w.barrier_threads == 384 and not w.whole_block for w in named)
    # the producers' loop stores every tile element it loads: work, not a poll
    assert not any(w.kind is WaitKind.POLL for w in waits)


@pytest.mark.parametrize(
    ("value", "words"),
    [(0, "Exited"), (1, "Ready"), (6, "BlockedPlus"), (9, "Blocked on B0"),
     (24, "Blocked on B15"), (0xFFFF_FFFF, "Invalid"), (99, "state 99")],
)  # fmt: skip
def test_convergence_states_read_as_cuda_gdb_words_them(value, words):
    assert convergence_state(value) == words


def test_lane_states_count_lanes_most_first_and_say_nothing_without_the_field():
    class Lane:
        def __init__(self, state):
            self.cbu_thread_state = state

    assert lane_states([Lane(9)] * 31 + [Lane(1)]) == (("Blocked on B0", 31), ("Ready", 1))
    assert lane_states([Lane(None)] * 4) == ()
