"""Files written past the page cache are read back past it: the NAR pass and RECORD digests (store/direct_reads.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import hashlib
import mmap
import os
import sys

import pytest

from cudapkgs.hooks import python_record
from cudapkgs.store import direct_reads, nar


def _resident_pages(path) -> int:
    """How many of the file's pages are in the page cache (mincore(2) on a mapping of it)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    size = os.path.getsize(path)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        anchor = (ctypes.c_char * 1).from_buffer(mapped)  # the mapping's address
        address = ctypes.addressof(anchor)
        del anchor  # the mapping may be closed again
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(v & 1 for v in vec)


def _write_past_cache(path, data: bytes) -> bool:
    """Write `data` to `path` and drop it from the page cache; False where the file system has no O_DIRECT."""
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
            probe = mmap.mmap(-1, mmap.PAGESIZE)
            os.preadv(fd, [probe], 0)
        except OSError:
            return False
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return _resident_pages(path) == 0


def _skip_without_o_direct(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
        os.preadv(fd, [mmap.mmap(-1, mmap.PAGESIZE)], 0)
    except OSError:
        pytest.skip(f"{path}: no O_DIRECT on this file system")
    finally:
        os.close(fd)


@pytest.fixture
def notes():
    direct_reads.forget_all()
    yield
    direct_reads.forget_all()


needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "O_DIRECT"),
                                 reason="O_DIRECT and mincore are Linux's")


@needs_linux
@pytest.mark.parametrize("size", [0, 1, 4095, direct_reads.PIECE - 1, direct_reads.PIECE, direct_reads.PIECE + 7,
                                  3 * direct_reads.PIECE + 4096])
def test_pieces_give_the_file_and_one_byte_more_if_it_grew(tmp_path, size):
    data = os.urandom(size + 5)
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        assert b"".join(direct_reads.pieces(fd, size + 5)) == data
        assert b"".join(direct_reads.pieces(fd, size)) == data[: size + 1]  # grew: one byte past is seen
        assert all(len(p) <= direct_reads.PIECE for p in direct_reads.pieces(fd, size + 5))
        assert fcntl.fcntl(fd, fcntl.F_GETFL) == flags  # O_DIRECT cleared again
    finally:
        os.close(fd)


@needs_linux
def test_a_file_noted_as_written_direct_is_hashed_without_filling_the_page_cache(tmp_path, notes):
    data = os.urandom(3 * direct_reads.PIECE + 12345)
    out = tmp_path / "out"
    out.mkdir()
    big = out / "libbig.so"
    if not _write_past_cache(big, data):
        pytest.skip(f"{tmp_path}: no O_DIRECT on this file system, or its pages stay cached")
    (out / "small").write_bytes(b"x" * 100)
    expected = hashlib.sha256(b"".join(nar.dump(out))).digest()
    fd = os.open(big, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # dump read it through the cache
    os.close(fd)
    if _resident_pages(big):
        pytest.skip("the page cache keeps pages past POSIX_FADV_DONTNEED here")
    fd = os.open(big, os.O_RDONLY)
    try:
        direct_reads.remember(fd)
    finally:
        os.close(fd)
    digest, size = nar.TreePass(None).run(os.fsencode(out))
    assert digest == expected
    assert _resident_pages(big) == 0  # the old code read it through the cache: every page resident
    assert python_record.file_digest(big) == (_record(data), len(data))
    assert _resident_pages(big) == 0


def _record(data: bytes) -> str:
    import base64

    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@needs_linux
def test_a_file_not_noted_is_read_as_before(tmp_path, notes):
    data = os.urandom(direct_reads.PIECE + 3)
    out = tmp_path / "out"
    out.mkdir()
    (out / "f").write_bytes(data)
    assert nar.TreePass(None).run(os.fsencode(out))[0] == hashlib.sha256(b"".join(nar.dump(out))).digest()
    assert not direct_reads.written_direct(os.stat(out / "f"))


@needs_linux
def test_a_noted_file_that_grows_while_hashed_is_refused(tmp_path, notes, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    big = out / "big"
    big.write_bytes(os.urandom(2 * direct_reads.PIECE))
    fd = os.open(big, os.O_RDONLY)
    direct_reads.remember(fd)
    os.close(fd)
    read = direct_reads.pieces

    def growing(fd, size):
        for i, piece in enumerate(read(fd, size)):
            if i == 0:
                with open(big, "ab") as handle:
                    handle.write(b"more")
            yield piece

    monkeypatch.setattr(direct_reads, "pieces", growing)
    with pytest.raises(OSError, match="changed size"):
        nar.TreePass(None).run(os.fsencode(out))


@needs_linux
def test_a_reader_closed_early_stops_its_thread_and_clears_o_direct(tmp_path):
    import threading

    path = tmp_path / "f"
    path.write_bytes(os.urandom(8 * direct_reads.PIECE))
    _skip_without_o_direct(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        reader = direct_reads.pieces(fd, 8 * direct_reads.PIECE)
        assert len(next(reader)) == direct_reads.PIECE
        reader.close()
        assert fcntl.fcntl(fd, fcntl.F_GETFL) == flags
        assert not [t for t in threading.enumerate() if t.name == "cudapkgs-direct-read"]
    finally:
        os.close(fd)


@needs_linux
def test_a_failing_read_is_raised_to_the_reader(tmp_path, monkeypatch):
    import errno

    path = tmp_path / "f"
    path.write_bytes(os.urandom(4 * direct_reads.PIECE))
    _skip_without_o_direct(path)
    real = os.preadv
    calls = []

    def failing(fd, buffers, offset):
        calls.append(offset)
        if offset:
            raise OSError(errno.EIO, "the disk failed")
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", failing)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError, match="the disk failed"):
            list(direct_reads.pieces(fd, 4 * direct_reads.PIECE))
    finally:
        os.close(fd)
    assert calls[:2] == [0, direct_reads.PIECE]


def test_notes_are_bounded(notes, tmp_path, monkeypatch):
    monkeypatch.setattr(direct_reads, "_MAX_NOTES", 3)
    files = []
    for i in range(5):
        path = tmp_path / str(i)
        path.write_bytes(b"")
        fd = os.open(path, os.O_RDONLY)
        direct_reads.remember(fd)
        os.close(fd)
        files.append(os.stat(path))
    assert [direct_reads.written_direct(st) for st in files] == [False, False, True, True, True]
