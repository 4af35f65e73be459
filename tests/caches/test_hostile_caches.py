"""Caches that try to hang or flood the client (issue 23, class 3); each of these hung or crashed before.

* two signed narinfos naming each other: `copy --from` waited forever (holding the gc lock);
* a NAR without FileSize padded with zstd skippable frames: read until the server stopped;
* a server dripping a byte at a time: held the client as long as it liked;
* a FIFO narinfo or NAR in a file:// cache hung it; a directory NAR crashed it (exit 70);
* `copy --from` asked for the narinfo of a path it could not give twice.

Every test is bounded in time on any code: servers stop after a few seconds, CLI runs have a
timeout, and a FIFO that would block a reader is opened for writing to release it.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cache_helpers import fresh_store_like, make_closure
from loopback_server import serve
from slow_server import raw_server

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.base import CacheError, CacheUnavailable, SubstituteRefused
from cudapkgs.store.caches.http import HttpCache
from cudapkgs.store.caches.narinfo import NarInfo
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.store import Store


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudapkgs", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


@pytest.fixture
def cached(tmp_path):
    """(store dir, dep, top, key, cache dir): a signed two-path closure in a file cache, the store emptied."""
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store, size=20_000)
    key = generate("hostile-1")
    open_cache(f"file://{tmp_path}/cache").upload_closure(store, [top], secret_key=key)
    fresh_store_like(store, tmp_path / "old").close()
    return str(tmp_path / "store"), dep, top, key, tmp_path / "cache"


def narinfo_file(cache_dir: Path, path: str) -> Path:
    return cache_dir / (os.path.basename(path)[:32] + ".narinfo")


def rewrite(cache_dir: Path, path: str, key, **changes) -> NarInfo:
    """Change fields of `path`'s narinfo and sign it again with `key` (a signer that lies)."""
    file = narinfo_file(cache_dir, path)
    info = dataclasses.replace(NarInfo.parse(file.read_bytes(), str(file)), sigs=(), **changes)
    info = info.with_sigs((key.sign(info.fingerprint()),))
    file.write_text(info.to_text())
    return info


# -- a references cycle --------------------------------------------------------------------------


def test_signed_narinfos_naming_each_other_are_an_error_not_a_wait(cached):
    store_dir, dep, top, key, cache_dir = cached
    rewrite(cache_dir, dep, key, references=(os.path.basename(top),))
    result = run_cli("copy", "--from", f"file://{cache_dir}", "--trusted-public-key", str(key.public), top,
                     env={"CUDAPKGS_STORE": store_dir})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    warning, error = result.stderr.strip().splitlines()
    assert "cycle detected in the references of" in warning and os.path.basename(dep) in warning
    assert error.startswith(f"cudapkgs: error: file://{cache_dir} cannot give {top}")
    with Store.open(store_dir) as store:
        assert store.all_paths() == []


def test_the_query_leaves_a_cycle_out_and_says_so(cached):
    store_dir, dep, top, key, cache_dir = cached
    rewrite(cache_dir, dep, key, references=(os.path.basename(top),))
    warnings: list[str] = []
    subs = Substituters([open_cache(f"file://{cache_dir}")], [key.public], warn=warnings.append)
    with Store.open(store_dir) as store:
        assert subs.query(store, [top]) == {}
    assert len(warnings) == 1 and "cycle" in warnings[0]


# -- bounds from the signed NarSize ---------------------------------------------------------------


def _skippable(size: int) -> bytes:
    """A zstd skippable frame (RFC 8878 section 3.1.2) of `size` bytes of payload."""
    return struct.pack("<II", 0x184D2A50, size) + b"\0" * size


def _drop_file_size(cache_dir: Path, path: str) -> NarInfo:
    """Remove FileSize/FileHash from `path`'s narinfo: they are not signed, so the signature still holds."""
    file = narinfo_file(cache_dir, path)
    file.write_text("".join(line + "\n" for line in file.read_text().splitlines()
                            if not line.startswith(("FileSize:", "FileHash:"))))
    return NarInfo.parse(file.read_bytes(), str(file))


def test_a_file_cache_nar_padded_past_what_nar_size_allows_is_refused_before_reading(cached):
    store_dir, dep, _top, key, cache_dir = cached
    info = _drop_file_size(cache_dir, dep)
    with open(cache_dir / info.url, "ab") as nar:
        for _ in range(8):
            nar.write(_skippable(1 << 20))
    with Store.open(store_dir) as store:
        with pytest.raises(SubstituteRefused, match="more than the .* allowed for it"):
            open_cache(f"file://{cache_dir}").substitute(store, dep, trusted_keys=[key.public])
        assert store.all_paths() == []


