"""A file:// cache's upload temporaries: a SIGKILL mid-upload leaves one in ``.cudapkgs-uploads`` (not in
the root, not named like a NAR), the next upload removes it, and never a live upload's; each object is
synced before its rename and its directory after, the narinfo last."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from cache_helpers import make_closure

from cudapkgs.store.caches import open_cache, upload_temps
from cudapkgs.store.caches.base import CacheError
from cudapkgs.store.caches.file import FileCache
from cudapkgs.store.store import Store

# The child uploads a closure whose first NAR is a few MiB; once its bytes flow it says so and waits
# to be killed (the bytes callback runs in the reading thread, mid-upload).
CHILD = textwrap.dedent("""\
    import os, sys, threading, time
    from cudapkgs.store.caches import open_cache
    from cudapkgs.store.store import Store

    store_dir, url, path, ready = sys.argv[1:]
    store = Store.open(store_dir, read_only=True)

    class Progress:
        def begin(self, paths): pass
        def started(self, path, size): pass
        def finished(self, path, info): pass
        def bytes(self, path, done):
            open(ready, "w").close()
            time.sleep(3600)

    open_cache(url).upload_closure(store, [path], progress=Progress())
""")


def _kill_mid_upload(tmp_path, store, path, url):
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", CHILD, store.store_dir, url, path, str(ready)],
                             stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if ready.exists() or child.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), child.stderr.read() if child.poll() is not None else "the child never started uploading"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL


def _age(path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_sigkilled_upload_leaves_its_temporary_aside_and_the_next_upload_removes_it(tmp_path):
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store, size=8 << 20)
    store.close()
    root = tmp_path / "cache"
    url = f"file://{root}"
    _kill_mid_upload(tmp_path, store, top, url)
    # nothing in the root but the cache's own files; the temporary is in its directory, not a .nar
    assert sorted(os.listdir(root)) == [".cudapkgs-uploads", "nix-cache-info"]
    (left,) = os.listdir(root / ".cudapkgs-uploads")
    assert left.endswith(".part") and not left.endswith(".nar")
    assert not list(root.glob("*.narinfo")) and not (root / "nar").exists()  # nothing half-published
    # a later upload right away: the file is young, it stays (its writer may be between create and lock)
    with Store.open(tmp_path / "store", read_only=True) as again:
        open_cache(url).upload_closure(again, [dep])
        assert os.listdir(root / ".cudapkgs-uploads") == [left]
        _age(root / ".cudapkgs-uploads" / left, 2 * upload_temps.STALE_AFTER)
        results = open_cache(url).upload_closure(again, [top])
    assert os.listdir(root / ".cudapkgs-uploads") == []  # the dead writer's lock was free: removed
    assert [p for p, info in results if info is not None] == [top]
    assert sorted(p.name for p in root.glob("*.narinfo")) and len(os.listdir(root / "nar")) == 2


def test_a_live_upload_s_temporary_is_never_removed_however_old(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    live = upload_temps.create(str(root))  # this process holds its lock, as a running upload does
    os.close(live.fd)
    _age(live.path, 10 * upload_temps.STALE_AFTER)
    assert upload_temps.remove_stale(str(root)) == []
    assert os.path.exists(live.path)
    live.close()  # the writer ends: its file goes with it
    assert not os.path.exists(live.path)


def test_stale_removal_touches_only_regular_temporaries(tmp_path):
    root = tmp_path / "cache"
    temps = root / ".cudapkgs-uploads"
    temps.mkdir(parents=True)
    outside = tmp_path / "victim.part"
    outside.write_text("keep")
    os.symlink(outside, temps / "1-link.part")  # a planted link: neither followed nor removed
    os.mkdir(temps / "2-dir.part")
    (temps / "3-dead.part").write_text("x")
    (temps / "notes.txt").write_text("x")
    (root / ".upload-abc.nar").write_text("old version's, unwritten for long")
    (root / ".upload-new.nar").write_text("old version's, being written")
    (root / "nar").mkdir()
    for name in ("3-dead.part", "notes.txt"):
        _age(temps / name, 2 * upload_temps.STALE_AFTER)
    _age(root / ".upload-abc.nar", 2 * upload_temps.OLD_STALE_AFTER)
    assert sorted(upload_temps.remove_stale(str(root))) == [".upload-abc.nar", "3-dead.part"]
    assert outside.read_text() == "keep" and os.path.islink(temps / "1-link.part")
    assert (temps / "2-dir.part").is_dir() and (temps / "notes.txt").exists() and (root / ".upload-new.nar").exists()


def test_a_link_where_the_temporaries_go_is_refused(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / ".cudapkgs-uploads")
    with Store.open(tmp_path / "store") as store:
        dep, top = make_closure(store)
        with pytest.raises(CacheError, match="not a directory"):
            open_cache(f"file://{root}").upload_closure(store, [top])
    assert os.listdir(tmp_path / "elsewhere") == []


def test_each_object_is_synced_before_its_rename_and_its_directory_after_narinfo_last(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.fspath(dst)))
        return real_replace(src, dst)

    with Store.open(tmp_path / "store") as store:
        dep, top = make_closure(store)
        cache = FileCache(f"file://{tmp_path}/cache")
        cache.init(store.store_dir)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        cache.upload(store, dep)
    root = str(tmp_path / "cache")
    (nar_rename,) = [i for i, (kind, what) in enumerate(events) if kind == "replace" and "/nar/" in what]
    (info_rename,) = [i for i, (kind, what) in enumerate(events) if kind == "replace" and what.endswith(".narinfo")]
    nar = events[nar_rename][1]
    assert events[nar_rename - 1][0] == "fsync" and "/.cudapkgs-uploads/" in events[nar_rename - 1][1]  # the file
    assert events[nar_rename + 1] == ("fsync", os.path.dirname(nar))  # nar/, before the narinfo exists
    assert nar_rename < info_rename
    assert events[info_rename - 1][0] == "fsync" and events[info_rename + 1] == ("fsync", root)


def test_uploads_to_a_remote_cache_compress_in_a_private_directory_the_next_upload_clears(tmp_path, monkeypatch):
    """They were /tmp/.upload-*.nar, left there for good by a SIGKILL; now <tmp>/cudapkgs-<uid>/.cudapkgs-uploads."""
    import tempfile

    from cudapkgs.store.caches.narinfo import CacheInfo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cache = open_cache("http://127.0.0.1:9/cache")
    temp = cache._upload_temp()
    private = tmp_path / f"cudapkgs-{os.geteuid()}"
    assert os.path.dirname(temp.path) == str(private / ".cudapkgs-uploads") and temp.path.endswith(".part")
    assert oct(os.stat(private).st_mode & 0o777) == "0o700"
    os.close(temp.fd)
    dead = upload_temps.create(str(private))  # a killed writer's: its lock dropped with it
    os.close(dead.fd)
    os.close(dead._lock_fd)
    dead._lock_fd = -1
    for path in (temp.path, dead.path):
        _age(path, 2 * upload_temps.STALE_AFTER)
    monkeypatch.setattr(cache, "cache_info", lambda: CacheInfo("/store"))
    cache.init("/store")
    assert os.path.exists(temp.path) and not os.path.exists(dead.path)  # the live one stays
    temp.close()
    assert not os.path.exists(temp.path)
    os.chmod(private, 0o777)  # not private (another user's make, say): not used
    fallback = cache._upload_temp()
    assert not fallback.path.startswith(str(private))
    os.close(fallback.fd)
    fallback.close()


def test_on_a_share_without_locks_uploads_go_on_and_nothing_is_removed(tmp_path, monkeypatch):
    """flock failing with ENOLCK (an old NFS) must not fail every upload; the sweeper then removes nothing."""
    import errno
    import fcntl

    from types import SimpleNamespace

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    # the cache's file system only (the store's own locks are elsewhere)
    monkeypatch.setattr(upload_temps, "fcntl", SimpleNamespace(flock=no_locks, LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB))
    with Store.open(tmp_path / "store") as store:
        dep, top = make_closure(store)
        results = open_cache(f"file://{tmp_path}/cache").upload_closure(store, [top])
    assert [p for p, info in results if info is not None] == [dep, top]
    temps = tmp_path / "cache" / ".cudapkgs-uploads"
    (temps / "1-x.part").write_text("someone's")
    _age(temps / "1-x.part", 2 * upload_temps.STALE_AFTER)
    assert upload_temps.remove_stale(str(tmp_path / "cache")) == []


@pytest.mark.parametrize("root_mode", [0o2775, 0o777, 0o755, 0o700])
def test_the_temporaries_directory_is_as_writable_as_the_cache_and_sticky(tmp_path, root_mode):
    """A cache a group shares (writable by the group) takes every member's uploads: its temporaries' directory,
    made by whoever uploads first, is as writable as the cache directory (the old 0o755 one refused the other
    users' uploads, whose temporaries were in the root before), and sticky, so that no user's live temporary
    can be renamed or removed by another."""
    root = tmp_path / "cache"
    root.mkdir()
    os.chmod(root, root_mode)
    temp = upload_temps.create(str(root))
    try:
        mode = os.stat(root / upload_temps.TEMP_DIR).st_mode
        assert mode & 0o777 == root_mode & 0o777
        assert mode & 0o1000  # sticky
        assert bool(mode & 0o2000) == bool(root_mode & 0o2000)  # a group's directory's set-group-ID is kept
        assert os.stat(temp.path).st_mode & 0o777 == 0o600
    finally:
        os.close(temp.fd)
        temp.close()


def test_a_link_put_at_a_temporary_s_name_is_not_followed_to_chmod_the_uploader_s_file(tmp_path, monkeypatch):
    """In a group's cache, whoever owns .cudapkgs-uploads (its first uploader) may rename another user's
    temporary even with the sticky bit: a link put at its name just before the rename made the old
    code's os.chmod(temp, 0o644) follow it, turning any file of the uploader's world-readable."""
    import stat

    private = tmp_path / "id_ed25519"
    private.write_text("secret\n")
    os.chmod(private, 0o600)
    real = FileCache._move_into_place

    def swapped(temp, target):
        os.unlink(temp)
        os.symlink(private, temp)
        real(temp, target)

    monkeypatch.setattr(FileCache, "_move_into_place", staticmethod(swapped))
    with Store.open(tmp_path / "store") as store:
        dep, _ = make_closure(store)
        cache = FileCache(f"file://{tmp_path}/cache")
        cache.init(store.store_dir)
        cache.upload(store, dep)  # the links are moved in (who can do this can write the cache anyway)
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600


def test_a_file_system_refusing_modes_still_takes_uploads(tmp_path, monkeypatch):
    """vfat and some FUSE or SMB mounts refuse chmod: the temporaries' directory stays as made, uploads go on."""
    import errno

    def refused(fd, mode):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refused)
    temp = upload_temps.create(str(tmp_path))
    try:
        assert os.path.dirname(temp.path) == str(tmp_path / upload_temps.TEMP_DIR)
    finally:
        os.close(temp.fd)
        temp.close()
