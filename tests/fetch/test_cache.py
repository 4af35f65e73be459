"""The download caches: sizes, in-use marks, `gc --caches`, the maxCacheSize budget (LRU)."""

from __future__ import annotations

import json
import os
import time

import pytest

from cudapkgs.cli import main
from cudapkgs.errors import ConfigError
from cudapkgs.fetch.cache import collect, drop_if_empty, entries, in_use, use_download_entry
from cudapkgs.config import parse_size
from cudapkgs.fetch.wheel_lookup import wheel_cache_directory
from cudapkgs.store.locks import PathLock


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 0), ("123", 123), ("1KiB", 1024), ("1.5 MiB", 1572864), ("5GiB", 5 * 1024**3), ("2GB", 2 * 10**9),
     ("500mb", 500 * 10**6), ("1TiB", 1024**4), (42, 42)],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "5 parsecs", "-1", "GiB", "1.2.3MB", -5])
def test_parse_size_refuses(bad):
    with pytest.raises(ConfigError):
        parse_size(bad)


def _archive(store, name: str, size: int, age: float):
    entry = store / ".cache" / "downloads" / (name * 64)[:64]
    entry.mkdir(parents=True)
    archive = entry / f"{name}-archive.tar.xz"
    archive.write_bytes(b"x" * size)
    (entry / ".lock").write_text("")
    stamp = time.time() - age
    os.utime(archive, (stamp, stamp))
    return archive


def _wheel(name: str, size: int, age: float):
    cache = wheel_cache_directory()
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / f"{name}-1.0-py3-none-manylinux_2_17_x86_64.whl"
    wheel.write_bytes(b"w" * size)
    (cache / (wheel.name + ".sha256")).write_text("0" * 64 + "\n")
    stamp = time.time() - age
    os.utime(wheel, (stamp, stamp))
    return wheel


def test_least_recently_used_entries_go_first_until_the_budget_holds(tmp_path):
    store = tmp_path / "store"
    old = _archive(store, "a", 4000, age=3000)
    wheel = _wheel("nvidia_old", 3000, age=2000)
    newer = _archive(store, "b", 2000, age=1000)
    newest = _wheel("nvidia_new", 1000, age=10)
    listed = entries(store)
    assert [e.path for e in listed] == [old.parent, wheel, newer.parent, newest]
    total = sum(e.size for e in listed)
    assert total >= 10000

    preview = collect(store, max_size=4000, dry_run=True)
    assert [e.path for e in preview.deleted] == [old.parent, wheel] and old.exists()
    result = collect(store, max_size=4000)
    assert [e.path for e in result.deleted] == [old.parent, wheel]
    assert not old.parent.exists() and not wheel.exists() and not wheel.with_name(wheel.name + ".sha256").exists()
    assert newer.exists() and newest.exists() and result.kept == total - result.freed <= 4000
    assert [e.path for e in collect(store, max_size=1500).deleted] == [newer.parent]


def test_an_entry_a_build_uses_is_never_deleted(tmp_path):
    store = tmp_path / "store"
    archive = _archive(store, "a", 100, age=100)
    wheel = _wheel("nvidia_x", 100, age=100)
    with PathLock(archive.parent / ".inuse", shared=True), in_use(wheel) as alive:
        assert alive
        result = collect(store)
        assert {e.path for e in result.in_use} == {archive.parent, wheel}
        assert archive.exists() and wheel.exists() and result.deleted == []
    assert time.time() - wheel.stat().st_mtime < 60  # using it made it recent
    result = collect(store)
    assert {e.path for e in result.deleted} == {archive.parent, wheel}
    with in_use(wheel) as alive:
        assert alive is False  # collected: the build fetches again


def test_old_unpacked_trees_are_collected(tmp_path):
    """Older versions kept an unpacked copy of each wheel in the download cache; gc --caches frees it."""
    store = tmp_path / "store"
    archive = _archive(store, "c", 10, age=5)
    tree = archive.parent / "cuda_nvcc-13.0.88-wheel" / "bin"
    tree.mkdir(parents=True)
    (tree / "nvcc").write_bytes(b"n" * 5000)
    assert entries(store)[0].size >= 5010
    assert collect(store).freed >= 5010 and not archive.parent.exists()


