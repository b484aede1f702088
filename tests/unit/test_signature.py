"""Crash signatures: path normalization, library frames, versioning, quality."""

from __future__ import annotations

import fnmatch
import json
import os
import random
import time
from pathlib import Path

import pytest

from postmortem.analysis.fault.source import PathMap
from postmortem.analysis.fleet.signature import (
    MAX_LIBRARY_PATHS,
    MAX_PATTERN_CHARS,
    MAX_RULES_BYTES,
    SIGNATURE_VERSION,
    SignatureInput,
    SignatureRules,
    compute_signature,
    is_library,
    load_rules,
    normalize_path,
    read_key,
)
from postmortem.cubin.sass import SourceFrame
from postmortem.errors import UnreadableFile
from tests.fifo import rescued

RULES = SignatureRules("test", ("cute/arch/*", "cub/*", "cuda_fp16.hpp"), 2)
CORPUS_NAMES = Path(__file__).parents[2] / "fixtures" / "corpus" / "kernel_names.txt"


def test_normalize_path_applies_first_matching_map_and_normalizes():
    maps = (PathMap("/build/ci/123/", "src/"), PathMap("/build/", "other/"))
    assert normalize_path("/build/ci/123/include/./a/../store.cuh", maps) == "src/include/store.cuh"
    assert normalize_path("C:\\src\\k.cu") == "C:/src/k.cu"
    assert normalize_path("k.cu", maps) == "k.cu"


@pytest.mark.parametrize(
    ("file", "library"),
    [
        ("/usr/include/cute/arch/copy_sm90.hpp", True),
        ("cute/arch/mma.hpp", True),
        ("/opt/cub/block/block_load.cuh", True),
        ("/usr/local/cuda/include/cuda_fp16.hpp", True),
        ("/src/my_cuda_fp16.hpp", False),
        ("/src/cute_arch/x.hpp", False),
        ("/src/kernel.cu", False),
    ],
)
def test_library_paths_match_whole_path_tails(file, library):
    assert is_library(file, RULES) is library


def _facts(chain, kernel="_Z1kPf", offset=0x40, exception=14, lines=True):
    frames = tuple(SourceFrame(f, n) for f, n in chain)
    return SignatureInput(exception, kernel, offset, frames, lines)


def test_library_frames_are_skipped_up_to_first_in_app_frame():
    chain = [("/i/cute/arch/copy.hpp", 5), ("/i/cub/load.cuh", 9), ("/s/a.cu", 3), ("/s/b.cu", 7)]
    sig = compute_signature(_facts(chain), RULES)
    assert sig.frames == ("/s/a.cu:3", "/s/b.cu:7")
    assert sig.skipped == 2
    assert [f.library for f in sig.all_frames] == [True, True, False, False]
    assert len(sig.all_frames) == 4  # the full list is kept beside the short signature
    assert sig.quality.in_app_frame and sig.quality.score == 3


def test_all_library_frames_keep_the_innermost_and_lower_quality():
    chain = [("/i/cute/arch/copy.hpp", 5), ("/i/cub/load.cuh", 9), ("/i/cub/x.cuh", 1)]
    sig = compute_signature(_facts(chain), RULES)
    assert sig.frames == ("/i/cute/arch/copy.hpp:5", "/i/cub/load.cuh:9")
    assert sig.quality.score == 2 and not sig.quality.in_app_frame
    assert "library" in (sig.quality.advice or "")


def test_signature_ignores_load_address_and_frames_past_top():
    chain = [("/s/a.cu", 3), ("/s/b.cu", 7)]
    one = compute_signature(_facts(chain + [("/s/c.cu", 1)]), RULES)
    two = compute_signature(_facts(chain + [("/s/d.cu", 9)]), RULES)
    assert one.id == two.id  # only top_frames=2 frames count


