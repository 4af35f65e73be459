"""The one HTTP client (cudapkgs.transport.http) against scripted servers on 127.0.0.1.

Each test is bounded in time whatever the client does: the servers stop their handlers after
`cap_s` seconds, so a client that would wait forever fails the test instead of hanging it.
"""

from __future__ import annotations

import base64
import http.server
import socket
import subprocess
import sys
import threading

import pytest
from loopback_server import serve
from local_servers import self_signed
from slow_server import raw_server

from cudapkgs.transport import http as client
from cudapkgs.transport.errors import DeadlineExceeded, StatusError, TooLarge, TransferError


@pytest.fixture
def server():
    yield from serve(keep_alive=True)


def limits(**kwargs) -> client.Limits:
    return client.Limits(**{"max_bytes": 1 << 20, "connect_s": 5, "read_s": 5, **kwargs})


def test_one_connection_serves_a_run_of_requests(server):
    """Kept-alive connections are reused across objects: 20 GETs (and a 404 between) over one connection."""
    for i in range(20):
        server.files[f"/o{i}"] = bytes([i]) * (1000 + i)
    c = client.Client()
    for i in range(20):
        with c.request("GET", f"{server.url}/o{i}", limits=limits()) as response:
            assert response.status == 200 and response.read() == bytes([i]) * (1000 + i)
    assert server.connections == 1 and server.hits() == 20
    with c.request("GET", f"{server.url}/missing", limits=limits()) as response:
        assert response.status == 404
        response.discard()


def test_a_body_past_its_bound_is_refused_without_reading_it_all(server):
    server.files["/big"] = b"x" * (4 << 20)
    with pytest.raises(TooLarge, match=r"/big: declares 4194304 bytes, more than the 1000 allowed for it"):
        client.request("GET", f"{server.url}/big", limits=limits(max_bytes=1000))


def test_a_body_without_length_is_cut_at_its_bound():
    """No Content-Length, a body until the server closes: reading stops one chunk past the bound."""
    sent = []

    def endless(conn, srv):
        srv.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        while not srv.stopping.is_set() and sum(sent) < 64 << 20:
            conn.sendall(b"z" * 65536)
            sent.append(65536)

    with raw_server(endless) as srv:
        with client.request("GET", srv.url + "/z", limits=limits(max_bytes=100_000)) as response:
            with pytest.raises(TooLarge, match="sent more than the 100000 bytes allowed for it"):
                response.read()
            assert response.received <= 100_001


def _drip_100000_bytes(conn, srv):
    """A 200 response of 100,000 bytes, its body one byte every 0.1 s."""
    srv.read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    srv.drip(conn, b"y" * 100000, 0.1)


def test_a_server_dripping_the_body_is_cut_at_the_deadline():
    """A byte every 0.1 s passes any per-read timeout; the deadline of the whole object ends it."""
    with raw_server(_drip_100000_bytes) as srv:
        with pytest.raises(DeadlineExceeded, match=r"/slow: took longer than its deadline \(\d+ bytes received\)"):
            client.get_bytes(srv.url + "/slow", limits=limits(deadline_s=1.0, low_speed_bps=0), attempts=1)


def test_a_server_dripping_its_headers_is_cut_at_the_deadline():
    def drip(conn, srv):
        srv.read_request(conn)
        srv.drip(conn, b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100000, 0.1)

    with raw_server(drip) as srv:
        with pytest.raises(DeadlineExceeded, match="took longer than its deadline"):
            client.request("GET", srv.url + "/h", limits=limits(deadline_s=1.0))


def test_a_stalled_body_is_cut_by_the_low_speed_rule_before_its_deadline():
    with raw_server(_drip_100000_bytes) as srv:
        with client.request("GET", srv.url + "/s", limits=limits(deadline_s=60, low_speed_bps=1000, low_speed_s=1.0)) as r:
            with pytest.raises(TransferError, match=r"stalled: \d+ bytes in 1 s of waiting, slower than 1000 bytes/s"):
                while r.read1():
                    pass


@pytest.mark.parametrize("how", ["read", "readinto"])
def test_a_body_dripped_into_one_bulk_read_is_cut_inside_the_read(how):
    """A byte every 0.1 s into one read of 100,000 bytes: before, the rule was checked only when the read
    returned (here after 10,000 s; the server gives up after 20 s and the read ended as a broken
    connection); now the read is cut once it has waited low_speed_s at less than low_speed_bps."""

    with raw_server(_drip_100000_bytes) as srv:
        with client.request("GET", srv.url + "/b", limits=limits(deadline_s=600, low_speed_bps=1000, low_speed_s=1.0)) as r:
            with pytest.raises(TransferError, match=r"/b: stalled: \d+ bytes in \d+ s of waiting inside one read, "
                               r"slower than 1000 bytes/s") as caught:
                if how == "read":
                    r.read(100000)
                else:
                    r.readinto(bytearray(100000))
    assert caught.value.transient
    assert int(str(caught.value).split("stalled: ")[1].split()[0]) < 100  # cut after a few dozen bytes, not 200