def test_an_http_nar_without_file_size_cannot_stream_skippable_frames_forever(cached):
    store_dir, dep, _top, key, cache_dir = cached
    info = _drop_file_size(cache_dir, dep)
    nar_bytes = (cache_dir / info.url).read_bytes()
    narinfo = narinfo_file(cache_dir, dep).read_bytes()
    sent = [0]

    def padded(conn, srv):
        head = srv.read_request(conn).decode()
        if ".narinfo" in head.split("\r\n")[0]:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(narinfo) + narinfo)
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + nar_bytes)
        frame = _skippable(1 << 20)
        while not srv.stopping.is_set() and sent[0] < 64 << 20:  # the old client read all 64 MiB, then succeeded
            conn.sendall(frame)
            sent[0] += len(frame)

    with raw_server(padded, cap_s=10) as srv, Store.open(store_dir) as store:
        with pytest.raises(SubstituteRefused, match="more than the .* allowed for it"):
            HttpCache(srv.url).substitute(store, dep, trusted_keys=[key.public])
        assert store.all_paths() == []
    assert sent[0] < 16 << 20  # cut near the bound (NarSize + 3 % + 1 MiB), not at the server's whim


def test_a_server_dripping_a_narinfo_does_not_hold_the_client(cached):
    store_dir, dep, _top, key, _cache_dir = cached

    def drip(conn, srv):
        srv.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n")
        srv.drip(conn, b"StorePath: " + b"x" * 4989, 0.2)

    with raw_server(drip, cap_s=10) as srv:
        cache = HttpCache(srv.url, timeout=1.0)  # each byte comes well within the 1 s read timeout
        with pytest.raises(CacheUnavailable, match="stalled|deadline"):
            cache.narinfo(dep)
        warnings: list[str] = []
        with Store.open(store_dir) as store:
            assert Substituters([cache], [key.public], warn=warnings.append).query(store, [dep]) == {}
        assert len(warnings) == 1 and "not using" in warnings[0]


# -- only regular files in a file:// cache ---------------------------------------------------------


def _bounded(call):
    """Run `call()` in a thread; (finished, result or exception). A call stuck past 20 s is reported, not waited for."""
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(_catch(call)), daemon=True)
    thread.start()
    thread.join(20)
    return (not thread.is_alive()), (outcome[0] if outcome else None)


def _catch(call):
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - the test inspects it
        return error


def test_a_fifo_narinfo_in_a_file_cache_is_refused_not_waited_on(cached):
    _store_dir, dep, _top, _key, cache_dir = cached
    fifo = narinfo_file(cache_dir, dep)
    fifo.unlink()
    os.mkfifo(fifo)
    finished, outcome = _bounded(lambda: open_cache(f"file://{cache_dir}").narinfo(dep))
    if not finished:  # release the reader stuck in open(): a writer that closes at once
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert finished, "reading a FIFO narinfo hung"
    assert isinstance(outcome, CacheError) and f"{fifo.name}: is a FIFO, not a regular file" in str(outcome)


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_nar_that_is_no_regular_file_is_one_line(cached, kind):
    store_dir, dep, _top, key, cache_dir = cached
    nar = cache_dir / NarInfo.parse(narinfo_file(cache_dir, dep).read_bytes(), "x").url
    nar.unlink()
    os.mkfifo(nar) if kind == "fifo" else nar.mkdir()
    try:
        result = run_cli("copy", "--from", f"file://{cache_dir}", "--trusted-public-key", str(key.public), dep,
                         env={"CUDAPKGS_STORE": store_dir})
    except subprocess.TimeoutExpired:
        pytest.fail(f"copy --from hung on a {kind} NAR")
    finally:
        if kind == "fifo":
            try:
                os.close(os.open(nar, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass  # no reader waiting: nothing to release
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{nar.name}: is a {'FIFO' if kind == 'fifo' else 'directory'}, not a regular file" in result.stderr
    with Store.open(store_dir) as store:
        assert store.all_paths() == []


# -- each narinfo asked for once -----------------------------------------------------------------


def test_copy_from_asks_for_a_narinfo_it_cannot_use_once(cached, monkeypatch, capsys):
    """A path the cache lacks: the query's 404 is the answer; the error is worded without asking again."""
    store_dir, _dep, _top, _key, cache_dir = cached
    absent = f"{store_dir}/{'a' * 32}-absent-1.0"
    serving = serve(keep_alive=True)
    server = next(serving)
    try:
        for file in cache_dir.rglob("*"):
            if file.is_file():
                server.files["/" + file.relative_to(cache_dir).as_posix()] = file.read_bytes()
        monkeypatch.setenv("CUDAPKGS_STORE", store_dir)
        from cudapkgs.cli import main

        assert main(["copy", "--from", server.url, absent]) == 1
        assert f"{server.url} does not have {absent}" in capsys.readouterr().err
        assert server.hits(f"/{'a' * 32}.narinfo") == 1
    finally:
        serving.close()
