"""The fuzz campaign, small: 3,000 mutants of the fixture dumps across every mutator.

Only our own one-line errors may come out of the reader, the analysis and the reports: no
crash, no step over 5 s, no mutant over 512 MiB. The full campaign is `make fuzz` (100,000).
A failure prints each failing place with the command that replays its mutant.
"""

from __future__ import annotations

import pytest

from tests.fuzz.campaign import run_campaign
from tests.fuzz.mutant import NotApplicable, build, dump_names, mutators
from tests.fuzz.pool import usable_cpus
from tests.fuzz.worker import Limits

COUNT = 3_000
SEED = 20_240_601


def test_every_mutant_is_rebuilt_identically_from_its_triple():
    for name in mutators():
        if name == "gzip_bomb":
            continue
        first, second = build("oob_store.nvcudmp", name, 7), build("oob_store.nvcudmp", name, 7)
        assert first == second, name


def test_every_mutator_applies_to_some_fixture():
    for name in mutators():
        if name == "gzip_bomb":
            continue
        assert any(_builds(dump, name) for dump in dump_names()[:8]), name


def _builds(dump: str, name: str) -> bool:
    try:
        build(dump, name, 1)
    except NotApplicable:
        return False
    return True


@pytest.mark.slow
def test_fuzz_campaign_has_no_crash_slow_or_memory_outcome():
    # GIVEN 3,000 mutants, every mutator at least once, a fixed seed
    # WHEN each goes through the whole pipeline in a worker (5 s a step, 512 MiB)
    summary = run_campaign(COUNT, SEED, jobs=min(2, usable_cpus()), limits=Limits())
    # THEN none failed
    assert summary.count == COUNT
    assert not summary.failures, summary.render(Limits())
