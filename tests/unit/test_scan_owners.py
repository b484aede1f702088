"""CODEOWNERS rules as `scan --owners` reads them: gitignore's patterns, the last match wins."""

from __future__ import annotations

import pytest

from postmortem.errors import BadOption
from postmortem.scan.owners import load_owners, parse_owners, rule_for

CASES = [
    # (pattern, path, matches)
    ("*.cu", "oob_store.cu", True),
    ("*.cu", "kernels/deep/oob_store.cu", True),
    ("*.cu", "include/store.cuh", False),
    ("include/", "include/store.cuh", True),
    ("include/", "src/include/store.cuh", True),
    ("include/", "include", False),
    ("/include/", "src/include/store.cuh", False),
    ("include/cutlass_like", "include/cutlass_like/arch/memory.cuh", True),
    ("include/cutlass_like", "vendor/include/cutlass_like/gemm.cuh", False),
    ("include/*.cuh", "include/store.cuh", True),
    ("include/*.cuh", "include/cutlass_like/gemm.cuh", False),
    ("include/**/*.cuh", "include/cutlass_like/arch/memory.cuh", True),
    ("include/**/*.cuh", "include/store.cuh", True),
    ("**/arch", "include/cutlass_like/arch/memory.cuh", True),
    ("cutlass_like/**", "cutlass_like/epilogue.cuh", True),
    ("store.cu?", "include/store.cuh", True),
    ("oob_[a-z]tore.cu", "oob_store.cu", True),
    ("docs", "a/docs/x.md", True),
]


@pytest.mark.parametrize(("pattern", "path", "matches"), CASES)
def test_patterns_have_gitignore_semantics(pattern, path, matches):
    rules = parse_owners(f"{pattern} @team")
    assert (rule_for(path, rules) is not None) is matches


def test_the_last_matching_rule_wins_and_comments_are_skipped():
    rules = parse_owners(
        "# who owns what\n"
        "*            @everyone\n"
        "include/     @headers   # the headers\n"
        "\n"
        "include/cutlass_like/ @cutlass @gemm\n"
        "include/cutlass_like/legacy/\n"
        "weird\\#name.cu @hash\n"
    )
    assert rule_for("include/store.cuh", rules).owners == ("@headers",)
    assert rule_for("include/cutlass_like/gemm.cuh", rules).owners == ("@cutlass", "@gemm")
    assert rule_for("oob_store.cu", rules).owners == ("@everyone",)
    # a rule with no owners takes ownership away
    assert rule_for("include/cutlass_like/legacy/old.cuh", rules).owners == ()
    assert rule_for("weird#name.cu", rules).owners == ("@hash",)
    assert rule_for("include/store.cuh", rules).line == 3


def test_negation_is_refused_with_its_line(tmp_path):
    owners = tmp_path / "CODEOWNERS"
    owners.write_text("*.cu @a\n!oob_store.cu\n")
    with pytest.raises(BadOption, match="line 2"):
        load_owners(owners)


def test_an_unreadable_owners_file_is_a_bad_option(tmp_path):
    with pytest.raises(BadOption, match="--owners"):
        load_owners(tmp_path / "missing")