def test_distinct_offsets_lines_and_exceptions_give_distinct_signatures():
    chain = [("/s/a.cu", 3)]
    base = compute_signature(_facts(chain), RULES)
    others = [
        compute_signature(_facts(chain, offset=0x50), RULES),
        compute_signature(_facts([("/s/a.cu", 4)]), RULES),
        compute_signature(_facts(chain, exception=6), RULES),
        compute_signature(_facts(chain, kernel="_Z1jPf"), RULES),
    ]
    assert len({base.id} | {s.id for s in others}) == 5
    # the coarse key (exception + kernel) still joins the first two with the base
    assert others[0].coarse_id == others[1].coarse_id == base.coarse_id
    assert others[2].coarse_id != base.coarse_id


def test_path_maps_make_two_build_machines_agree():
    one = compute_signature(
        _facts([("/home/alice/proj/k.cu", 3)]), RULES, (PathMap("/home/alice/", "/"),)
    )
    two = compute_signature(
        _facts([("/builds/ci/proj/k.cu", 3)]), RULES, (PathMap("/builds/ci/", "/"),)
    )
    assert one.frames == two.frames == ("/proj/k.cu:3",)
    assert one.id == two.id


def test_key_is_versioned_and_records_rules_and_components():
    sig = compute_signature(_facts([("/s/a.cu", 3)]), RULES)
    assert sig.version == SIGNATURE_VERSION
    assert sig.key.startswith(f"v{SIGNATURE_VERSION}|Warp Illegal Address|k|+0x40|")
    assert sig.rules == f"test@{RULES.digest}"
    assert sig.components == ("exception", "kernel", "offset", "frames")


def test_no_line_info_says_rebuild_with_lineinfo():
    sig = compute_signature(_facts([], lines=False), RULES)
    assert sig.components == ("exception", "kernel", "offset")
    assert sig.quality.score == 1
    assert "-lineinfo" in (sig.quality.advice or "")


def test_unresolved_pc_and_hang_have_honest_components():
    sig = compute_signature(SignatureInput(14, None, None, (), None), RULES)
    assert sig.kernel == "<unknown kernel>" and sig.components == ("exception",)
    assert sig.quality.score == 0 and sig.quality.advice
    hang = compute_signature(SignatureInput(None, "_Z1kPf", 0x80, (), None), RULES)
    assert hang.exception == "no exception"


def test_default_rules_are_packaged_data():
    rules = load_rules()
    assert rules.name == "default"
    assert "cute/arch/*" in rules.library_paths and "cuda_fp16.hpp" in rules.library_paths
    assert rules.top_frames >= 1


def test_rules_file_is_read_and_checked(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"name": "mine", "library_paths": ["x/*"], "top_frames": 1}))
    assert load_rules(path) == SignatureRules("mine", ("x/*",), 1)
    path.write_text(json.dumps({"library_paths": ["x/*"]}))
    with pytest.raises(ValueError, match="top_frames"):
        load_rules(path)


def test_other_rules_change_the_rules_digest():
    assert RULES.digest != SignatureRules("test", ("cub/*",), 2).digest


def test_version_2_keys_carry_the_innermost_in_app_function():
    # GIVEN a chain whose innermost frame is a library's, then pm::store<float>'s
    chain = (SourceFrame("/i/cute/arch/copy.hpp", 5), SourceFrame("/s/store.cuh", 10))
    functions = ("_ZN4cute4copyEv", "_ZN2pm5storeIfEEvPT_iS1_")
    facts = SignatureInput(14, "_Z1kPf", 0x40, chain, True, functions)
    # WHEN signed
    sig = compute_signature(facts, RULES)
    # THEN the in-app frame's function, normalized, is a component of the key
    assert sig.function == "pm::store<>"
    assert sig.key == "v4|Warp Illegal Address|k|+0x40|pm::store<>|/s/store.cuh:10"
    assert sig.components == ("exception", "kernel", "offset", "function", "frames")
    # AND the same lines under another function are another signature
    other = SignatureInput(14, "_Z1kPf", 0x40, chain, True, (None, "_ZN2pm4loadIfEEvPT_iS1_"))
    assert compute_signature(other, RULES).id != sig.id