def test_a_fast_body_read_in_bulk_is_not_cut(server):
    server.files["/fast"] = b"f" * (3 << 20)
    got = client.get_bytes(server.url + "/fast", limits=limits(max_bytes=4 << 20, low_speed_bps=1 << 20, low_speed_s=0.2))
    assert got == b"f" * (3 << 20)


def test_a_tls_handshake_that_never_ends_is_cut_at_the_deadline():
    """The server starts a 16 KiB TLS handshake record and sends it a byte every 0.1 s: no connect timeout trips."""

    def mute(conn, srv):
        conn.sendall(b"\x16\x03\x03\x40\x00")  # handshake record, TLS 1.2, 16384 bytes to come
        srv.drip(conn, b"\0" * 16384, 0.1)

    with raw_server(mute) as srv:
        with pytest.raises(DeadlineExceeded):
            client.request("GET", f"https://127.0.0.1:{srv.port}/", limits=limits(connect_s=10, deadline_s=1.0))


def test_an_upload_to_a_server_that_never_reads_is_cut_at_the_deadline():
    def deaf(conn, srv):
        srv.read_request(conn)
        srv.stopping.wait(srv.cap_s)

    with raw_server(deaf) as srv:
        body = b"u" * (32 << 20)  # more than the socket buffers hold
        with pytest.raises(DeadlineExceeded):
            client.request("PUT", srv.url + "/up", limits=limits(deadline_s=1.0), body=body,
                           headers={"Content-Length": str(len(body))})


def test_transient_answers_are_retried_with_backoff_and_the_last_is_named(server):
    server.files["/a"] = b"A"
    server.script = ["500", "500"]
    waits = []
    c = client.Client()
    got = client.retry(lambda: c.request("GET", f"{server.url}/a", limits=limits()).read(), attempts=3,
                       backoff_s=0.25, sleep=waits.append)
    assert got == b"A" and waits == [0.25, 0.5]
    server.script = ["500"] * 5
    with pytest.raises(StatusError, match=r"/a: HTTP 500 Internal Server Error \(after 2 attempts\)$") as info:
        c.request("GET", f"{server.url}/a", limits=limits(), attempts=2, backoff_s=0)
    assert info.value.status == 500
    server.script = []
    hits = server.hits("/missing")
    with c.request("GET", f"{server.url}/missing", limits=limits(), attempts=5, backoff_s=0) as response:
        assert response.status == 404  # not retried: a 404 is the caller's to judge
    assert server.hits("/missing") == hits + 1


def test_a_cut_off_body_is_fetched_again(server):
    server.files["/c"] = b"c" * 50000
    server.script = ["truncate"]
    assert client.get_bytes(f"{server.url}/c", limits=limits(), attempts=2, backoff_s=0) == b"c" * 50000
    assert server.hits("/c") == 2


def test_no_retry_would_outlast_the_deadline(server):
    server.script = ["500"] * 10
    server.files["/d"] = b"d"
    with pytest.raises(StatusError, match=r"/d: HTTP 500 Internal Server Error$"):  # a 10 s wait would pass 2 s
        client.request("GET", f"{server.url}/d", limits=limits(deadline_s=2.0), attempts=5, backoff_s=10)
    assert server.hits("/d") == 1


def test_a_refused_connection_and_an_unknown_host_are_one_line_naming_the_url(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransferError) as info:
        client.get_bytes(f"http://127.0.0.1:{port}/x", limits=limits(), attempts=2, backoff_s=0)
    assert str(info.value) == f"http://127.0.0.1:{port}/x: connection refused (after 2 attempts)"

    def unresolvable(host, *args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unresolvable)
    with pytest.raises(TransferError) as info:
        client.get_bytes("https://user:secret@mirror.invalid/y", limits=limits(), attempts=3, backoff_s=0)
    assert str(info.value) == "https://mirror.invalid/y: cannot resolve mirror.invalid (Name or service not known)"
    assert not info.value.transient and info.value.attempts == 1


