"""NAR bodies over HTTP go from the socket into the reader's buffer (issue 34, item 1: the HTTP row).

`Response.readinto` fills the caller's buffer through http.client's ``readinto`` (no bytes object per
read), with every check `read` makes; the zstd reader gets its compressed blocks from one reused buffer;
a `cudapkgs serve --compression zstd` closure substitutes through them with every hash checked, and a
NAR cut short or sent past its bound is still refused. Each of these failed on the old code (no
`readinto` on the body, bytes objects handed to the zstd reader).
"""

from __future__ import annotations

import io
import os
import threading

import pytest
import urllib3
import zstandard
from cache_helpers import fresh_store_like, make_closure
from loopback_server import serve as loopback
from slow_server import raw_server

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.base import CacheUnavailable, ObjectTooLarge, SubstituteRefused
from cudapkgs.store.caches.compression import HashingFile, decompressed_reader
from cudapkgs.store.caches.serve import make_server
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.store import Store
from cudapkgs.transport import http as client
from cudapkgs.transport.errors import TooLarge, TransferError


def limits(**kwargs) -> client.Limits:
    return client.Limits(**{"max_bytes": 4 << 20, "connect_s": 5, "read_s": 5, **kwargs})


@pytest.fixture
def no_bulk_read(monkeypatch):
    """urllib3's `read` refuses bulk reads: a body read through it (a bytes object per read) fails the test."""
    original = urllib3.HTTPResponse.read

    def read(self, amt=None, *args, **kwargs):
        if amt is None or amt > 65536:
            raise AssertionError(f"a bulk read of {amt} bytes through urllib3's read (a bytes object per read)")
        return original(self, amt, *args, **kwargs)

    monkeypatch.setattr(urllib3.HTTPResponse, "read", read)


@pytest.fixture
def server():
    yield from loopback(keep_alive=True)


def test_a_body_goes_into_the_callers_buffer_and_the_connection_is_reused(server, no_bulk_read):
    if True:
        body = os.urandom(3 << 20) + b"end"
        server.files["/nar"] = body
        server.files["/next"] = b"next"
        c = client.Client()
        with c.request("GET", f"{server.url}/nar", limits=limits()) as response:
            buffer = bytearray(1 << 19)
            got = bytearray()
            while n := response.readinto(buffer):
                assert n == len(buffer) or len(got) + n == len(body)  # full blocks but the last
                got += buffer[:n]
            assert bytes(got) == body and response.received == len(body)
            assert response.readinto(buffer) == 0
        with c.request("GET", f"{server.url}/next", limits=limits()) as response:
            assert response.read1() == b"next"
        assert server.connections == 1  # the body read to its end gave the connection back


def test_a_body_cut_short_is_a_broken_connection_not_its_end(no_bulk_read):
    def cut(conn, srv):
        srv.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 60000)

    with raw_server(cut, cap_s=10) as srv:
        with client.request("GET", f"{srv.url}/nar", limits=limits()) as response:
            buffer = bytearray(1 << 16)
            with pytest.raises(TransferError, match=r"/nar: the connection broke after 60000 bytes \(cut off, 40000 bytes short\)"):
                while response.readinto(buffer):
                    pass


def test_a_body_past_its_bound_is_cut_through_readinto(no_bulk_read):
    def endless(conn, srv):
        srv.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        while not srv.stopping.is_set():
            conn.sendall(b"z" * 65536)

    with raw_server(endless, cap_s=10) as srv:
        with client.request("GET", f"{srv.url}/nar", limits=limits(max_bytes=1 << 20)) as response:
            buffer = bytearray(1 << 19)
            with pytest.raises(TooLarge, match="sent more than the 1048576 bytes allowed for it"):
                while response.readinto(buffer):
                    pass
            assert response.received <= (1 << 20) + 1