def test_a_frame_no_source_names_leaves_the_function_unknown():
    sig = compute_signature(_facts([("/s/a.cu", 3)]), RULES)
    assert sig.function is None and "|+0x40|?|/s/a.cu:3" in sig.key


@pytest.mark.parametrize(
    ("key", "parts"),
    [
        (
            "v1|Warp Illegal Address|oob_kernel|+0xd0|include/store.cuh:10 < oob_store.cu:19",
            {"version": "1", "exception": "Warp Illegal Address", "kernel": "oob_kernel",
             "offset": "+0xd0", "frames": "include/store.cuh:10 < oob_store.cu:19"},
        ),
        (
            "v2|Warp Illegal Address|ns::operator|<>|+0xd0|pm::store<>|store.cuh:10",
            {"version": "2", "exception": "Warp Illegal Address", "kernel": "ns::operator|<>",
             "offset": "+0xd0", "function": "pm::store<>", "frames": "store.cuh:10"},
        ),
        (
            "v2|no exception|k|?|?|",
            {"version": "2", "exception": "no exception", "kernel": "k", "offset": "?",
             "function": "?", "frames": ""},
        ),
        (
            "v4|Warp Assert|assert|Loss.cu:244|nll_loss_forward|t >= 0 || t < n_classes",
            {"version": "4", "exception": "Warp Assert", "place": "Loss.cu:244",
             "function": "nll_loss_forward", "message": "t >= 0 || t < n_classes"},
        ),
        (
            "v3|Warp Illegal Address|cutlass::device_kernel<flash::FlashAttnFwdSm90<>>|+0x40|?|",
            {"version": "3", "exception": "Warp Illegal Address",
             "kernel": "cutlass::device_kernel<flash::FlashAttnFwdSm90<>>", "offset": "+0x40",
             "function": "?", "frames": ""},
        ),
    ],
)  # fmt: skip
def test_keys_of_every_version_stay_readable(key, parts):
    assert read_key(key) == parts


def test_a_key_of_no_known_version_is_refused():
    for key in ("v9|x|k|+0x1|f", "Warp Illegal Address|k", "v1|x|k|f"):
        with pytest.raises(ValueError):
            read_key(key)


def test_read_key_reads_what_compute_signature_writes():
    sig = compute_signature(_facts([("/s/a.cu", 3), ("/s/b.cu", 7)]), RULES)
    parts = read_key(sig.key)
    assert (parts["kernel"], parts["offset"], parts["frames"]) == (
        "k",
        "+0x40",
        " < ".join(sig.frames),
    )


def test_a_rules_fifo_no_one_writes_is_refused_at_once(tmp_path):
    # GIVEN --rules naming a FIFO that no process writes to
    fifo = tmp_path / "rules.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    # WHEN the rules are loaded
    with rescued(fifo), pytest.raises(UnreadableFile) as caught:
        load_rules(fifo)
    # THEN one line says what it is, at once
    assert time.monotonic() - started < 5
    assert str(caught.value) == f"{fifo}: cannot read: not a regular file (a FIFO)"


