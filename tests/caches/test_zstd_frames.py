"""zstd NARs are written as independent frames of about `ZSTD_FRAME` bytes of NAR each (issue 34: frames
that can be decompressed apart), one valid zstd stream that cudapkgs (and Nix: test_real_nix.py) reads whole."""

from __future__ import annotations

import io
import os

import pytest
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


def _inline(payload: bytes, chunk: int) -> bytes:
    out = io.BytesIO()
    compression.compress_stream([payload[i : i + chunk] for i in range(0, len(payload), chunk)], out, "zstd",
                                total=len(payload), workers=1)
    return out.getvalue()


@pytest.fixture(autouse=True)
def _eight_cpus(monkeypatch):
    """The threaded paths run whatever the test machine's CPUs (compression caps its workers at them)."""
    monkeypatch.setattr(compression, "_usable_cpus", lambda: 8)


def test_workers_are_capped_at_the_cpus_usable_whatever_is_asked(monkeypatch):
    import concurrent.futures

    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)
    monkeypatch.setattr(compression, "_usable_cpus", lambda: 2)
    asked: list[int] = []
    real = concurrent.futures.ThreadPoolExecutor

    def recording(max_workers=None, **options):
        asked.append(max_workers)
        return real(max_workers=max_workers, **options)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", recording)
    payload = os.urandom(300 << 10)
    out = io.BytesIO()
    compression.compress_stream([payload], out, "zstd", total=len(payload), workers=100_000)  # `copy --to -j 100000`
    assert asked == [2]  # two threads, at most three 64 KiB frames in flight: not 100,001
    assert out.getvalue() == _inline(payload, len(payload))


@pytest.mark.parametrize("workers", [2, 3])
def test_frames_compressed_on_threads_come_out_in_order(monkeypatch, workers):
    import threading

    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)
    payload = b"".join(os.urandom(1000) + bytes([i]) * 70_000 for i in range(40))  # frames that differ
    threads: set[str] = set()
    real = zstandard.ZstdCompressor
    expected = _inline(payload, 30_000)  # the same bytes as one thread writes

    class Recording:  # a proxy (python-zstandard's C types are not for subclassing)
        def __init__(self, **options):
            self._cctx = real(**options)

        def compressobj(self, size=-1):
            threads.add(threading.current_thread().name)
            return self._cctx.compressobj(size=size)

        def compress(self, data):
            threads.add(threading.current_thread().name)
            return self._cctx.compress(data)

    monkeypatch.setattr(zstandard, "ZstdCompressor", Recording)
    out = io.BytesIO()
    digest, size = compression.compress_stream([payload[i : i + 30_000] for i in range(0, len(payload), 30_000)], out,
                                               "zstd", total=len(payload), workers=workers)
    assert out.getvalue() == expected and size == len(out.getvalue())
    assert len(frames(expected)) == -(-len(payload) // (64 << 10))
    assert digest == __import__("hashlib").sha256(out.getvalue()).digest()
    assert threads and all(name.startswith("cudapkgs-zstd") for name in threads)  # none on the caller's thread
    assert not [t for t in threading.enumerate() if t.name.startswith("cudapkgs-zstd")]  # the pool is gone after


def test_more_or_fewer_bytes_are_refused_with_workers_too(monkeypatch):
    import threading

    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)
    data = os.urandom(600 << 10)
    with pytest.raises(ValueError, match="more than the"):
        compression.compress_stream([data, b"x"], io.BytesIO(), "zstd", total=len(data), workers=2)
    with pytest.raises(ValueError, match="more than the"):  # refused before the bytes past the total are compressed
        compression.compress_stream([data[:300 << 10], data[300 << 10:] + b"y" * (200 << 10)], io.BytesIO(), "zstd",
                                    total=len(data), workers=2)
    with pytest.raises(ValueError, match="fewer than the"):
        compression.compress_stream([data[: 400 << 10]], io.BytesIO(), "zstd", total=len(data), workers=2)
    assert not [t for t in threading.enumerate() if t.name.startswith("cudapkgs-zstd")]


def test_copy_to_compresses_on_as_many_threads_as_the_cpus_allow(monkeypatch):
    from cudapkgs.store.caches import substitution

    monkeypatch.setattr(substitution, "cpu_contended", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3, 4, 5, 6, 7})
    assert substitution.compress_workers() == 4
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert substitution.compress_workers() == 2
    monkeypatch.setattr(substitution, "cpu_contended", lambda: True)
    assert substitution.compress_workers() == 1


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_an_upload_stopped_while_frames_compress_on_threads_leaves_nothing_in_the_cache(tmp_path, monkeypatch, failure):
    """Ctrl-C (or a full disk) while `workers` threads compress: no NAR, no narinfo, no temporary file in the
    cache, no thread left; the next upload writes a NAR whose FileHash and FileSize are its bytes'."""
    import hashlib
    import threading

    from cudapkgs.store.caches import base, open_cache
    from cudapkgs.store.paths import base32_encode
    from cudapkgs.store.store import Store

    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)
    store = Store.open(tmp_path / "store")
    body = os.urandom(2 << 20)

    def tree(out):
        out.mkdir()
        (out / "data").write_bytes(body)

    path = store.add_path("big-1", tree)
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.init(store.store_dir)
    real = compression.compress_stream

    def stopped(chunks, out, *args, **kwargs):
        writes = []
        write = out.write

        def counting(data):
            writes.append(len(data))
            if len(writes) == 4:  # frames were written, more are compressing
                raise failure(28, "No space left on device") if failure is OSError else failure()
            return write(data)

        out.write = counting
        return real(chunks, out, *args, **kwargs)

    monkeypatch.setattr(base, "compress_stream", stopped)
    with pytest.raises(failure):
        cache.upload(store, path, workers=3)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".cudapkgs-uploads", "nix-cache-info"]
    assert not os.listdir(tmp_path / "cache" / ".cudapkgs-uploads")  # the temporary went too (upload_temps)
    assert not [t for t in threading.enumerate() if t.name.startswith(("cudapkgs-zstd", "cudapkgs-nar-read"))]
    monkeypatch.setattr(base, "compress_stream", real)
    info = cache.upload(store, path, workers=3)
    nar_file = (tmp_path / "cache" / info.url).read_bytes()
    assert info.file_size == len(nar_file) and info.file_hash == "sha256:" + base32_encode(hashlib.sha256(nar_file).digest())
    store.close()


def test_a_reader_failing_part_way_ends_the_workers_and_is_raised(monkeypatch):
    """A path that cannot be read to its end (gone, modified) while frames compress on threads: its error comes out
    as it was raised, and no compressing thread is left behind."""
    import threading

    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)

    def chunks():
        for _ in range(10):
            yield os.urandom(50_000)
        raise OSError(5, "Input/output error")

    out = io.BytesIO()
    with pytest.raises(OSError, match="Input/output error"):
        compression.compress_stream(chunks(), out, "zstd", total=1 << 20, workers=2)
    assert not [t for t in threading.enumerate() if t.name.startswith("cudapkgs-zstd")]
