"""Finding dumps by content: names do not matter, links out of the tree are not followed."""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import sys

import pytest

from postmortem.scan.discover import is_dump_header, iter_dumps, sniff
from tests.conftest import DUMPS

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

OOB = DUMPS / "oob_store.nvcudmp"
COMPRESS = {"gzip": gzip.compress, "zstd": zstd.compress, "xz": lzma.compress}


def _names(found, root):
    return sorted(str(c.path.relative_to(root)) for c in found)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    shutil.copy(OOB, root / "a" / "b" / "renamed.bin")
    shutil.copy(OOB, root / "plain_name_no_suffix")
    with gzip.open(root / "a" / "packed.gz", "wb") as out:
        out.write(OOB.read_bytes())
    (root / "notes.nvcudmp").write_text("not a dump, whatever its name says")
    (root / "empty").write_bytes(b"")
    host_core = bytearray(OOB.read_bytes()[:64])
    host_core[18:20] = (62).to_bytes(2, "little")  # an x86-64 core file
    (root / "host.core").write_bytes(bytes(host_core))
    with gzip.open(root / "text.gz", "wb") as out:
        out.write(b"hello")
    return root


def test_dumps_are_found_by_content_whatever_their_names(tree):
    # notes.nvcudmp is no dump, but is named like one: the scan reads it and says why it
    # is not (an empty or cut-short dump must not vanish from the results)
    found = list(iter_dumps([tree]))
    assert _names(found, tree) == [
        "a/b/renamed.bin", "a/packed.gz", "notes.nvcudmp", "plain_name_no_suffix",
    ]  # fmt: skip
    assert all(c.unreadable is None for c in found)


def test_header_check_wants_elf64_core_for_cuda():
    head = OOB.read_bytes()[:20]
    assert is_dump_header(head)
    assert not is_dump_header(head[:19])
    assert not is_dump_header(head[:16] + (2).to_bytes(2, "little") + head[18:])  # ET_EXEC
    assert sniff(OOB)


def test_symlinks_out_of_the_tree_are_not_followed_unless_asked(tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(OOB, outside / "elsewhere.nvcudmp")
    os.symlink(outside, tree / "link_to_dir")
    os.symlink(outside / "elsewhere.nvcudmp", tree / "link_to_file")
    os.symlink(tree / "a", tree / "inner_link")  # inside the tree: no duplicate
    names = _names(iter_dumps([tree]), tree)
    assert not any("link_to" in n for n in names)
    assert len(names) == 4
    followed = _names(iter_dumps([tree], follow_symlinks=True), tree)
    assert len(followed) == 5
    assert any(n.startswith("link_to") for n in followed)


def test_a_symlink_loop_ends(tree):
    os.symlink(tree, tree / "a" / "loop")
    assert len(list(iter_dumps([tree], follow_symlinks=True))) == 4


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_named_like_a_dump_is_reported(tree):
    locked = tree / "locked.nvcudmp"
    shutil.copy(OOB, locked)
    locked.chmod(0)
    found = {c.path.name: c for c in iter_dumps([tree])}
    assert found["locked.nvcudmp"].unreadable


def test_a_file_root_is_taken_as_it_is(tree):
    found = list(iter_dumps([tree / "notes.nvcudmp", tree / "notes.nvcudmp"]))
    assert [c.path.name for c in found] == ["notes.nvcudmp"]


def test_a_file_named_as_a_root_is_kept_though_its_folder_was_walked_first(tree):
    found = list(iter_dumps([tree, tree / "empty"]))
    assert "empty" in [c.path.name for c in found]


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_compressed_dumps_are_found_by_their_decompressed_header(tmp_path, codec):
    compress = COMPRESS[codec]
    data = OOB.read_bytes()
    host_core = bytearray(data[:64])
    host_core[18:20] = (62).to_bytes(2, "little")
    files = {
        "packed": compress(data),
        "text": compress(b"hello"),
        "host": compress(bytes(host_core)),
        "cut": compress(data)[:12],
        "damaged": compress(data)[:8] + bytes(64),
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    assert {name: sniff(tmp_path / name) for name in files} == {
        "packed": True, "text": False, "host": False, "cut": False, "damaged": False,
    }  # fmt: skip
    assert _names(iter_dumps([tmp_path]), tmp_path) == ["packed"]
