"""nar_restore's reader: whatever the chunk boundaries, the same tree and hash; a file's entry is a
dozen reads; every malformed token is still refused; a `readinto` source fills one reused buffer, and
file contents reach `os.write` as views of it (no copy), whatever it overwrites next."""

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


class _IntoChunks:
    """A source with `readinto` only, filling at most `size` bytes a call (fewer at random: short reads)."""

    def __init__(self, data: bytes, size: int, seed: int = 0) -> None:
        self.data, self.size, self.at, self.rng = data, size, 0, random.Random(seed)

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.size, len(self.data) - self.at)
        if n > 1 and self.rng.random() < 0.3:
            n = self.rng.randrange(1, n)
        buffer[:n] = self.data[self.at : self.at + n]
        self.at += n
        return n


def _source(kind: str, data: bytes, size: int):
    return _Chunks(data, size) if kind == "read" else _IntoChunks(data, size, seed=size)


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


@pytest.mark.parametrize("kind", ["read", "readinto"])
@pytest.mark.parametrize("size", [1, 3, 8, 13, 64, 4096, 1 << 17])
def test_any_chunk_size_gives_the_same_tree_and_hash(tmp_path, size, kind):
    rng = random.Random(size)
    for round_ in range(3):
        stream = _tree(rng)
        out = tmp_path / f"out-{round_}"
        reader = restore(HashingReader(_source(kind, stream, size), chunk=size), out)
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
@pytest.mark.parametrize("kind", ["read", "readinto"])
def test_malformed_tokens_are_refused_at_any_chunk_size(tmp_path, size, bad, match, kind):
    good = _s(b"nix-archive-1") + _dir((b"a", _file(b"hello")), (b"b", _dir((b"c", _file(b"x" * 9)))))
    restore(HashingReader(_source(kind, good, size), chunk=size), tmp_path / "good")
    stream = bad(good)
    assert stream != good
    with pytest.raises(NarFormatError, match=match):
        restore(HashingReader(_source(kind, stream, size), chunk=size), tmp_path / "out")


def test_the_declared_size_bounds_the_read(tmp_path):
    stream = _s(b"nix-archive-1") + _file(b"x" * 1000)
    with pytest.raises(NarFormatError, match="longer than the 999 bytes"):
        restore(HashingReader(io.BytesIO(stream), chunk=64, limit=999), tmp_path / "out")
    restore(HashingReader(io.BytesIO(stream), chunk=64, limit=len(stream)), tmp_path / "ok")


def test_contents_reach_write_as_views_of_one_reused_buffer(tmp_path, monkeypatch):
    """Issue 34: no copy of file contents in Python. Every `os.write` of a zstd NAR's contents gets a
    view of the reader's one buffer (bytes slices before: a copy of each file's first and last piece)."""
    import zstandard

    from cudapkgs.store import nar_restore

    rng = random.Random(7)
    stream = _s(b"nix-archive-1") + _dir(*((b"f%02d" % i, _file(rng.randbytes(rng.randrange(1, 70000)))) for i in range(40)))
    compressed = zstandard.ZstdCompressor().compress(stream)
    given = []
    real_write = os.write

    def write(fd, data):
        given.append(data)
        return real_write(fd, data)

    monkeypatch.setattr(nar_restore.os, "write", write)
    source = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(compressed), read_across_frames=True)
    reader = restore(HashingReader(source, chunk=1 << 16), tmp_path / "out")
    assert reader.sha256.digest() == hashlib.sha256(stream).digest()
    assert b"".join(nar.dump(tmp_path / "out")) == stream
    assert given and all(isinstance(d, memoryview) for d in given)
    assert len({id(d.obj) for d in given}) == 1  # one buffer, reused for every chunk


@pytest.mark.parametrize("size", [1, 7, 64, 4096])
def test_a_scanner_sees_the_same_bytes_from_a_reused_buffer(tmp_path, size):
    """The scanner keeps a tail of each piece across reads: from a reused buffer it gets copies, so a
    store path split across two reads (or many) is still found, and nothing else is."""
    from cudapkgs.store.paths import hash_part

    store_dir = "/nix/store"
    wanted = f"{store_dir}/{'a' * 32}-dep"
    other = f"{store_dir}/{'b' * 32}-other"
    body = os.urandom(333) + wanted.encode() + b"x" * 50 + os.urandom(size * 3)
    stream = _s(b"nix-archive-1") + _dir((b"f", _file(body)), (b"g", _file(b"nothing here" * 40)))
    scanner = nar.ReferenceScanner(nar.Candidates({hash_part(p): p for p in (wanted, other)}), store_dir)
    restore(HashingReader(_IntoChunks(stream, size, seed=size), chunk=size), tmp_path / "out", scanner=scanner)
    found, _ = scanner.results()
    assert found == {"a" * 32}
