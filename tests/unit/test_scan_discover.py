"""Finding dumps by content: names do not matter, links out of the tree are not followed,
loops and deep trees end, only regular files are read, and a folder that cannot be listed
is an error row."""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import signal
import socket
import sys
from pathlib import Path

import pytest

from postmortem.scan.discover.local import is_dump_header, iter_dumps, sniff
from postmortem.scan.work.fingerprint import fingerprint
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


@pytest.fixture
def no_hang():
    """Fails the test, instead of hanging it, when an open or read blocks (on a FIFO)."""

    def expire(_signum, _frame):
        raise TimeoutError("blocked: a FIFO was opened or read")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _deep_tree(root, depth):
    """`depth` nested folders (made one at a time: os.makedirs recurses), a dump at the bottom."""
    root.mkdir()
    folder = root
    for _ in range(depth):
        folder = folder / "d"
        folder.mkdir()
    shutil.copy(OOB, folder / "bottom.nvcudmp")
    return folder


def _remove_deep(root, depth):
    # shutil.rmtree recurses on Python 3.11: take the folders away from the bottom up.
    for level in range(depth, 0, -1):
        folder = root.joinpath(*["d"] * level)
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()


@pytest.mark.parametrize("follow", [False, True], ids=["links-kept-in", "links-followed"])
def test_a_loop_of_links_ends_the_walk_not_the_scan(tree, follow):
    # GIVEN links that lead nowhere but to each other, or to themselves, beside the dumps
    os.symlink("b_link", tree / "a_link")
    os.symlink("a_link", tree / "b_link")
    os.symlink("self_link", tree / "self_link")
    os.symlink("..", tree / "a" / "up")  # a folder loop too
    # WHEN the tree is walked THEN the dumps are found, each once
    found = _names(iter_dumps([tree], follow_symlinks=follow), tree)
    assert found == ["a/b/renamed.bin", "a/packed.gz", "notes.nvcudmp", "plain_name_no_suffix"]


def test_a_tree_1000_folders_deep_is_walked(tmp_path):
    # GIVEN a dump 1,000 folders down (a recursive walk ran out of stack here)
    bottom = _deep_tree(tmp_path / "deep", 1000)
    try:
        # WHEN it is walked THEN the dump is found, readable
        found = list(iter_dumps([tmp_path / "deep"]))
        assert [(c.path, c.unreadable) for c in found] == [(bottom / "bottom.nvcudmp", None)]
    finally:
        _remove_deep(tmp_path / "deep", 1000)


def test_a_folder_gone_since_its_parent_was_listed_is_an_error_row(tmp_path):
    # GIVEN a tree whose first dump sorts before a folder holding another
    shutil.copy(OOB, tmp_path / "a.nvcudmp")
    (tmp_path / "b").mkdir()
    shutil.copy(OOB, tmp_path / "b" / "lost.nvcudmp")
    (tmp_path / "c").mkdir()
    shutil.copy(OOB, tmp_path / "c" / "kept.nvcudmp")
    walk = iter_dumps([tmp_path])
    # WHEN the folder is removed after the top folder was listed, before it is entered
    assert next(walk).path == tmp_path / "a.nvcudmp"
    shutil.rmtree(tmp_path / "b")
    rest = list(walk)
    # THEN it is an error row naming it and why, and the walk goes on past it
    assert [(c.path, c.unreadable) for c in rest] == [
        (tmp_path / "b", "cannot list folder: No such file or directory"),
        (tmp_path / "c" / "kept.nvcudmp", None),
    ]


def _socket(path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    return server


def test_a_root_that_is_no_regular_file_is_an_error_row_unread(tmp_path, no_hang):
    # GIVEN roots that are a character device, a FIFO (no writer: opening it would block),
    # a socket, a loop of links and nothing at all
    os.mkfifo(tmp_path / "core.nvcudmp")
    os.symlink("loop", tmp_path / "loop")
    with _socket(tmp_path / "sock"):
        roots = [Path("/dev/zero"), tmp_path / "core.nvcudmp", tmp_path / "sock",
                 tmp_path / "loop", tmp_path / "missing"]  # fmt: skip
        # WHEN they are walked THEN each is an error row at once, saying what it is
        found = {c.path.name: c.unreadable for c in iter_dumps(roots)}
    assert found == {
        "zero": "cannot read: not a regular file (a character device)",
        "core.nvcudmp": "cannot read: not a regular file (a FIFO)",
        "sock": "cannot read: not a regular file (a socket)",
        "loop": "cannot read: Too many levels of symbolic links",
        "missing": "cannot read: No such file or directory",
    }


@pytest.mark.parametrize("follow", [False, True], ids=["links-kept-in", "links-followed"])
def test_devices_fifos_and_sockets_in_a_tree_are_passed_over(tree, no_hang, follow):
    # GIVEN a FIFO and a socket named like dumps, and a link to /dev/zero, in the tree
    os.mkfifo(tree / "a" / "fifo.nvcudmp")
    os.symlink("/dev/zero", tree / "zero.nvcudmp")
    with _socket(tree / "sock.nvcudmp"):
        # WHEN it is walked THEN only the regular files are read and reported
        found = _names(iter_dumps([tree], follow_symlinks=follow), tree)
    assert found == ["a/b/renamed.bin", "a/packed.gz", "notes.nvcudmp", "plain_name_no_suffix"]


@pytest.mark.parametrize("read", [sniff, fingerprint], ids=["sniff", "fingerprint"])
def test_reading_a_fifo_is_refused_without_blocking(tmp_path, no_hang, read):
    # GIVEN a FIFO where a dump was (no writer: a plain open would wait for one forever)
    os.mkfifo(tmp_path / "core.nvcudmp")
    # WHEN it is sniffed or fingerprinted THEN it is refused at once
    with pytest.raises(OSError, match="not a regular file"):
        read(tmp_path / "core.nvcudmp")
