"""`cudapkgs serve` under load, slow clients and clients that leave (issue 23, class 5); 127.0.0.1 only.

Before the server was rebuilt on `httpd` (one event loop, one store opened once, limits and
timeouts), it leaked two file descriptors per connection (a Store opened in each connection's
thread and never closed) and stopped answering after about 124 requests with 256 of them;
300 half-sent requests held 300 threads for ever; a client that left mid-NAR put a
BrokenPipeError traceback in its log.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import resource
import socket
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cache_helpers import make_closure

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.store import Store


class Served:
    """A `cudapkgs serve` process: its URL, host and port, pid; `stderr()` once stopped."""

    def __init__(self, tmp_path: Path, *args: str, nofile: int | None = None) -> None:
        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.err_file = open(tmp_path / "serve.err", "w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cudapkgs", "serve", "--port", "0", "--store", str(tmp_path / "store"), *args],
            stdout=subprocess.PIPE, stderr=self.err_file, text=True, preexec_fn=limit)
        line = self.process.stdout.readline()
        if not line.startswith("serving "):
            self.stop()
            pytest.fail(f"cudapkgs serve did not start: {line!r} {self.stderr()[-2000:]}")
        self.url = line.split(" at ", 1)[1].split()[0]
        self.host, port = self.url.removeprefix("http://").split(":")
        self.port = int(port)
        self.pid = self.process.pid

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def threads(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(next(l for l in status.splitlines() if l.startswith("Threads:")).split()[1])

    def get(self, path: str, *, timeout: float = 30, source: str | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout,
                                          source_address=(source, 0) if source else None)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def stderr(self) -> str:
        self.err_file.flush()
        self.err_file.seek(0)
        return self.err_file.read()


@pytest.fixture
def closure(tmp_path):
    with Store.open(tmp_path / "store") as store:
        dep, top = make_closure(store, size=200_000)
        expected = {p: (store.query(p).nar_hash, store.query(p).nar_size) for p in (dep, top)}
    return dep, top, expected


def _nar_hash(data: bytes) -> str:
    from cudapkgs.store.paths import base32_encode

    return "sha256:" + base32_encode(hashlib.sha256(data).digest())


def test_thousands_of_requests_within_256_open_files(tmp_path, closure):
    """3,000 requests, most on a connection of their own, with RLIMIT_NOFILE at 256: all answered, no fd kept."""
    dep, top, expected = closure
    key = generate("serve-load-1")
    (tmp_path / "k").write_text(str(key))
    served = Served(tmp_path, "--quiet", "--sign-key", str(tmp_path / "k"), nofile=256)
    try:
        urls = {p: open_cache(served.url).narinfo(p).url for p in (dep, top)}
        baseline = served.open_fds()
        hash_parts = [os.path.basename(p)[:32] for p in (dep, top)]

        def fresh_connections(n: int) -> int:
            ok = 0
            for i in range(n):
                status, body = served.get(f"/{hash_parts[i % 2]}.narinfo")
                ok += status == 200 and body.startswith(b"StorePath: ")
            return ok

        def keep_alive(n: int) -> int:
            conn = http.client.HTTPConnection(served.host, served.port, timeout=30)
            ok = 0
            try:
                for i in range(n):
                    path = (dep, top)[i % 2]
                    target = "/" + urls[path] if i % 3 == 0 else f"/{hash_parts[i % 2]}.narinfo"
                    conn.request("GET", target)
                    response = conn.getresponse()
                    body = response.read()
                    if target.endswith(".nar"):
                        ok += response.status == 200 and (_nar_hash(body), len(body)) == expected[path]
                    else:
                        ok += response.status == 200 and body.startswith(b"StorePath: ")
            finally:
                conn.close()
            return ok

        def whole_nars(n: int) -> int:
            ok = 0
            for i in range(n):
                path = (dep, top)[i % 2]
                status, body = served.get("/" + urls[path])
                ok += status == 200 and (_nar_hash(body), len(body)) == expected[path]
            return ok

        with ThreadPoolExecutor(max_workers=8) as pool:
            jobs = [pool.submit(fresh_connections, 250) for _ in range(8)]  # 2,000
            jobs += [pool.submit(keep_alive, 100) for _ in range(8)]  # 800 on 8 connections
            jobs += [pool.submit(whole_nars, 25) for _ in range(8)]  # 200
            answered = sum(job.result(timeout=300) for job in jobs)
        assert answered == 3000
        time.sleep(0.2)  # the last connections' ends reach the server
        assert served.open_fds() <= baseline + 8, "file descriptors grow with the connections served"
        assert served.threads() <= 8
    finally:
        served.stop()
    assert "Traceback" not in served.stderr()


def test_slowloris_costs_no_thread_and_is_cut_off(tmp_path, closure):
    """300 connections from one address trickling request heads: 64 are let in (the per-client limit),
    the rest answered 503 at once; another address is still answered; no thread per connection;
    each admitted one is closed once --header-timeout has passed since its first byte."""
    dep, top, _ = closure
    served = Served(tmp_path, "--quiet", "--header-timeout", "1", "--max-connections", "400")
    slow: list[socket.socket] = []
    try:
        head = f"GET /{os.path.basename(top)[:32]}.narinfo HTTP/1.1\r\nHost: x\r\nX-Pad: ".encode()
        for i in range(300):
            s = socket.create_connection((served.host, served.port), timeout=10)
            s.sendall(head[: 10 + i % 20])
            slow.append(s)
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:  # keep trickling: a byte each ~0.2 s is what slowloris sends
            for s in slow:
                try:
                    s.send(b"a")
                except OSError:
                    pass
            time.sleep(0.2)
        status, body = served.get(f"/{os.path.basename(dep)[:32]}.narinfo", source="127.0.0.2")
        assert status == 200 and body.startswith(b"StorePath: ")
        assert served.threads() <= 8
        answers: dict[str, int] = {}
        give_up = time.monotonic() + 30
        for s in slow:
            s.settimeout(max(0.1, give_up - time.monotonic()))
            data = b""
            try:
                while chunk := s.recv(4096):
                    data += chunk
                kind = data[9:12].decode() or "closed"
            except ConnectionResetError:
                kind = "reset"
            except socket.timeout:
                kind = "still open"
            answers[kind] = answers.get(kind, 0) + 1
        assert answers == {"503": 236, "408": 64}
        assert served.get("/nix-cache-info")[0] == 200
    finally:
        for s in slow:
            s.close()
        served.stop()
    assert "Traceback" not in served.stderr()


def _reset(s: socket.socket) -> None:
    """Close with a reset, as a killed client's kernel does."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def test_clients_that_leave_leave_no_traceback(tmp_path):
    """Clients that leave mid-NAR, before their answer, or idle between requests: no error in the log
    (before, each reset was a ConnectionResetError traceback)."""
    with Store.open(tmp_path / "store") as store:
        def big(out: Path) -> None:
            out.mkdir()
            (out / "blob").write_bytes(os.urandom(8 << 20))
        path = store.add_path("big-1.0", big)
    served = Served(tmp_path)  # logging every request, as by default
    try:
        url = open_cache(served.url).narinfo(path).url
        narinfo = f"/{os.path.basename(path)[:32]}.narinfo"
        for i in range(20):
            s = socket.create_connection((served.host, served.port), timeout=10)
            s.sendall(f"GET /{url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            s.recv(1000 + i)
            _reset(s) if i % 2 else s.close()
        for i in range(10):  # gone before the answer
            s = socket.create_connection((served.host, served.port), timeout=10)
            s.sendall(f"GET {narinfo} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            _reset(s)
        for i in range(10):  # gone while the connection waits for its next request
            s = socket.create_connection((served.host, served.port), timeout=10)
            s.sendall(f"GET {narinfo} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert s.recv(100_000).startswith(b"HTTP/1.1 200 ")
            time.sleep(0.02)
            _reset(s)
        status, body = served.get("/" + url)
        with Store.open(tmp_path / "store") as store:
            assert status == 200 and _nar_hash(body) == store.query(path).nar_hash
    finally:
        served.stop()
    log = served.stderr()
    assert "Traceback" not in log and "BrokenPipe" not in log and "Error" not in log, log[-3000:]
    assert log.count(" 200 ") >= 31  # one line per request, the cut ones included


def test_connection_limits_answer_503(tmp_path, closure):
    served = Served(tmp_path, "--quiet", "--max-connections", "5")
    held: list[socket.socket] = []
    try:
        for _ in range(5):
            held.append(socket.create_connection((served.host, served.port), timeout=10))
        time.sleep(0.2)
        extra = socket.create_connection((served.host, served.port), timeout=10)
        answer = b""
        while chunk := extra.recv(4096):
            answer += chunk
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503 ") and b"too many connections" in answer
        held.pop().close()
        time.sleep(0.2)
        assert served.get("/nix-cache-info")[0] == 200
    finally:
        for s in held:
            s.close()
        served.stop()


def test_an_idle_keep_alive_connection_is_closed(tmp_path, closure):
    served = Served(tmp_path, "--quiet", "--idle-timeout", "0.5")
    try:
        s = socket.create_connection((served.host, served.port), timeout=20)
        s.sendall(b"GET /nix-cache-info HTTP/1.1\r\nHost: x\r\n\r\n")
        data = s.recv(4096)
        assert data.startswith(b"HTTP/1.1 200 ")
        started = time.monotonic()
        while chunk := s.recv(4096):  # nothing more: the server closes it
            data += chunk
        assert time.monotonic() - started < 15
        s.close()
    finally:
        served.stop()


def test_a_client_that_stops_reading_is_cut_off(tmp_path):
    with Store.open(tmp_path / "store") as store:
        def big(out: Path) -> None:
            out.mkdir()
            (out / "blob").write_bytes(os.urandom(32 << 20))
        path = store.add_path("big-1.0", big)
    served = Served(tmp_path, "--quiet", "--send-timeout", "0.5")
    try:
        url = open_cache(served.url).narinfo(path).url
        s = socket.create_connection((served.host, served.port), timeout=20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(f"GET /{url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(3)  # reads nothing: the server's writes stall, then it gives up
        received = 0
        try:
            while chunk := s.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        s.close()
        assert received < (32 << 20)  # cut off, not the whole NAR
        assert served.get("/nix-cache-info")[0] == 200
    finally:
        served.stop()
    assert "Traceback" not in served.stderr()

