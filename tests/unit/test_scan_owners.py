"""CODEOWNERS rules as `scan --owners` reads them: gitignore's patterns, the last match wins."""

from __future__ import annotations

import random
import re

import pytest

from postmortem.errors import BadOption
from postmortem.scan.fleet.owners import (
    MAX_OWNER_PATTERN_CHARS,
    MAX_OWNER_RULES,
    MAX_PATTERN_CHARS,
    load_owners,
    parse_owners,
    rule_for,
)

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


def _reference_regex(pattern):
    """The straightforward translation of a gitignore pattern to a regex (one that can
    backtrack exponentially), kept as the oracle that the linear one must agree with."""
    folder_only = pattern.endswith("/")
    anchored = "/" in pattern.rstrip("/")
    body = pattern.strip("/")
    out = "" if anchored else "(?:.*/)?"
    i = 0
    while i < len(body):
        if body.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif body.startswith("/**", i) and i + 3 == len(body):
            out, i = out + "/.*", i + 3
        elif body.startswith("**", i):
            out, i = out + ".*", i + 2
        elif body[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif body[i] == "?":
            out, i = out + "[^/]", i + 1
        elif body[i] == "[":
            end = body.index("]", i)
            out, i = out + body[i : end + 1], end + 1
        else:
            out, i = out + re.escape(body[i]), i + 1
    return re.compile(f"^{out}" + ("/.+$" if folder_only else "(?:/.+)?$"))


def _random_pattern(rng):
    segments = []
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.2:
            segments.append("**")
            continue
        glob = ""
        for _ in range(rng.randint(1, 4)):
            atom = rng.choice(["a", "b", "*", "?", "[ab]"])
            glob += "" if atom == "*" and glob.endswith("*") else atom
        segments.append(glob)
    pattern = "/".join(segments)
    return ("/" if rng.random() < 0.3 else "") + pattern + ("/" if rng.random() < 0.3 else "")


def test_patterns_agree_with_the_plain_regex_translation():
    # GIVEN random patterns of segments, ** segments, anchors and folder slashes, and paths
    rng = random.Random(36)
    agreed = matched = 0
    for _ in range(1500):
        pattern = _random_pattern(rng)
        rules, reference = parse_owners(f"{pattern} @x"), _reference_regex(pattern)
        for _ in range(10):
            path = "/".join(
                rng.choice(["a", "b", "ab", "ba", "aab"]) for _ in range(rng.randint(1, 6))
            )
            # THEN each match is the plain translation's
            expected = reference.match(path) is not None
            assert (rule_for(path, rules) is not None) is expected, (pattern, path)
            agreed += 1
            matched += expected
    assert matched > agreed // 10  # the cases match often enough to mean something


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        # 13 stars in one segment, against a long segment: no match, then a match
        ("a" + "*a" * 13 + "*b", "x/" + "a" * 5000, False),
        ("a" + "*a" * 13 + "*b", "x/" + "a" * 5000 + "b", True),
        ("a" + "*a" * 13 + "*b", "x/" + "a" * 13 + "b", False),  # 14 a's are needed
        ("a" + "*a" * 13 + "*b", "x/" + "a" * 14 + "b/y.cu", True),
        # 8 stars against a path of long segments
        ("*" + "a*" * 8 + "b", "/".join(["a" * 300] * 30), False),
        ("*" + "a*" * 8 + "b", "/".join(["a" * 300] * 30) + "b", True),
        # many ** segments against a deep path
        ("**/a/" * 13 + "b", "/".join(["a"] * 3000), False),
        ("**/a/" * 13 + "b", "/".join(["a"] * 3000) + "/b", True),
        ("**/a/" * 13 + "b", "/".join(["a"] * 12) + "/b", False),
        ("/a/**/a/**/a/**/b/", "/".join(["a"] * 3000) + "/b/c.cu", True),
    ],
    ids=[
        "13-stars-no",
        "13-stars-yes",
        "13-stars-too-few",
        "13-stars-folder",
        "8-stars-no",
        "8-stars-yes",
        "13-double-no",
        "13-double-yes",
        "13-double-too-few",
        "anchored-doubles-folder",
    ],  # fmt: skip
)
def test_patterns_of_many_stars_against_long_paths(pattern, path, matches):
    rules = parse_owners(f"{pattern} @team")
    assert (rule_for(path, rules) is not None) is matches


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("a[!x]b", "a/b", False),
        ("a[!x]b", "ayb", True),
        ("a?b", "a/b", False),
        ("x[z-a]y.cu", "xay.cu", False),  # a backwards range is empty
        ("x[]a]y", "x]y", True),
        ("x[a-]y", "x-y", True),
        ("src/a**b", "src/a/b", False),  # ** within a segment is a *
        ("src/a**b", "src/axxb", True),
        ("**", "any/path.cu", True),
        ("**/**", "any/path.cu", True),
    ],
)
def test_no_wildcard_but_a_double_star_segment_crosses_a_slash(pattern, path, matches):
    rules = parse_owners(f"{pattern} @team")
    assert (rule_for(path, rules) is not None) is matches


def test_past_the_cap_the_last_rules_are_used_with_a_warning():
    # GIVEN an owners file of more rules than are used, a catch-all first
    count = MAX_OWNER_RULES + 500
    text = "* @everyone\n" + "".join(f"src/d{i}/ @team{i}\n" for i in range(1, count))
    warnings = []
    # WHEN it is read
    rules = parse_owners(text, warnings.append)
    # THEN the last rules are kept (the last match wins), and one line says so
    assert len(rules) == MAX_OWNER_RULES and rules[-1].owners == (f"@team{count - 1}",)
    assert rule_for(f"src/d{count - 1}/k.cu", rules).owners == (f"@team{count - 1}",)
    assert rule_for("src/d1/k.cu", rules) is None  # the first rules are not read
    assert warnings == [
        f"the owners file has {count:,} rules; only the last {MAX_OWNER_RULES:,} (from line "
        f"{count - MAX_OWNER_RULES + 1}) are used: at most {MAX_OWNER_RULES:,} rules and "
        f"{MAX_OWNER_PATTERN_CHARS:,} characters of patterns are read"
    ]


def test_past_the_characters_cap_fewer_rules_are_used(tmp_path):
    # GIVEN an owners file of long patterns, each of them allowed
    path = tmp_path / "CODEOWNERS"
    pattern = "src/" + "d" * (MAX_PATTERN_CHARS - 10)
    path.write_text("".join(f"{pattern}{i:04d} @t{i}\n" for i in range(1000)))
    warnings = []
    rules = load_owners(path, warnings.append)
    # THEN the last ones within the characters cap are kept, and the warning names the file
    assert 0 < len(rules) < 1000 and rules[-1].owners == ("@t999",)
    assert sum(len(r.pattern) for r in rules) <= MAX_OWNER_PATTERN_CHARS
    (warning,) = warnings
    assert warning.startswith(f"{path}: the owners file has 1,000 rules; only the last")


def test_a_pattern_past_the_longest_is_one_error(tmp_path):
    path = tmp_path / "CODEOWNERS"
    path.write_text("*.cu @a\n" + "*a" * MAX_PATTERN_CHARS + " @b\n")
    with pytest.raises(BadOption) as raised:
        load_owners(path)
    assert str(raised.value).endswith(
        f"line 2: a pattern of {2 * MAX_PATTERN_CHARS:,} characters "
        f"(the most is {MAX_PATTERN_CHARS:,})"
    )
    assert "\n" not in str(raised.value)
