"""A FIFO, a device or a link put in a cache never hangs or floods cudapkgs (issue 30, item 10).

Every file cudapkgs reads from a cache (the wheel cache, the redist and sources caches, the data and
probe caches, the manifests' records) is opened without blocking and must be a regular file by its
descriptor, read no further than it was long when opened.  Each test runs the call on a thread and
waits at most 20 s for it; a call still blocked then is released (the FIFO opened for writing and
closed) and the test fails, so the suite never hangs whatever the code does.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zipfile
from pathlib import Path

import pytest

from cudapkgs.errors import CudapkgsError


def _returns_promptly(fn, *fifos: Path):
    """(value, None) or (None, exception) of `fn()`; fails the test if it is still blocked after 20 s."""
    outcome: list = []

    def call() -> None:
        try:
            outcome.append((fn(), None))
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome.append((None, error))

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        for fifo in fifos:  # let the blocked open return, so that the thread ends
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        worker.join(5)
        pytest.fail(f"{fn} blocked on a FIFO in the cache")
    return outcome[0]


def _wheel(path: Path) -> bytes:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("demo/__init__.py", "")
        z.writestr("demo-1.0.dist-info/RECORD", "demo/__init__.py,,\ndemo-1.0.dist-info/RECORD,,\n")
    return path.read_bytes()


WHEEL = "nvidia_demo_cu12-1.0-py3-none-manylinux2014_x86_64.whl"


def test_a_fifo_named_like_a_cached_wheel_is_no_cached_wheel(tmp_path):
    from cudapkgs.fetch.wheel_lookup import cached_wheel

    os.mkfifo(tmp_path / WHEEL)
    (tmp_path / f"{WHEEL}.sha256").write_text("ab" * 32 + "\n")
    value, error = _returns_promptly(lambda: cached_wheel("nvidia-demo-cu12", "1.0", "x86_64", tmp_path),
                                     tmp_path / WHEEL)
    assert error is None and value is None


@pytest.mark.parametrize("call", ["unpack_wheel", "install_wheel", "expansion"])
def test_unpacking_a_fifo_from_the_wheel_cache_is_a_one_line_error(tmp_path, call):
    from cudapkgs.fetch.wheel_install import install_wheel
    from cudapkgs.fetch.wheel_unpack import unpack_wheel
    from cudapkgs.realise.redist_source import _check_wheel_expansion

    fifo = tmp_path / WHEEL
    os.mkfifo(fifo)
    calls = {
        "unpack_wheel": lambda: unpack_wheel(fifo, tmp_path / "out", pname="demo", sha256="ab" * 32),
        "install_wheel": lambda: install_wheel(fifo, site=tmp_path / "site", prefix=tmp_path / "prefix",
                                               sha256="ab" * 32),
        "expansion": lambda: _check_wheel_expansion(fifo, None),
    }
    _, error = _returns_promptly(calls[call], fifo)
    assert isinstance(error, CudapkgsError), error
    assert str(fifo) in str(error) or fifo.name in str(error)
    assert "FIFO" in str(error) and "\n" not in str(error)
    assert not (tmp_path / "out").exists()


def test_a_redist_archive_that_is_a_fifo_is_refused_when_unpacked(tmp_path):
    from cudapkgs.fetch.archives import UnpackError, unpack

    fifo = tmp_path / "cuda_demo-linux-x86_64-1.0-archive.tar.xz"
    os.mkfifo(fifo)
    _, error = _returns_promptly(lambda: unpack(fifo, tmp_path / "out"), fifo)
    assert isinstance(error, UnpackError) and "FIFO" in str(error), error


def test_a_fifo_at_a_download_s_part_name_is_replaced_not_waited_on(tmp_path):
    from cudapkgs.fetch.http import download

    source = tmp_path / "source.tar"
    source.write_bytes(b"archive bytes")
    cache = tmp_path / "cache"
    cache.mkdir()
    os.mkfifo(cache / "source.tar.part")
    value, error = _returns_promptly(
        lambda: download(source.as_uri(), cache / "source.tar", sha256=hashlib.sha256(b"archive bytes").hexdigest()),
        cache / "source.tar.part")
    assert error is None and value.read_bytes() == b"archive bytes"


def test_a_fifo_where_a_cached_download_was_is_fetched_again(tmp_path):
    from cudapkgs.fetch.http import download

    source = tmp_path / "source.tar"
    source.write_bytes(b"archive bytes")
    cache = tmp_path / "cache"
    cache.mkdir()
    os.mkfifo(tmp_path / "fifo")
    (cache / "source.tar").symlink_to(tmp_path / "fifo")  # the cached file, a link to a FIFO
    value, error = _returns_promptly(
        lambda: download(source.as_uri(), cache / "source.tar", sha256=hashlib.sha256(b"archive bytes").hexdigest()),
        tmp_path / "fifo")
    assert error is None and value.read_bytes() == b"archive bytes" and not value.is_symlink()


def test_the_data_file_cache_and_the_probe_cache_as_fifos_are_misses(tmp_path, monkeypatch):
    from cudapkgs import datafiles
    from cudapkgs.host import probes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "table.toml"
    source.write_text("answer = 42\n")
    cache = Path(datafiles._cache_file(source, source.stat()))
    cache.parent.mkdir(parents=True)
    os.mkfifo(cache)
    value, error = _returns_promptly(lambda: datafiles.load_toml(source), cache)
    assert error is None and value == {"answer": 42}

    probe_cache = tmp_path / "probes.json"
    os.mkfifo(probe_cache)
    probes.forget()
    value, error = _returns_promptly(lambda: probes._load(probe_cache), probe_cache)
    assert error is None and value == {}


def test_a_manifest_s_sha256_record_that_is_a_fifo_reads_as_none(tmp_path):
    from cudapkgs.manifests.locate import _read_sha256_file

    manifest = tmp_path / "redistrib_12.8.0.json"
    manifest.write_text("{}")
    os.mkfifo(tmp_path / "redistrib_12.8.0.json.sha256")
    value, error = _returns_promptly(lambda: _read_sha256_file(manifest), tmp_path / "redistrib_12.8.0.json.sha256")
    assert error is None and value is None


def test_open_cached_refuses_links_devices_and_oversized_files(tmp_path):
    from cudapkgs.inputs import open_cached, read_cached

    (tmp_path / "file").write_bytes(b"x" * 100)
    (tmp_path / "link").symlink_to(tmp_path / "file")
    assert read_cached(tmp_path / "file", 100) == b"x" * 100
    with pytest.raises(OSError):
        read_cached(tmp_path / "file", 99)
    with pytest.raises(OSError):
        open_cached(tmp_path / "link")
    assert read_cached(tmp_path / "link", 100, follow_links=True) == b"x" * 100
    with pytest.raises(OSError, match="character device"):
        open_cached("/dev/zero", follow_links=True)


def test_a_local_mirror_file_swapped_for_a_fifo_is_not_waited_on(tmp_path):
    """fetchurl copies a mirror's file after finding it a regular file; one that became a FIFO since is
    refused at the open (`shutil.copyfile` waited for a writer)."""
    from cudapkgs.fetch.fetchurl import _copy_regular

    fifo = tmp_path / "source.tar.gz"
    os.mkfifo(fifo)
    _, error = _returns_promptly(lambda: _copy_regular(fifo, tmp_path / "copy"), fifo)
    assert isinstance(error, OSError) and "FIFO" in str(error)
    assert not (tmp_path / "copy").exists()


def test_marking_a_fifo_wheel_in_use_and_collecting_caches_do_not_wait(tmp_path):
    """The build marks a cached wheel in use (a shared flock on it) before unpacking it, and
    `gc --caches` tries an exclusive one: each opened the name blocking, so a FIFO there hung both."""
    from cudapkgs.fetch.cache import _try_exclusive, in_use

    fifo = tmp_path / WHEEL
    os.mkfifo(fifo)

    def mark() -> bool:
        with in_use(fifo) as alive:
            return alive

    value, error = _returns_promptly(mark, fifo)
    assert error is None and value is True  # then the unpack refuses it (above)
    fd, error = _returns_promptly(lambda: _try_exclusive(fifo), fifo)
    assert error is None
    if fd is not None and not isinstance(fd, int):
        fd.close()  # a HeldDescriptor


def test_the_in_use_marker_of_a_download_is_not_created_through_a_link(tmp_path):
    from cudapkgs.fetch.cache import in_use

    entry = tmp_path / "downloads" / "abc"
    entry.mkdir(parents=True)
    (entry / "cuda.tar.xz").write_bytes(b"x")
    target = tmp_path / "outside-created"
    (entry / ".inuse").symlink_to(target)
    with pytest.raises(CudapkgsError, match=".inuse"):
        with in_use(entry / "cuda.tar.xz"):
            pass
    assert not target.exists()


def test_serve_does_not_wait_on_a_kept_nar_swapped_for_a_fifo(tmp_path):
    """`serve` keeps small NARs in its cache directory and sends them from there; one replaced by a FIFO
    since it was kept made the event loop wait for a writer, so the server answered no one. It is now
    forgotten and the NAR made from the store again."""
    import http.client

    from cudapkgs.store import nar
    from cudapkgs.store.caches import open_cache
    from cudapkgs.store.caches.serve import make_server
    from cudapkgs.store.store import Store

    with Store.open(tmp_path / "store") as store:
        def tree(out: Path) -> None:
            out.mkdir()
            (out / "data").write_bytes(b"kept small\n")

        path = store.add_path("small-1.0", tree)
        expected = b"".join(nar.dump(path))
    server = make_server(str(tmp_path / "store"), "127.0.0.1", 0, cache_dir=tmp_path / "kept")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    fifos: list[Path] = []

    def get(url: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            conn.request("GET", "/" + url)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    try:
        info = open_cache(f"http://127.0.0.1:{port}").narinfo(path)
        assert get(info.url) == (200, expected)
        kept = [tmp_path / "kept" / name for name in os.listdir(tmp_path / "kept")]
        assert len(kept) == 1
        os.unlink(kept[0])
        os.mkfifo(kept[0])
        fifos.append(kept[0])
        value, error = _returns_promptly(lambda: get(info.url), *fifos)
        assert error is None and value == (200, expected)
    finally:
        for fifo in fifos:  # a server stuck on the FIFO (the old open) is released before it is stopped
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize("how", ["another user's", "group-writable"])
def test_a_data_file_or_probe_cache_another_user_wrote_is_not_believed(tmp_path, monkeypatch, how, request):
    """The data-file cache (the parsed package sets, component table, capability tables) and the probe cache
    (a compiler's ``-dM -E``) are believed as they are: before, a file another user put there (a cache
    directory shared, or writable by a group) was, FIFOs and links aside. Now only a file of the current user
    or root that no one else can write is, as an evaluation cache entry."""
    from cudapkgs import datafiles
    from cudapkgs.host import probes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "table.toml"
    source.write_text("answer = 42\n")
    cache = Path(datafiles._cache_file(source, source.stat()))
    cache.parent.mkdir(parents=True)
    cache.write_text('{"answer": "forged"}')

    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho 'tool 1.2.3'\n")
    tool.chmod(0o755)
    assert probes.run([str(tool), "--version"])[1] == "tool 1.2.3\n"  # its answer recorded in the probe cache
    probe_cache = probes.cache_file()
    forged = probe_cache.read_text().replace("tool 1.2.3", "tool 6.6.6")
    probe_cache.unlink()
    probe_cache.write_text(forged)

    for planted in (cache, probe_cache):
        if how == "another user's":
            os.chown(planted, request.getfixturevalue("nobody_uid"), -1)
        else:
            os.chmod(planted, 0o664)
    probes.forget()
    assert datafiles.load_toml(source) == {"answer": 42}
    assert probes.run([str(tool), "--version"])[1] == "tool 1.2.3\n"
