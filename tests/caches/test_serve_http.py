"""`cudapkgs serve` byte for byte: NARs (buffered, sendfile, kept), zstd NARs, narinfos signed once, HTTP edges.

In-process servers on 127.0.0.1 (`make_server` on a thread); see test_serve_load.py for load,
slow clients and limits.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import socket
import threading
from pathlib import Path

import pytest
from cache_helpers import fresh_store_like, make_closure

from cudapkgs.errors import StoreError
from cudapkgs.store import nar
from cudapkgs.store.caches import open_cache, serve
from cudapkgs.store.caches.httpd import Limits
from cudapkgs.store.caches.serve import make_server
from cudapkgs.store.caches.serve_cache import NarCache
from cudapkgs.store.caches.signing import SecretKey, generate
from cudapkgs.store.paths import base32_encode
from cudapkgs.store.store import Store


class Running:
    def __init__(self, store_dir: str, cache_dir: Path, **options) -> None:
        self.server = make_server(store_dir, "127.0.0.1", 0, cache_dir=cache_dir, **options)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def raw(self, data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(data)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        return answer

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


def _tree(out: Path, big: int = 0, small: int = 50) -> None:
    out.mkdir()
    (out / "bin").mkdir()
    (out / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    os.chmod(out / "bin" / "tool", 0o755)
    os.symlink("bin/tool", out / "link")
    for i in range(small):
        (out / f"h{i:03}.h").write_bytes(os.urandom(i * 37))
    if big:
        (out / "lib.so").write_bytes(os.urandom(big))
        (out / "padded").write_bytes(os.urandom(big + 3))


def _nar_hash(data: bytes) -> str:
    return "sha256:" + base32_encode(hashlib.sha256(data).digest())


@pytest.mark.parametrize("keep_max", [serve.KEEP_WHOLE_MAX, 0])
def test_nars_are_the_store_paths_nar_and_are_kept_when_small(store, tmp_path, monkeypatch, keep_max):
    """Kept NARs (read once through Python, then sent from the cache) and streamed ones (contents over
    256 KiB by sendfile) are both exactly `nar.dump` of the path."""
    monkeypatch.setattr(serve, "KEEP_WHOLE_MAX", keep_max)
    path = store.add_path("tree-1.0", lambda out: _tree(out, big=600_000))
    expected = b"".join(nar.dump(path))
    running = Running(store.store_dir, tmp_path / "cache")
    try:
        info = open_cache(running.url).narinfo(path)
        for _ in range(3):  # the first from the files, then (when kept) from the cache
            status, headers, body = running.request("GET", "/" + info.url)
            assert status == 200 and body == expected and int(headers["Content-Length"]) == len(expected)
        status, headers, body = running.request("HEAD", "/" + info.url)
        assert (status, body, int(headers["Content-Length"])) == (200, b"", len(expected))
        with socket.create_connection(("127.0.0.1", running.port), timeout=30) as s:  # a client that half-closes
            s.sendall(f"GET /{info.url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := s.recv(1 << 20):
                answer += chunk
        assert answer.split(b"\r\n\r\n", 1)[1] == expected
        kept = os.listdir(tmp_path / "cache")
        assert kept == ([f"{store.query(path).nar_hash.split(':')[1]}.nar"] if keep_max else [])
    finally:
        running.stop()


def test_a_modified_path_is_never_kept_and_its_client_refuses_it(store, tmp_path):
    path = store.add_path("tree-1.0", lambda out: _tree(out, small=5))
    os.chmod(path, 0o755)
    os.chmod(f"{path}/h004.h", 0o644)
    Path(f"{path}/h004.h").write_bytes(b"x" * (4 * 37))  # same size, other bytes
    lines = []
    running = Running(store.store_dir, tmp_path / "cache", report=lines.append)
    try:
        info = open_cache(running.url).narinfo(path)
        status, _, body = running.request("GET", "/" + info.url)
        assert status == 200 and _nar_hash(body) != info.nar_hash  # what a client checks and refuses
        assert os.listdir(tmp_path / "cache") == []
        assert any("does not match its registration" in line for line in lines)
    finally:
        running.stop()


def test_zstd_nars_are_compressed_once_kept_and_substitute(store, tmp_path, monkeypatch):
    dep, top = make_closure(store, size=300_000)
    key = generate("serve-zstd-1")
    compressed = []
    original = serve._Service._compress

    def counting(self, *args):
        compressed.append(args[0])
        return original(self, *args)

    monkeypatch.setattr(serve._Service, "_compress", counting)
    running = Running(store.store_dir, tmp_path / "cache", secret_key=key, compression="zstd")
    try:
        cache = open_cache(running.url)
        infos = {p: cache.narinfo(p) for p in (dep, top)}
        for path, info in infos.items():
            assert info.compression == "zstd" and info.url.endswith(".nar.zst")
            _, _, data = running.request("GET", "/" + info.url)
            assert len(data) == info.file_size and _nar_hash(data) == info.file_hash
            assert cache.narinfo(path) == info
            # the uncompressed NAR is still there for a client that asks for it
            status, _, body = running.request("GET", "/" + info.url.removesuffix(".zst"))
            assert status == 200 and _nar_hash(body) == info.nar_hash
        # the store moves aside (the server keeps its open database): the NARs come from what was kept
        fresh = fresh_store_like(store, tmp_path / "old")
        try:
            for path in (dep, top):
                cache.substitute(fresh, path, trusted_keys=[key.public])
            assert fresh.verify() == [] and fresh.references(top) == [dep]
        finally:
            fresh.close()
        assert sorted(compressed) == sorted([dep, top])  # once each, however often asked
    finally:
        running.stop()
    assert len([n for n in os.listdir(tmp_path / "cache") if n.endswith(".nar.zst")]) == 2
    restarted = Running(store.store_dir, tmp_path / "cache", secret_key=key, compression="zstd")
    try:  # a restarted server finds the kept NARs: nothing is compressed again
        assert open_cache(restarted.url).narinfo(dep) == infos[dep] and len(compressed) == 2
    finally:
        restarted.stop()


def test_a_modified_path_gets_no_zstd_narinfo(store, tmp_path):
    path = store.add_path("tree-1.0", lambda out: _tree(out, small=3))
    os.chmod(path, 0o755)
    os.chmod(f"{path}/h002.h", 0o644)
    Path(f"{path}/h002.h").write_bytes(b"y" * 74)
    running = Running(store.store_dir, tmp_path / "cache", compression="zstd", report=lambda _l: None)
    try:
        status, _, body = running.request("GET", f"/{os.path.basename(path)[:32]}.narinfo")
        assert status == 500 and b"was modified since it was registered" in body
        assert [n for n in os.listdir(tmp_path / "cache")] == []
    finally:
        running.stop()


def test_a_narinfo_is_signed_once_per_path(store, tmp_path, monkeypatch):
    dep, top = make_closure(store)
    key = generate("serve-sign-1")
    signed = []
    original = SecretKey.sign

    def counting(self, data):
        signed.append(data)
        return original(self, data)

    monkeypatch.setattr(SecretKey, "sign", counting)
    running = Running(store.store_dir, tmp_path / "cache", secret_key=key)
    try:
        texts = {running.request("GET", f"/{os.path.basename(top)[:32]}.narinfo")[2] for _ in range(20)}
        assert len(texts) == 1 and len(signed) == 1
        info = open_cache(running.url).narinfo(top)
        assert key.public.verify(info.sigs[0], info.fingerprint())
    finally:
        running.stop()


def test_a_collected_path_is_not_served_from_what_was_kept(store, tmp_path):
    path = store.add_path("tree-1.0", lambda out: _tree(out, small=3))
    running = Running(store.store_dir, tmp_path / "cache")
    try:
        info = open_cache(running.url).narinfo(path)
        assert running.request("GET", "/" + info.url)[0] == 200
        store.release_temp_roots()
        assert path in store.gc().deleted
        assert running.request("GET", f"/{os.path.basename(path)[:32]}.narinfo")[0] == 404
        assert running.request("GET", "/" + info.url)[0] == 404
    finally:
        running.stop()


def test_http_edges(store, tmp_path):
    dep, top = make_closure(store)
    running = Running(store.store_dir, tmp_path / "cache", limits=Limits(max_header_bytes=2048))
    narinfo = f"/{os.path.basename(top)[:32]}.narinfo"
    try:
        status, headers, body = running.request("HEAD", narinfo)
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 100 and "Date" in headers
        status, headers, body = running.request("PUT", "/x.narinfo", body=b"StorePath: x\n")
        assert status == 405 and headers["Allow"] == "GET, HEAD"
        assert running.request("GET", "/nar/unknown.nar")[0] == 404
        assert running.request("GET", narinfo + "?x=1")[0] == 200  # a query is not part of the path
        # three requests in one write (pipelined): three answers, in order
        pipelined = running.raw(b"".join(f"GET {p} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                                          for p in (narinfo, "/nope", "/nix-cache-info"))
                                + b"GET /nix-cache-info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert re.findall(rb"HTTP/1\.1 (\d{3}) ", pipelined) == [b"200", b"404", b"200", b"200"]
        assert running.raw(b"GET /nix-cache-info HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")  # and closed
        absolute = running.raw(b"GET http://x/nix-cache-info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert absolute.startswith(b"HTTP/1.1 200 ") and b"StoreDir: " in absolute
        for bad, status in ((b"GARBAGE\r\n\r\n", b"400"), (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", b"505"),
                            (b"GET / HTTP/1.1\r\n\r\n", b"400"),  # no Host
                            (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", b"400"),
                            (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", b"400"),
                            (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 4000 + b"\r\n\r\n", b"431"),
                            (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", b"400")):
            answer = running.raw(bad)
            assert answer.split(b" ")[1] == status, (bad[:40], answer[:80])
            assert b"Connection: close" in answer
        assert running.request("GET", "/nix-cache-info")[0] == 200  # still serving
    finally:
        running.stop()


def test_the_nar_cache_keeps_a_budget_and_refuses_a_shared_directory(tmp_path):
    directory = tmp_path / "kept"
    cache = NarCache(directory, max_bytes=250)
    for i in range(4):
        fd, temp = cache.temporary()
        os.write(fd, bytes([i]) * 100)
        os.close(fd)
        cache.publish(temp, f"sha256:{str(i) * 52}", "none")
    assert cache.get("sha256:" + "0" * 52, "none") is None and cache.total_bytes == 200  # least recently used go
    assert cache.get("sha256:" + "3" * 52, "none").file.read_bytes() == b"\x03" * 100
    fd, temp = cache.temporary()
    os.close(fd)  # a server killed while writing leaves it; the next one removes it
    again = NarCache(directory, max_bytes=1000)
    assert sorted(p.name[:1] for p in directory.iterdir()) == ["2", "3"]
    assert again.get("sha256:" + "2" * 52, "none") is not None
    os.chmod(directory, 0o777)
    with pytest.raises(StoreError, match="writable by others"):
        NarCache(directory, max_bytes=1000)


def test_request_heads_of_any_bytes_get_an_answer_never_an_error(store, tmp_path):
    """Fuzz the request parser: whatever the head, a status line (or a close), no handler error, and
    the server goes on serving."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    dep, top = make_closure(store)
    errors: list[str] = []
    running = Running(store.store_dir, tmp_path / "cache", report=errors.append,
                      limits=Limits(max_header_bytes=4096, header_timeout=2.0))
    pieces = st.sampled_from([b"GET", b"HEAD", b"PUT", b" ", b"/", b"/nix-cache-info", b"HTTP/1.1", b"HTTP/1.0",
                              b"\r\n", b"\n", b"Host: x", b":", b"Content-Length: ", b"5", b"\x00", b"\xff", b"\t",
                              b"Transfer-Encoding: chunked", b"Connection: close", b"%2e%2e", b".narinfo",
                              f"/{os.path.basename(top)[:32]}".encode(), b"/nar/", b"a" * 300])

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.lists(pieces, max_size=40), st.binary(max_size=64))
    def check(parts, tail):
        head = b"".join(parts) + tail + b"\r\n\r\n"
        with socket.create_connection(("127.0.0.1", running.port), timeout=10) as s:
            s.sendall(head)
            s.shutdown(socket.SHUT_WR)
            answer = b""
            try:
                while chunk := s.recv(65536):
                    answer += chunk
            except ConnectionResetError:
                pass
        assert answer == b"" or re.match(rb"HTTP/1\.1 [1-5]\d\d ", answer), answer[:80]

    try:
        check()
        assert running.request("GET", "/nix-cache-info")[0] == 200
        assert [e for e in errors if "error handling" in e] == []
    finally:
        running.stop()


def test_a_path_whose_files_are_gone_is_a_500_and_one_line(store, tmp_path):
    import shutil

    path = store.add_path("tree-1.0", lambda out: _tree(out, small=3))
    for dirpath, _, _ in os.walk(path):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(path)  # still registered: what `verify` calls missing
    lines: list[str] = []
    running = Running(store.store_dir, tmp_path / "cache", compression="zstd", report=lines.append)
    try:
        status, headers, body = running.request("GET", f"/{os.path.basename(path)[:32]}.narinfo")
        assert (status, body, headers.get("Connection")) == (500, b"internal error\n", "close")
        assert len(lines) == 1 and "FileNotFoundError" in lines[0] and "Traceback" not in lines[0]
        assert running.request("GET", "/nix-cache-info")[0] == 200
    finally:
        running.stop()