class _Recording(http.server.BaseHTTPRequestHandler):
    """Answers every GET with its own request's headers; /redirect?to=URL redirects there."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, dict[str, str]]] = []

    def do_GET(self):  # noqa: N802
        type(self).seen.append((self.path, dict(self.headers.items())))
        if self.path.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("Location", self.path.split("=", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def recording():
    _Recording.seen = []
    servers = []
    for host in ("127.0.0.1", "127.0.0.2"):
        httpd = http.server.ThreadingHTTPServer((host, 0), _Recording)
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(httpd)
    yield [f"http://{h.server_address[0]}:{h.server_address[1]}" for h in servers]
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def test_url_credentials_are_basic_auth_for_that_host_only(recording):
    here, elsewhere = recording
    port = here.rsplit(":", 1)[1]
    with client.request("GET", f"http://ann:p%40ss@127.0.0.1:{port}/redirect?to=/final", limits=limits()) as r:
        assert r.read() == b"/final"
    token = "Basic " + base64.b64encode(b"ann:p@ss").decode()
    assert [h.get("Authorization") for _, h in _Recording.seen] == [token, token]  # same host: kept
    _Recording.seen.clear()
    with client.request("GET", f"http://ann:p%40ss@127.0.0.1:{port}/redirect?to={elsewhere}/x", limits=limits()) as r:
        assert r.read() == b"/x" and r.url == f"{elsewhere}/x"
    assert [h.get("Authorization") for _, h in _Recording.seen] == [token, None]  # another host: dropped


def test_redirects_are_bounded(recording):
    here, _ = recording
    with pytest.raises(TransferError, match="more than 5 redirects"):
        client.request("GET", here + "/redirect?to=" * 8 + "/end", limits=limits())
    assert len(_Recording.seen) == 6


# -- proxies and CA certificates ------------------------------------------------------------------

from cudapkgs.transport.environment import ca_file, no_proxy_matches, proxy_for  # noqa: E402


def test_proxy_variables_are_read_as_curl_reads_them():
    env = {"HTTP_PROXY": "http://upper:1", "https_proxy": "proxy.lan:3128", "ALL_PROXY": "http://all:2"}
    assert proxy_for("http", "example.com", env) == ("http://all:2", "ALL_PROXY")  # HTTP_PROXY: never (httpoxy)
    assert proxy_for("https", "example.com", env) == ("http://proxy.lan:3128", "https_proxy")  # no scheme: http://
    assert proxy_for("http", "example.com", {"http_proxy": "http://lower:1"}) == ("http://lower:1", "http_proxy")
    assert proxy_for("https", "x", {"HTTPS_PROXY": "http://p:1", "https_proxy": ""}) == ("http://p:1", "HTTPS_PROXY")
    assert proxy_for("http", "example.com", {}) is None
    with pytest.raises(TransferError, match=r"all_proxy=socks5://s:1080 is a SOCKS proxy, which needs PySocks"):
        proxy_for("https", "example.com", {"all_proxy": "socks5://s:1080"})


@pytest.mark.parametrize(("host", "no_proxy", "direct"), [
    ("cache.example.com", "example.com", True),
    ("cache.example.com", ".example.com", True),
    ("example.com", ".example.com", True),
    ("notexample.com", "example.com", False),
    ("cache.example.com", "other.org, example.com", True),
    ("anything", "*", True),
    ("10.1.2.3", "10.0.0.0/8", True),
    ("10.1.2.3", "10.1.2.4", False),
    ("::1", "::1", True),
    ("192.168.1.1", "192.168.0.0/24", False),
    ("CACHE.Example.COM.", "example.com", True),
])
def test_no_proxy_matches_names_domains_addresses_and_blocks(host, no_proxy, direct):
    assert no_proxy_matches(host, no_proxy) is direct
    assert (proxy_for("http", host, {"http_proxy": "http://p:1", "no_proxy": no_proxy}) is None) is direct


class _Proxy(http.server.BaseHTTPRequestHandler):
    """A forward proxy that answers itself: GET http://… -> "via proxy <url>"; CONNECT host:port -> a tunnel."""

    seen: list[tuple[str, str, str | None]] = []

    def do_GET(self):  # noqa: N802
        type(self).seen.append(("GET", self.path, self.headers.get("Proxy-Authorization")))
        body = b"via proxy " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_CONNECT(self):  # noqa: N802
        type(self).seen.append(("CONNECT", self.path, self.headers.get("Proxy-Authorization")))
        host, port = self.path.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)), timeout=10)
        self.send_response(200)
        self.end_headers()
        self.connection.settimeout(10)
        pumps = [threading.Thread(target=_pump, args=(a, b), daemon=True)
                 for a, b in ((self.connection, upstream), (upstream, self.connection))]
        for p in pumps:
            p.start()
        for p in pumps:
            p.join(20)
        upstream.close()
        self.close_connection = True

    def log_message(self, *args):
        pass


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def proxy():
    _Proxy.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_http_goes_through_http_proxy_with_its_credentials_unless_no_proxy(proxy, monkeypatch):
    monkeypatch.setenv("http_proxy", f"http://pat:pw@{proxy}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    c = client.Client()
    assert client.get_bytes("http://cache.invalid/nix-cache-info", limits=limits()) == \
        b"via proxy http://cache.invalid/nix-cache-info"
    assert _Proxy.seen == [("GET", "http://cache.invalid/nix-cache-info", "Basic " + base64.b64encode(b"pat:pw").decode())]
    monkeypatch.setenv("NO_PROXY", ".invalid")

    def unresolvable(host, *args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unresolvable)
    with pytest.raises(TransferError, match="cannot resolve cache.invalid"):  # direct: the name is looked up
        c.request("GET", "http://cache.invalid/x", limits=limits())
    assert len(_Proxy.seen) == 1


@pytest.fixture
def tls_server(tmp_path):
    import ssl

    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    _Recording.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recording)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}", str(cert)
    httpd.shutdown()
    httpd.server_close()