def test_gc_caches_command(tmp_path, monkeypatch, capsys):
    store = tmp_path / "store"
    monkeypatch.setenv("CUDAPKGS_STORE", str(store))
    _archive(store, "a", 3000, age=100)
    _wheel("nvidia_y", 1000, age=1)
    assert main(["gc", "--caches", "--max-cache-size", "2KiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["cache"] for d in data["deleted"]] == ["downloads"] and data["bytesFreed"] >= 3000
    assert data["bytesKept"] < 2048 and data["dryRun"] is False
    assert main(["gc", "--caches"]) == 0
    out = capsys.readouterr().out
    assert "1 cache entries deleted" in out and "0 B left in the caches" in out
    assert main(["gc", "--max-cache-size", "1GiB"]) == 2
    assert "--max-cache-size goes with --caches" in capsys.readouterr().err
    assert main(["gc", "--caches", "--max-cache-size", "lots"]) == 1
    assert "'lots' is not a size" in capsys.readouterr().err


def test_max_cache_size_is_a_checked_config_key(capsys):
    assert main(["config", "--set", 'maxCacheSize="3GiB"', "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["maxCacheSize"] == "3GiB"
    assert main(["eval", "--set", 'maxCacheSize="3 apples"', "cudaPackages.cudaMajorMinorVersion"]) == 1
    assert "maxCacheSize" in capsys.readouterr().err


def test_budget_applied_after_a_build(tmp_path, capsys):
    from cudapkgs.cli.build import _trim_caches

    store = tmp_path / "store"
    _archive(store, "a", 3000, age=100)
    keep = _wheel("nvidia_z", 500, age=1)
    _trim_caches(str(store), "1KiB")
    assert "maxCacheSize 1KiB: evicted 1 least recently used cache entries" in capsys.readouterr().err
    assert keep.exists() and not (store / ".cache" / "downloads" / ("a" * 64)).exists()


def test_path_info_shows_cache_sizes(tmp_path, monkeypatch, capsys):
    store = tmp_path / "store"
    monkeypatch.setenv("CUDAPKGS_STORE", str(store))
    _archive(store, "a", 3000, age=10)
    _wheel("nvidia_q", 1000, age=10)
    assert main(["path-info", "--caches", "--json"]) == 0
    rows = {r["cache"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["downloads"]["entries"] == 1 and rows["downloads"]["size"] >= 3000
    assert rows["wheels"]["entries"] == 1 and rows["wheels"]["size"] >= 1000
    assert main(["path-info"]) == 2
    assert "path-info needs a PATH (or --caches)" in capsys.readouterr().err


def test_drop_if_empty_deletes_only_entries_without_a_download(tmp_path):
    downloads = tmp_path / "store" / ".cache" / "downloads"
    empty = downloads / ("a" * 64)
    empty.mkdir(parents=True)
    (empty / ".lock").write_text("")
    (empty / ".inuse").write_text("")
    (empty / "x.tar.xz.part").write_bytes(b"")
    assert drop_if_empty(empty) and not empty.exists()
    partial = downloads / ("b" * 64)
    partial.mkdir()
    (partial / "x.tar.xz.part").write_bytes(b"half")  # resumed by the next fetch: kept
    assert not drop_if_empty(partial) and (partial / "x.tar.xz.part").exists()
    full = downloads / ("c" * 64)
    full.mkdir()
    (full / "x.tar.xz").write_bytes(b"archive")
    assert not drop_if_empty(full) and (full / "x.tar.xz").exists()
    assert not drop_if_empty(downloads / ("d" * 64))  # no such entry: nothing to do


def test_drop_if_empty_leaves_an_entry_another_process_holds(tmp_path):
    entry = tmp_path / ("a" * 64)
    held = use_download_entry(entry)  # a build reading (or about to download into) it
    try:
        assert not drop_if_empty(entry) and entry.is_dir()
    finally:
        held.release()
    with PathLock(entry / ".lock"):  # a download in progress
        assert not drop_if_empty(entry) and entry.is_dir()
    assert drop_if_empty(entry) and not entry.exists()
    held = use_download_entry(entry)  # made again on use
    held.release()
    assert (entry / ".inuse").exists()


def test_a_cache_directory_another_user_controls_is_neither_listed_nor_collected(tmp_path, nobody_uid):
    """The wheel cache as a link of another user's (in a sticky directory, as /tmp) to a directory of yours:
    before, `gc --caches` listed what that directory held and deleted it (rmtree of each directory)."""
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    (home / "project" / "work.txt").write_text("mine\n")
    (home / "notes.whl").write_text("mine too\n")
    cache = wheel_cache_directory()
    cache.parent.mkdir(parents=True, exist_ok=True)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "wheels").symlink_to(home)
    os.lchown(sticky / "wheels", nobody_uid, -1)
    cache.symlink_to(sticky / "wheels")  # yours, to theirs, to your home
    assert entries(None) == [] and collect(None).deleted == []
    assert (home / "project" / "work.txt").read_text() == "mine\n" and (home / "notes.whl").exists()
    os.lchown(sticky / "wheels", 0, -1)  # every link yours: the cache is what it leads to
    assert sorted(e.path.name for e in entries(None)) == ["notes.whl", "project"]
