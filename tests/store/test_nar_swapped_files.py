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


@pytest.mark.parametrize("change", ["grows", "shrinks"])
def test_scan_for_hashes_reads_no_more_than_the_listed_size(tmp_path, monkeypatch, change):
    # A file that grew after it was opened was read to its new end (no bound: one that kept growing
    # kept the scan going), one that shrank was scanned short; both now fail as the NAR passes do.
    root = tmp_path / "out"
    root.mkdir()
    f = root / "f"
    f.write_bytes(b"listed " * 1000)
    hash_part = "1" * 32
    real_open = nar.open_listed

    def open_then_change(path, st):
        fd = real_open(path, st)
        with open(f, "r+b") as w:
            if change == "grows":
                w.seek(0, 2)
                w.write(b"/store/" + hash_part.encode() + b"-later\n")
            else:
                w.truncate(10)
        return fd

    monkeypatch.setattr(nar, "open_listed", open_then_change)
    with pytest.raises(OSError, match="changed size"):
        nar.scan_for_hashes(root, [hash_part])


@pytest.mark.parametrize("kind", ["symlink", "socket"])
def test_a_file_swapped_for_a_link_or_a_socket_is_named_so(tmp_path, kind):
    # The open fails for these (O_NOFOLLOW: ELOOP; a socket: ENXIO); the error said only
    # "[Errno 40] Too many levels of symbolic links: b'…/f'" (or "No such device or address").
    import socket

    f = tmp_path / "f"
    f.write_bytes(b"listed\n")
    st = os.lstat(f)
    f.unlink()
    sock = None
    if kind == "symlink":
        os.symlink("/etc/passwd", f)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(os.fspath(f))
    try:
        with pytest.raises(OSError, match=f"changed while being archived.*a {'symbolic link' if kind == 'symlink' else 'socket'}"):
            nar.TreePass(None).run(os.fsencode(f), st)
    finally:
        if sock is not None:
            sock.close()


def test_tree_pass_refuses_a_directory_swapped_for_a_link_to_another(tmp_path, monkeypatch):
    # A directory listed (lstat), then swapped for a symbolic link to a directory elsewhere: its listing
    # went through the link and each entry was checked against itself, so the NAR held the other tree.
    root = tmp_path / "out"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_bytes(b"mine\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "f").write_bytes(b"secret\n")
    real_lstat = os.lstat
    swapped = []

    def lstat_then_swap(path, *args, **kwargs):
        st = real_lstat(path, *args, **kwargs)
        if os.fsdecode(path) in (str(root / "d"), "d") and not swapped:
            (root / "d").rename(tmp_path / "moved")
            os.symlink(elsewhere, root / "d")
            swapped.append(True)
        return st

    monkeypatch.setattr(nar.os, "lstat", lstat_then_swap)
    with pytest.raises(OSError, match="changed while being archived"):
        nar.TreePass(None).run(os.fsencode(root))
    assert swapped