class _IntoOnly(io.RawIOBase):
    """A source with readinto whose `read` must not be used; records the buffers it fills."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.buffers: list[object] = []

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.buffers.append(memoryview(buffer).obj)
        return self._data.readinto(memoryview(buffer)[:70000])  # short reads, as a socket gives

    def read(self, n=-1):
        raise AssertionError("read: a bytes object per block")


def test_the_zstd_reader_gets_its_blocks_from_one_reused_buffer():
    nar = os.urandom(1 << 20) + bytes(3 << 20) + os.urandom(1 << 20)
    compressed = b"".join(zstandard.ZstdCompressor().compress(nar[i:i + (1 << 20)]) for i in range(0, len(nar), 1 << 20))
    source = _IntoOnly(compressed)
    hashed = HashingFile(source, limit=len(compressed), hash=False)
    reader = decompressed_reader(hashed, "zstd")
    out = bytearray()
    while chunk := reader.read(1 << 19):
        out += chunk
    assert bytes(out) == nar and hashed.size == len(compressed)
    assert len(source.buffers) > 3 and len({id(b) for b in source.buffers}) == 1  # one buffer, filled again and again


def test_the_reused_block_is_refused_past_the_limit():
    compressed = zstandard.ZstdCompressor().compress(os.urandom(1 << 20))
    hashed = HashingFile(_IntoOnly(compressed), limit=len(compressed) - 1, hash=False)
    with pytest.raises(ValueError, match="more than the declared"):
        decompressed_reader(hashed, "zstd").read()


class _Serving:
    def __init__(self, store_dir: str, cache_dir, **options) -> None:
        self.server = make_server(store_dir, "127.0.0.1", 0, cache_dir=cache_dir, **options)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_a_served_closure_substitutes_through_readinto(tmp_path, no_bulk_read, compression):
    with Store.open(tmp_path / "store") as store:
        dep, top = make_closure(store, size=3 << 20)
        key = generate("readinto-1")
        running = _Serving(store.store_dir, tmp_path / "kept", secret_key=key, compression=compression)
        try:
            cache = open_cache(running.url)
            infos = {p: cache.narinfo(p) for p in (dep, top)}  # compressed (and kept) now, before the store moves aside
            assert {i.compression for i in infos.values()} == {compression}
            for info in infos.values():  # served once: kept by the server (an uncompressed NAR under 64 MiB too)
                body = cache._get(info.url, 1 << 30)
                while body.readinto(bytearray(1 << 16)):
                    pass
                body.close()
            fresh = fresh_store_like(store, tmp_path / "old")
            try:
                counted: list[int] = []
                for path in (dep, top):
                    cache.substitute(fresh, path, info=infos[path], trusted_keys=[key.public], on_bytes=counted.append)
                assert fresh.verify() == [] and fresh.references(top) == [dep]
                assert counted and counted[-1] == infos[top].file_size  # progress still counts the bytes
            finally:
                fresh.close()
        finally:
            running.stop()


def test_a_nar_cut_short_over_http_is_refused_and_nothing_registered(tmp_path, no_bulk_read):
    """A server that declares the NAR's length and sends half of it: the substitution fails naming the NAR."""
    with Store.open(tmp_path / "store") as store:
        dep, _top = make_closure(store, size=2 << 20)
        key = generate("readinto-2")
        open_cache(f"file://{tmp_path}/cache").upload_closure(store, [dep], secret_key=key)
        fresh = fresh_store_like(store, tmp_path / "old")
    info_name = os.path.basename(dep)[:32] + ".narinfo"
    narinfo = (tmp_path / "cache" / info_name).read_bytes()
    info = open_cache(f"file://{tmp_path}/cache").narinfo(dep)
    nar = (tmp_path / "cache" / info.url).read_bytes()

    def cut(conn, srv):
        head = srv.read_request(conn).decode()
        body = narinfo if info_name in head.split("\r\n")[0] else nar
        sent = body if body is narinfo else body[: len(body) // 2]
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + sent)

    try:
        with raw_server(cut, cap_s=10) as srv:
            cache = open_cache(srv.url)
            cache.attempts = 1
            with pytest.raises((CacheUnavailable, SubstituteRefused, ObjectTooLarge)) as caught:
                cache.substitute(fresh, dep, trusted_keys=[key.public])
            assert info.url in str(caught.value) or dep in str(caught.value)
            assert "broke after" in str(caught.value) or "truncated" in str(caught.value)
            assert not fresh.is_valid(dep) and not os.path.lexists(dep)
    finally:
        fresh.close()