def test_a_rules_file_past_the_bound_is_refused(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(
        json.dumps({"library_paths": ["x/*"] * (MAX_RULES_BYTES // 6), "top_frames": 1})
    )
    with pytest.raises(UnreadableFile, match="larger than"):
        load_rules(path)


def test_rules_nested_too_deeply_are_one_error(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text("[" * 100_000)
    with pytest.raises(ValueError, match=r"^signature rules: not JSON: nested too deeply$"):
        load_rules(path)


def test_wrapper_kernels_of_different_operators_key_apart():
    # GIVEN a CUTLASS GEMM and FlashAttention-3, both launched as cutlass::device_kernel<…>
    # (their real names, from vllm 0.33.0's cubins in fixtures/corpus)
    names = [line.strip() for line in CORPUS_NAMES.read_text().splitlines()]
    gemm = next(
        n
        for n in names
        if n.startswith("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversal")
    )
    fa3 = next(
        n for n in names if "FlashAttnFwdSm90" in n and n.startswith("_ZN7cutlass13device_kernel")
    )
    keys = [compute_signature(_facts((), kernel=name), RULES) for name in (gemm, fa3)]
    # THEN their coarse keys differ, each naming the operator
    assert keys[0].coarse_key != keys[1].coarse_key
    assert keys[0].kernel == "cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<>>"
    assert keys[1].kernel == (
        "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<>>>"
    )


def _tails_match(file, patterns):
    """What a library path means, said plainly: fnmatch on the whole path or any tail."""
    parts = file.split("/")
    tails = ["/".join(parts[i:]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(tail, p) for p in patterns for tail in tails)


def test_library_paths_agree_with_fnmatch_on_every_tail():
    # GIVEN random patterns (stars, ?, brackets, a lone '[') and random paths
    rng = random.Random(36)
    atoms = ["a", "b", "/", "*", "?", "[ab]", "[!a]", "[]a]", "[", "[*]", "**"]
    agreed = matched = 0
    for _ in range(3000):
        patterns = tuple(
            "".join(rng.choice(atoms) for _ in range(rng.randint(1, 6)))
            for _ in range(rng.randint(1, 3))
        )
        rules = SignatureRules("random", patterns, 1)
        for _ in range(10):
            file = "".join(rng.choice(["a", "b", "/", "ab", "*", "["]) for _ in range(8))
            # THEN is_library says what fnmatch on each tail says
            expected = _tails_match(file, patterns)
            assert is_library(file, rules) is expected, (patterns, file)
            agreed += 1
            matched += expected
    assert matched > agreed // 10


def test_many_library_paths_against_a_long_path_are_still_right():
    # GIVEN the most patterns a rules file may set, each with stars, and a deep path
    patterns = tuple(f"a*a*a*x{i}" for i in range(MAX_LIBRARY_PATHS))
    rules = SignatureRules("many", patterns, 1)
    deep = "/".join(["a" * 20] * 200)
    # THEN only a path whose tail one of them matches is a library's
    assert not is_library(deep, rules)
    assert is_library(f"{deep}/x{MAX_LIBRARY_PATHS - 1}", rules)
    assert is_library(f"{deep}x7", rules)  # '*' crosses '/'


def test_past_the_cap_the_first_library_paths_are_used_with_a_warning(tmp_path):
    # GIVEN a rules file of 200,000 library paths (1.6 MB: under the bytes cap)
    path = tmp_path / "rules.json"
    paths = [f"lib{i}/*" for i in range(200_000)]
    path.write_text(json.dumps({"name": "big", "library_paths": paths, "top_frames": 2}))
    warnings = []
    # WHEN it is read
    rules = load_rules(path, warnings.append)
    # THEN the first MAX_LIBRARY_PATHS are used, and one line says so, naming the file
    assert rules.library_paths == tuple(paths[:MAX_LIBRARY_PATHS])
    assert warnings == [
        f"{path}: 200,000 library_paths; only the first {MAX_LIBRARY_PATHS:,} are used, "
        f"the most read"
    ]
    assert is_library("/x/lib0/a.h", rules) and not is_library(
        f"/x/lib{MAX_LIBRARY_PATHS}/a.h", rules
    )


def test_a_library_path_past_the_longest_is_refused(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"library_paths": ["*a" * MAX_PATTERN_CHARS], "top_frames": 1}))
    with pytest.raises(ValueError, match=r"^signature rules: a library path of 8,192 characters"):
        load_rules(path)
