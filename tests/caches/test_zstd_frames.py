"""zstd NARs are written as independent frames of about `ZSTD_FRAME` bytes of NAR each (issue 34: frames
that can be decompressed apart), one valid zstd stream that cudapkgs (and Nix: test_real_nix.py) reads whole."""

from __future__ import annotations

import io
import os

import zstandard

from cache_helpers import fresh_store_like
from cudapkgs.store.caches import compression


def frames(data: bytes) -> list[tuple[int, int]]:
    """(content size in the frame's header, bytes it decompresses to) of each frame of the zstd stream `data`."""
    out = []
    while data:
        content_size = zstandard.get_frame_parameters(data).content_size
        d = zstandard.ZstdDecompressor().decompressobj()
        out.append((content_size, len(d.decompress(data))))
        assert d.eof
        data = d.unused_data
    return out


def test_a_large_input_is_written_as_independent_frames_with_their_sizes(monkeypatch):
    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)
    payload = os.urandom(300 << 10) + b"text " * 100_000  # 800 KiB: random and compressible
    chunks = [payload[i : i + 50_000] for i in range(0, len(payload), 50_000)]
    out = io.BytesIO()
    digest, size = compression.compress_stream(chunks, out, "zstd", total=len(payload))
    written = out.getvalue()
    assert size == len(written)
    got = frames(written)
    assert len(got) == -(-len(payload) // (64 << 10))  # 13 frames of 64 KiB, the last shorter; one frame before
    assert all(content == length for content, length in got)  # every header says its size
    assert all(length == 64 << 10 for _, length in got[:-1]) and sum(length for _, length in got) == len(payload)
    assert compression.decompressed_reader(io.BytesIO(written), "zstd").read(len(payload) + 1) == payload
    out = io.BytesIO()  # the size not known: the same frames, without sizes in their headers
    compression.compress_stream(iter(chunks), out, "zstd")
    assert [length for _, length in frames(out.getvalue())] == [length for _, length in got]


def test_more_or_fewer_bytes_than_declared_are_refused(monkeypatch):
    import pytest

    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)
    data = os.urandom(200 << 10)
    with pytest.raises(ValueError, match="more than the"):
        compression.compress_stream([data, b"x"], io.BytesIO(), "zstd", total=len(data))
    with pytest.raises(ValueError, match="fewer than the"):
        compression.compress_stream([data[:-1]], io.BytesIO(), "zstd", total=len(data))
    with pytest.raises(ValueError, match="fewer than the"):  # a whole frame short
        compression.compress_stream([data[: 128 << 10]], io.BytesIO(), "zstd", total=len(data))


def test_an_empty_input_is_one_empty_frame():
    out = io.BytesIO()
    compression.compress_stream([], out, "zstd", total=0)
    assert frames(out.getvalue()) == [(0, 0)]


def test_a_nar_of_many_frames_substitutes_with_its_hash_checked(tmp_path, monkeypatch):
    from cudapkgs.store.caches import open_cache
    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)
    store = Store.open(tmp_path / "store")
    body = os.urandom(3 << 20)  # the upload reads the NAR in blocks of about 1 MiB: a frame each, here

    def tree(out):
        out.mkdir()
        (out / "data").write_bytes(body)

    path = store.add_path("big-1", tree)
    key = generate("frames-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.upload_closure(store, [path], secret_key=key)
    info = cache.narinfo(path)
    assert len(frames((tmp_path / "cache" / info.url).read_bytes())) >= 3
    fresh = fresh_store_like(store, tmp_path / "aside")
    try:
        cache.substitute(fresh, path, trusted_keys=[key.public])
        assert fresh.verify() == []
        assert open(os.path.join(path, "data"), "rb").read() == body
    finally:
        fresh.close()
