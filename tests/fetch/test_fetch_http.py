from __future__ import annotations

import os

import pytest
from fetch_server import server, sha  # noqa: F401 - server is a fixture

from cudapkgs.errors import FetchError, HashMismatchError
from cudapkgs.fetch import download

DATA = os.urandom(3 * 1024 * 1024 + 123)


def fast(**kwargs):
    return {"backoff": 0.0, "timeout": 10, **kwargs}


def test_full_download_with_progress(server, tmp_path):
    server.files["/a.tar.xz"] = DATA
    seen = []
    dest = download(
        f"{server.url}/a.tar.xz",
        tmp_path / "a.tar.xz",
        sha256=sha(DATA),
        size=len(DATA),
        progress=lambda done, total: seen.append((done, total)),
        **fast(),
    )
    assert dest.read_bytes() == DATA
    assert not (tmp_path / "a.tar.xz.part").exists()
    assert seen[-1] == (len(DATA), len(DATA))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_wrong_hash_leaves_nothing(server, tmp_path):
    server.files["/a.tar.xz"] = DATA
    wrong = "0" * 64
    with pytest.raises(HashMismatchError) as caught:
        download(f"{server.url}/a.tar.xz", tmp_path / "a.tar.xz", sha256=wrong, **fast())
    message = str(caught.value)
    assert "a.tar.xz" in message and wrong in message and sha(DATA) in message
    assert caught.value.expected == wrong and caught.value.actual == sha(DATA)
    assert os.listdir(tmp_path) == []


def test_server_error_is_retried(server, tmp_path):
    server.files["/a"] = DATA
    server.script = ["500", "500"]
    download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), **fast())
    assert server.hits("/a") == 3
    assert (tmp_path / "a").read_bytes() == DATA


def test_gives_up_after_attempts(server, tmp_path):
    server.files["/a"] = DATA
    server.script = ["500"] * 10
    with pytest.raises(FetchError, match=r"HTTP 500.*after 3 attempts"):
        download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), **fast(attempts=3))
    assert server.hits("/a") == 3
    assert not (tmp_path / "a").exists()


def test_not_found_is_not_retried(server, tmp_path):
    with pytest.raises(FetchError, match="HTTP 404"):
        download(f"{server.url}/missing", tmp_path / "a", sha256=sha(DATA), **fast())
    assert server.hits("/missing") == 1


def test_truncated_body_is_resumed_with_range(server, tmp_path):
    server.files["/a"] = DATA
    server.script = ["truncate"]
    dest = download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), size=len(DATA), **fast())
    assert dest.read_bytes() == DATA
    (_, first), (_, second) = server.requests
    assert "Range" not in first
    assert second["Range"] == f"bytes={len(DATA) // 2}-"


def test_part_from_an_earlier_run_is_resumed(server, tmp_path):
    server.files["/a"] = DATA
    (tmp_path / "a.part").write_bytes(DATA[:1000])
    download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), **fast())
    assert server.requests[0][1]["Range"] == "bytes=1000-"
    assert (tmp_path / "a").read_bytes() == DATA


def test_server_ignoring_range_restarts(server, tmp_path):
    server.files["/a"] = DATA
    (tmp_path / "a.part").write_bytes(DATA[:1000])
    server.script = ["ignore-range"]
    download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), size=len(DATA), **fast())
    assert server.hits("/a") == 1
    assert (tmp_path / "a").read_bytes() == DATA


def test_stale_part_of_another_file_is_redone_once(server, tmp_path):
    server.files["/a"] = DATA
    (tmp_path / "a.part").write_bytes(b"x" * 1000)
    download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), **fast())
    assert (tmp_path / "a").read_bytes() == DATA
    assert "Range" not in server.requests[-1][1]


def test_size_mismatch(server, tmp_path):
    server.files["/a"] = DATA
    with pytest.raises(HashMismatchError, match=rf"a: expected {len(DATA) + 5} bytes, got {len(DATA)}"):
        download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), size=len(DATA) + 5, **fast(attempts=2))
    assert os.listdir(tmp_path) == []


def test_larger_than_size_stops_early(server, tmp_path):
    server.files["/a"] = DATA
    with pytest.raises(HashMismatchError, match="expected 10 bytes"):
        download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), size=10, **fast())
    assert os.listdir(tmp_path) == []


def test_local_path_and_file_url(tmp_path):
    source = tmp_path / "src.bin"
    source.write_bytes(DATA)
    out = tmp_path / "out"
    assert download(str(source), out / "one", sha256=sha(DATA)).read_bytes() == DATA
    assert download(source.as_uri(), out / "two", sha256=sha(DATA)).read_bytes() == DATA
    with pytest.raises(FetchError, match="cannot read"):
        download(str(tmp_path / "nope"), out / "three", sha256=sha(DATA))
    with pytest.raises(HashMismatchError):
        download(str(source), out / "four", sha256="1" * 64)
    assert sorted(os.listdir(out)) == ["one", "two"]


def test_verified_dest_is_reused(server, tmp_path):
    (tmp_path / "a").write_bytes(DATA)
    download(f"{server.url}/a", tmp_path / "a", sha256=sha(DATA), **fast())
    assert server.requests == []


def test_a_name_that_does_not_resolve_fails_at_once(tmp_path, monkeypatch):
    """No network (or a typo in a mirror URL): one attempt, no backoff, the reason in the message."""
    import socket

    calls = []

    def unresolvable(host, *args, **kwargs):
        calls.append(host)
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unresolvable)
    with pytest.raises(FetchError, match="Name or service not known") as info:
        download("https://mirror.example/cuda/x.tar.xz", tmp_path / "x.tar.xz", sha256="0" * 64, backoff=5)
    assert len(calls) == 1 and "attempts" not in str(info.value)
