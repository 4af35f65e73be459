"""nar_restore's reader: whatever the chunk boundaries, the same tree and hash; a file's entry is a
dozen reads; every malformed token is still refused."""

from __future__ import annotations

import hashlib
import io
import os
import random
import struct

import pytest

from cudapkgs.store import nar
from cudapkgs.store.nar_restore import HashingReader, NarFormatError, restore


def _s(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data + b"\0" * (-len(data) % 8)


def _file(data: bytes, executable: bool = False) -> bytes:
    flag = _s(b"executable") + _s(b"") if executable else b""
    return _s(b"(") + _s(b"type") + _s(b"regular") + flag + _s(b"contents") + _s(data) + _s(b")")


def _dir(*entries: tuple[bytes, bytes]) -> bytes:
    body = b"".join(_s(b"entry") + _s(b"(") + _s(b"name") + _s(n) + _s(b"node") + node + _s(b")") for n, node in entries)
    return _s(b"(") + _s(b"type") + _s(b"directory") + body + _s(b")")


def _link(target: bytes) -> bytes:
    return _s(b"(") + _s(b"type") + _s(b"symlink") + _s(b"target") + _s(target) + _s(b")")


class _Chunks:
    """A source returning `size`-byte reads of `data` (whatever is asked), remembering each one returned."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.at, self.given = data, size, 0, []

    def read(self, n: int = -1) -> bytes:
        out = self.data[self.at : self.at + self.size]
        self.at += len(out)
        self.given.append(out)
        return out


def _tree(rng: random.Random) -> bytes:
    entries = []
    for i, name in enumerate(sorted(rng.sample([b"a", b"bb", b"c.h", b"d" * 13, b"exe", b"lnk", b"sub", b"z" * 40], 6))):
        if name == b"sub":
            entries.append((name, _dir((b"x", _file(os.urandom(rng.randrange(0, 300)))), (b"y", _link(b"../" + name)))))
        elif name == b"lnk":
            entries.append((name, _link(b"/some/where/" + bytes([97 + i]) * rng.randrange(1, 20))))
        else:
            entries.append((name, _file(rng.randbytes(rng.randrange(0, 5000)), executable=name == b"exe")))
    return _s(b"nix-archive-1") + _dir(*entries)


@pytest.mark.parametrize("size", [1, 3, 8, 13, 64, 4096, 1 << 17])
def test_any_chunk_size_gives_the_same_tree_and_hash(tmp_path, size):
    rng = random.Random(size)
    for round_ in range(3):
        stream = _tree(rng)
        out = tmp_path / f"out-{round_}"
        reader = restore(HashingReader(_Chunks(stream, size), chunk=size), out)
        assert reader.sha256.digest() == hashlib.sha256(stream).digest() and reader.size == len(stream)
        # The tree dumps back to the very same NAR.
        assert b"".join(nar.dump(out)) == stream


def test_a_directory_entry_is_a_dozen_reads_not_three_per_token(tmp_path):
    """Fixed runs of tokens are read and compared whole: 1,876 files were 68,000 small reads before."""
    names = sorted(b"f%04d" % i for i in range(200))
    stream = _s(b"nix-archive-1") + _dir(*((n, _file(n * 3)) for n in names))

    class Counting(HashingReader):
        calls = 0

        def read_exact(self, n):
            Counting.calls += 1
            return super().read_exact(n)

    reader = restore(Counting(io.BytesIO(stream)), tmp_path / "out")
    assert reader.size == len(stream) and sorted(os.listdir(tmp_path / "out")) == [n.decode() for n in names]
    # Each file: entry; ( name; the name (2); node ( type; regular (2); contents (2); the size; padding and ); ).
    assert Counting.calls <= 12 * len(names) + 8  # 34 a file before


@pytest.mark.parametrize("size", [1, 5, 16, 1 << 17])
@pytest.mark.parametrize("bad, match", [
    (lambda s: s.replace(_s(b"entry"), _s(b"entrx"), 1), "expected 'entry' or '\\)'"),
    (lambda s: s.replace(_s(b"node"), _s(b"nade"), 1), "expected 'node'"),
    (lambda s: s.replace(_s(b"type"), _s(b"typo"), 1), "expected 'type'"),
    (lambda s: s.replace(_s(b"name"), _s(b"nam"), 1), "expected 'name'"),
    (lambda s: s.replace(_s(b"b") , struct.pack("<Q", 1) + b"b\0\0\0\0\0\0\x01", 1), "non-zero padding"),  # a name's padding
    (lambda s: s.replace(_s(b"hello"), struct.pack("<Q", 5) + b"hello\0\0\x07", 1), "non-zero padding"),  # a file's
    (lambda s: s.replace(_s(b"hello") + _s(b")"), _s(b"hello") + _s(b"]"), 1), "expected '\\)'"),
    (lambda s: s.replace(_s(b"regular"), _s(b"regulax"), 1), "unknown node type"),
    (lambda s: s[:-3], "truncated"),
    (lambda s: s[:-16 * 3 - 4], "truncated"),
    (lambda s: s + b"\0" * 8, "trailing"),
])
def test_malformed_tokens_are_refused_at_any_chunk_size(tmp_path, size, bad, match):
    good = _s(b"nix-archive-1") + _dir((b"a", _file(b"hello")), (b"b", _dir((b"c", _file(b"x" * 9)))))
    restore(HashingReader(_Chunks(good, size), chunk=size), tmp_path / "good")
    stream = bad(good)
    assert stream != good
    with pytest.raises(NarFormatError, match=match):
        restore(HashingReader(_Chunks(stream, size), chunk=size), tmp_path / "out")


def test_the_declared_size_bounds_the_read(tmp_path):
    stream = _s(b"nix-archive-1") + _file(b"x" * 1000)
    with pytest.raises(NarFormatError, match="longer than the 999 bytes"):
        restore(HashingReader(io.BytesIO(stream), chunk=64, limit=999), tmp_path / "out")
    restore(HashingReader(io.BytesIO(stream), chunk=64, limit=len(stream)), tmp_path / "ok")
