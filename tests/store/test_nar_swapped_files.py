"""A file listed as regular and swapped before it is opened: the NAR passes refuse it, they never wait on it.

Each pass lstats an entry, then opens it. A FIFO put in its place would make a plain open wait for a
writer forever; the tests hold a writer open (O_RDWR on the FIFO) so that the old code does not hang
but reads the FIFO's bytes as the file's contents, which is the other half of the fault.
"""

from __future__ import annotations

import os

import pytest

from cudapkgs.store import nar


def _fifo_in_place_of(path, data: bytes) -> int:
    """Replace `path` by a FIFO holding `data`; the descriptor that keeps a writer on it (close it)."""
    os.unlink(path)
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    os.write(fd, data)
    return fd


def _other_file_in_place_of(path, data: bytes) -> None:
    """Replace `path` by a new regular file (another inode: written beside, renamed over)."""
    beside = f"{path}.new"
    with open(beside, "wb") as f:
        f.write(data)
    os.replace(beside, path)


def test_tree_pass_refuses_a_small_file_swapped_for_a_fifo(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"listed\n")
    st = os.lstat(f)
    fd = _fifo_in_place_of(f, b"fifo!!\n")  # as many bytes as the listing saw
    try:
        with pytest.raises(OSError, match="changed while being archived.*a FIFO"):
            nar.TreePass(None).run(os.fsencode(f), st)
    finally:
        os.close(fd)


@pytest.mark.parametrize("size", [100, nar.CHUNK + 100])  # one read; the chunked path
def test_tree_pass_refuses_a_file_replaced_by_another_of_the_same_size(tmp_path, size):
    f = tmp_path / "f"
    f.write_bytes(b"a" * size)
    st = os.lstat(f)
    _other_file_in_place_of(f, b"b" * size)
    with pytest.raises(OSError, match="changed while being archived.*another inode"):
        nar.TreePass(None).run(os.fsencode(f), st)


def test_tree_pass_still_hashes_a_tree_as_dump_does(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "small").write_bytes(b"x" * 10)
    (tmp_path / "d" / "large").write_bytes(os.urandom(nar.CHUNK * 2 + 5))
    os.symlink("small", tmp_path / "d" / "link")
    want = nar.nar_hash(tmp_path / "d")
    assert nar.TreePass(None).run(os.fsencode(tmp_path / "d")) == want


def test_dump_refuses_a_file_swapped_for_a_fifo(tmp_path, monkeypatch):
    f = tmp_path / "f"
    f.write_bytes(b"listed\n")
    real_lstat = os.lstat
    writers = []

    def lstat_then_swap(path, *args, **kwargs):
        st = real_lstat(path, *args, **kwargs)
        if os.fsdecode(path) == str(f) and not writers:
            writers.append(_fifo_in_place_of(f, b"fifo!!\n"))
        return st

    monkeypatch.setattr(nar.os, "lstat", lstat_then_swap)
    try:
        with pytest.raises(OSError, match="changed while being archived.*a FIFO"):
            b"".join(nar.dump(f))
    finally:
        for fd in writers:
            os.close(fd)


def test_scan_for_hashes_refuses_a_file_replaced_after_the_listing(tmp_path, monkeypatch):
    # (Not a FIFO here: the old code's buffered read of one would wait for more bytes forever.)
    root = tmp_path / "out"
    root.mkdir()
    (root / "f").write_bytes(b"listed\n")
    real_walk = nar.walk

    def walk_then_swap(path):
        for rel, st in real_walk(path):
            if rel == "f":
                _other_file_in_place_of(root / "f", b"other!\n")
            yield rel, st

    monkeypatch.setattr(nar, "walk", walk_then_swap)
    with pytest.raises(OSError, match="changed while being archived.*another inode"):
        nar.scan_for_hashes(root, ["0" * 32])


def test_open_span_refuses_a_large_file_replaced_after_dump_parts_listed_it(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"a" * 1000)
    spans = [p for p in nar.dump_parts(f, 10) if isinstance(p, nar.FileSpan)]
    assert len(spans) == 1
    fd = nar.open_span(spans[0])  # unchanged: opens
    os.close(fd)
    _other_file_in_place_of(f, b"b" * 1000)
    with pytest.raises(OSError, match="another inode"):
        nar.open_span(spans[0])
