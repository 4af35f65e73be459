"""Attacks on the HTTP NAR body read with `readinto` and on the zstd reader's reused block (issue 34 review).

Each hostile body is read through `Response.readinto` (urllib3's `read` refused for bulk reads, so
the test covers the path taken) and must end as `read` ends it: a chunked body cut mid-chunk or
between chunks, or with a malformed chunk size, is a broken connection; an endless chunked body
stops at the byte bound; bytes past Content-Length are neither handed out nor taken for the next
response on the connection; a peer dripping bytes is cut at the deadline. Through the reused block
of the zstd reader, a frame header lying about its content size and a NAR whose frames end inside
its tokens are refused or restored exactly, the NarHash over the bytes handed out.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct

import pytest
import zstandard
from slow_server import raw_server
from test_http_readinto import _IntoOnly, limits, no_bulk_read  # noqa: F401 (a fixture)

from cudapkgs.store import nar
from cudapkgs.store.caches.compression import HashingFile, decompressed_reader
from cudapkgs.store.nar_restore import NarFormatError
from cudapkgs.store.nar_restore import restore
from cudapkgs.transport import http as client
from cudapkgs.transport.errors import DeadlineExceeded, TooLarge, TransferError


def _read_all(url: str, lim: client.Limits, size: int = 1 << 19) -> bytes:
    got = bytearray()
    with client.request("GET", url, limits=lim) as response:
        buffer = bytearray(size)
        while n := response.readinto(buffer):
            got += buffer[:n]
    return bytes(got)


_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("body", [
    b"10000\r\n" + b"a" * 30000,  # cut inside a chunk
    b"8000\r\n" + b"a" * 0x8000 + b"\r\n",  # cut between chunks (no last chunk)
    b"8000\r\n" + b"a" * 0x8000 + b"\r\nzz\r\n",  # a chunk size that is not hex
], ids=["mid-chunk", "between-chunks", "bad-size"])
def test_a_chunked_body_cut_or_malformed_is_a_broken_connection(no_bulk_read, body):
    def send(conn, srv):
        srv.read_request(conn)
        conn.sendall(_CHUNKED + body)

    with raw_server(send, cap_s=10) as srv:
        with pytest.raises(TransferError, match=r"/nar: the connection broke after \d+ bytes \(cut off"):
            _read_all(f"{srv.url}/nar", limits())


def test_a_whole_chunked_body_is_read_to_its_end(no_bulk_read):
    payload = os.urandom(100_000)

    def send(conn, srv):
        srv.read_request(conn)
        conn.sendall(_CHUNKED + b"".join(b"%x\r\n%s\r\n" % (len(payload[i:i + 7000]), payload[i:i + 7000])
                                         for i in range(0, len(payload), 7000)) + b"0\r\n\r\n")

    with raw_server(send, cap_s=10) as srv:
        assert _read_all(f"{srv.url}/nar", limits(), size=1 << 16) == payload


def test_an_endless_chunked_body_stops_at_the_bound(no_bulk_read):
    def endless(conn, srv):
        srv.read_request(conn)
        conn.sendall(_CHUNKED)
        while not srv.stopping.is_set():
            conn.sendall(b"10000\r\n" + b"z" * 0x10000 + b"\r\n")

    with raw_server(endless, cap_s=10) as srv:
        with pytest.raises(TooLarge, match="sent more than the 1048576 bytes allowed for it"):
            _read_all(f"{srv.url}/nar", limits(max_bytes=1 << 20))


def test_bytes_past_content_length_are_not_handed_out_nor_read_as_the_next_response(no_bulk_read):
    def longer(conn, srv):
        while head := srv.read_request(conn):  # the same connection, as long as the client keeps it
            if b"/nar " in head:  # 1,000 bytes declared, and a forged response after them
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"a" * 1000
                             + b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforge")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")

    with raw_server(longer, cap_s=10) as srv:
        assert _read_all(f"{srv.url}/nar", limits()) == b"a" * 1000
        # What came with the body past its length is dropped with http.client's buffer (or the connection,
        # when it waits in the socket): never taken for the answer to the next request.
        assert _read_all(f"{srv.url}/next", limits()) == b"next"


def test_a_dripping_peer_is_cut_at_the_deadline_through_readinto(no_bulk_read):
    def drip(conn, srv):
        srv.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
        srv.drip(conn, b"x" * 1000, 0.1)

    with raw_server(drip, cap_s=10) as srv:
        with pytest.raises(DeadlineExceeded, match=r"took longer than its deadline \(\d+ bytes received\)"):
            _read_all(f"{srv.url}/nar", limits(deadline_s=1.0, low_speed_bps=0))


# -- the zstd reader's reused block -------------------------------------------------------------


@pytest.fixture
def a_nar(tmp_path) -> bytes:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(os.urandom(300_000) + bytes(1 << 20))
    (src / "g").write_bytes(b"short")
    os.symlink("f", src / "l")
    return b"".join(nar.dump(str(src)))


def _restore(compressed: bytes, nar_size: int, out):
    hashed = HashingFile(_IntoOnly(compressed), limit=len(compressed), hash=False)
    return restore(decompressed_reader(hashed, "zstd"), str(out), limit=nar_size)


def _with_content_size(frame: bytes, size: int) -> bytes:
    """`frame` (a single-segment zstd frame with a 4-byte content size) declaring `size` instead."""
    descriptor = frame[4]
    assert descriptor >> 6 == 2 and descriptor & 0x20 and not descriptor & 3  # 4-byte size, no window byte, no dictionary
    return frame[:5] + struct.pack("<I", size) + frame[9:]


@pytest.mark.parametrize("delta", [-1000, 1000, -(1 << 20)])
def test_a_frame_lying_about_its_content_size_is_refused(tmp_path, a_nar, delta):
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(a_nar)
    with pytest.raises(zstandard.ZstdError):
        _restore(_with_content_size(frame, len(a_nar) + delta), len(a_nar), tmp_path / "out")


def test_frames_ending_inside_nar_tokens_restore_with_the_hash_of_the_bytes_handed_out(tmp_path, a_nar):
    cctx = zstandard.ZstdCompressor(write_content_size=True)
    cuts = list(range(0, 3000, 13)) + [len(a_nar)]  # a frame every 13 bytes through the NAR's head
    compressed = b"".join(cctx.compress(a_nar[a:b]) for a, b in zip(cuts, cuts[1:]))
    reader = _restore(compressed, len(a_nar), tmp_path / "out")
    assert reader.size == len(a_nar) and reader.sha256.digest() == hashlib.sha256(a_nar).digest()
    assert (tmp_path / "out" / "g").read_bytes() == b"short"


def test_a_truncated_or_overlong_zstd_stream_is_refused(tmp_path, a_nar):
    cctx = zstandard.ZstdCompressor(write_content_size=True)
    whole = cctx.compress(a_nar)
    with pytest.raises(NarFormatError, match="truncated"):
        _restore(whole[: len(whole) // 2], len(a_nar), tmp_path / "cut")
    with pytest.raises(NarFormatError, match="longer than"):
        _restore(whole + cctx.compress(b"x" * 100), len(a_nar), tmp_path / "long")
    endless = zstandard.ZstdCompressor().compress(bytes(8 << 20)) * 20  # 160 MiB of zeros from a few KiB
    with pytest.raises(NarFormatError):
        _restore(endless, len(a_nar), tmp_path / "zeros")