def test_ca_certificates_come_from_nix_ssl_cert_file_then_ssl_cert_file(tls_server, monkeypatch):
    url, cert = tls_server
    system = "/etc/ssl/certs/ca-certificates.crt"
    monkeypatch.delenv("NIX_SSL_CERT_FILE", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    assert client.get_bytes(url + "/tls", limits=limits()) == b"/tls"
    monkeypatch.setenv("NIX_SSL_CERT_FILE", cert)
    monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent/bundle.pem")  # NIX_SSL_CERT_FILE wins: never read
    assert client.get_bytes(url + "/nix", limits=limits()) == b"/nix"
    monkeypatch.delenv("NIX_SSL_CERT_FILE")
    with pytest.raises(TransferError, match=r"SSL_CERT_FILE=/nonexistent/bundle.pem names no readable CA bundle"):
        client.get_bytes(url + "/x", limits=limits())
    if __import__("os").path.exists(system):
        monkeypatch.setenv("SSL_CERT_FILE", system)
        with pytest.raises(TransferError) as info:
            client.get_bytes(url + "/untrusted", limits=limits(), attempts=3)
        message = str(info.value)
        assert message.startswith(f"{url}/untrusted: its TLS certificate is not trusted (")
        assert "NIX_SSL_CERT_FILE or SSL_CERT_FILE" in message and "\n" not in message and info.value.attempts == 1


def test_https_through_a_proxy_is_a_connect_tunnel(tls_server, proxy, monkeypatch):
    url, cert = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    monkeypatch.delenv("NIX_SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://{proxy}")
    assert client.get_bytes(url + "/tunnelled", limits=limits()) == b"/tunnelled"
    assert [(m, p) for m, p, _ in _Proxy.seen] == [("CONNECT", url.removeprefix("https://"))]


def test_importing_the_command_line_does_not_load_the_http_stack():
    code = ("import sys, cudapkgs.cli, cudapkgs.store.caches.http, cudapkgs.fetch.http, cudapkgs.transport.errors; "
            "print(sorted(m for m in ('urllib3', 'ssl', 'http.client', 'cudapkgs.transport.http') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_in_read_check_stops_with_the_response():
    """The guard looks again every quarter of low_speed_s while its response is open, not after it ends."""
    from cudapkgs.transport import deadline
    from cudapkgs.transport.stall import StallGuard

    def body(conn, srv):
        srv.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        srv.stopping.wait(5)

    with raw_server(body) as srv:
        r = client.request("GET", srv.url + "/h", limits=limits(low_speed_bps=1000, low_speed_s=0.2))
        assert r.read(5) == b"hello" and isinstance(r._stall, StallGuard)
        r.close()
        checks = []
        guard = r._stall
        real = guard._arm
        guard._arm = lambda: (checks.append(1), real())
        guard._check()  # a check due after the close: no new one is armed
        assert checks == []
        watch = deadline.watch(0)  # and a guard whose response's deadline passed stops too
        other = StallGuard(None, 1000, 0.2, watch)
        watch._expire()
        other._counter = object()
        other._arm = lambda: checks.append(2)
        other._check()
        assert checks == []


def test_a_check_racing_the_end_of_a_read_and_the_next_begin_does_not_cut_a_healthy_read():
    """The watchdog's check read one read's start, then (the reader thread having ended that read and begun
    the next meanwhile, as a GIL switch allows) the next read's byte count: a long read that had brought
    plenty looked as one that brought nothing, and a healthy download was cut."""
    import time

    from cudapkgs.transport.stall import StallGuard

    guard = StallGuard(None, 1000, 0.05)  # no socket reached: the counter is set by hand

    class Counter:
        received = 0
        raced = False

    class Racing(Counter):
        @property
        def received(self):  # the check reads the count: the reader ends this read and begins the next now
            if not self.raced:
                self.raced = True
                guard.end()
                guard.begin()
            return 100_000

    guard._counter = Counter()
    guard._arm = lambda: None
    guard.begin()
    guard._counter = Racing()  # 100,000 bytes came in this read: healthy at 1000 bytes/s
    time.sleep(0.1)  # it has lasted longer than low_speed_s
    guard._check()
    assert guard.stalled is None
