"""Temporary files next to a user's files never go through a planted link (issue 30, item 4).

A cloned repository (or anyone who can write a cache directory) can plant a symbolic link, or a hard
link, at every name cudapkgs would predict: ``.cudapkgs.lock.<pid>.tmp``, ``.F.<pid>.tmp`` beside an
export, ``F.tmp<pid>`` beside a ``--draw`` picture, a cache record's temporary file, a download's
``.part``, a build log.  These tests plant one at the name this process would have used (its pid is
known in-process) and check that the file it leads to is unchanged and the target is a regular file.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from cudapkgs import atomic_files
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store

PRECIOUS = b"the user's own file, outside\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(PRECIOUS)
    return outside / "victim"


def _unchanged(victim: Path) -> None:
    assert victim.read_bytes() == PRECIOUS
    assert victim.stat().st_nlink >= 1 and not victim.is_symlink()


def _leftovers(directory: Path, planted: set[str]) -> set[str]:
    """Temporary files left in `directory` besides the planted ones."""
    return {p.name for p in directory.iterdir() if p.name.endswith(".tmp") or ".tmp" in p.name} - planted


def test_the_project_lock_is_not_written_through_a_link_at_its_pid_name(tmp_path, victim):
    from cudapkgs.project_lock import write_lock

    project = tmp_path / "repo"
    project.mkdir()
    planted = project / f".cudapkgs.lock.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    write_lock(project / "cudapkgs.lock", {"version": 1, "packages": ["hello"]})
    _unchanged(victim)
    lock = project / "cudapkgs.lock"
    assert not lock.is_symlink() and lock.is_file()
    assert json.loads(lock.read_text()) == {"version": 1, "packages": ["hello"]}
    assert os.readlink(planted) == str(victim)  # the planted link itself is left alone
    assert _leftovers(project, {planted.name}) == set()


def _small_store(store_dir: Path) -> str:
    with Store.open(store_dir) as store:
        def tree(out: Path) -> None:
            out.mkdir()
            (out / "data").write_bytes(b"payload")

        return store.add_path(make_store_path(store.store_dir, "output:out", "d", "data"), tree)


@pytest.mark.parametrize("name", ["closure.tar", "closure.tar.gz", "closure.tar.zst"])
def test_export_is_not_written_through_a_link_at_its_temporary_name(tmp_path, victim, name):
    from cudapkgs.store.transfer import export_closure, import_closure

    path = _small_store(tmp_path / "store")
    where = tmp_path / "repo"
    where.mkdir()
    planted = where / f".{name}.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    with Store.open(tmp_path / "store") as store:
        export_closure(store, [path], where / name)
    _unchanged(victim)
    assert not (where / name).is_symlink() and (where / name).is_file()
    assert _leftovers(where, {planted.name}) == set()
    os.rename(tmp_path / "store", tmp_path / "old")
    with Store.open(tmp_path / "store") as store:  # the archive is whole
        assert import_closure(store, where / name) == [path]


def test_path_info_draw_is_not_refused_or_redirected_by_a_file_at_its_temporary_name(tmp_path, victim):
    path = _small_store(tmp_path / "store")
    where = tmp_path / "repo"
    where.mkdir()
    draw = where / "closure.svg"
    code = ("import os, sys; from cudapkgs.cli import main; "
            f"os.symlink({str(victim)!r}, {str(draw)!r} + '.tmp' + str(os.getpid())); "
            "sys.exit(main(sys.argv[1:]))")
    run = subprocess.run([sys.executable, "-c", code, "path-info", "--draw", str(draw), path,
                          "--store", str(tmp_path / "store")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    _unchanged(victim)
    assert draw.read_text().startswith("<svg") and not draw.is_symlink()
    planted = [p for p in where.iterdir() if p.is_symlink()]
    assert len(planted) == 1 and os.readlink(planted[0]) == str(victim)  # left alone, not deleted


def test_the_checked_record_does_not_truncate_a_hard_link_at_its_temporary_name(tmp_path, victim):
    from cudapkgs.fetch import record_checked

    cache = tmp_path / "outside" / "wheels"  # the same file system as the victim, for a hard link
    cache.mkdir()
    wheel = cache / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK wheel")
    record = record_checked._record_path(wheel)
    planted = record.with_name(f".{record.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    os.link(victim, planted)
    record_checked.remember(wheel, "ab" * 32, "unpack")
    _unchanged(victim)
    assert record_checked.passed(wheel, "ab" * 32, "unpack")
    assert not record.is_symlink() and record.stat().st_ino != victim.stat().st_ino


def test_the_wheel_sha256_record_is_not_written_through_a_link_at_its_temporary_name(tmp_path, victim):
    from cudapkgs.fetch.wheel_lookup import _remember_verified, read_sha256_record

    cache = tmp_path / "wheels"
    cache.mkdir()
    wheel = cache / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK wheel")
    planted = cache / f"{wheel.name}.sha256.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    _remember_verified(wheel)
    _unchanged(victim)
    assert read_sha256_record(cache / f"{wheel.name}.sha256") == hashlib.sha256(b"PK wheel").hexdigest()


def test_the_data_file_cache_is_not_written_through_a_link_at_its_temporary_name(tmp_path, victim, monkeypatch):
    from cudapkgs import datafiles

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "table.toml"
    source.write_text('answer = 42\n')
    cache = Path(datafiles._cache_file(source, source.stat()))
    cache.parent.mkdir(parents=True)
    planted = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    planted.symlink_to(victim)
    assert datafiles.load_toml(source) == {"answer": 42}
    _unchanged(victim)
    assert json.loads(cache.read_text()) == {"answer": 42} and not cache.is_symlink()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_download_is_not_written_through_a_planted_part_file(tmp_path, victim, kind):
    from cudapkgs.fetch.http import download

    source = tmp_path / "source.tar"
    source.write_bytes(b"archive bytes")
    cache = tmp_path / "outside" / "cache"  # the victim's file system, for a hard link
    cache.mkdir()
    dest = cache / "source.tar"
    part = cache / "source.tar.part"
    os.symlink(victim, part) if kind == "symlink" else os.link(victim, part)
    got = download(source.as_uri(), dest, sha256=hashlib.sha256(b"archive bytes").hexdigest())
    assert got == dest and dest.read_bytes() == b"archive bytes" and not dest.is_symlink()
    _unchanged(victim)
    assert dest.stat().st_ino != victim.stat().st_ino


def test_a_build_log_is_not_appended_through_a_planted_link(tmp_path, victim):
    from cudapkgs.realise.realise import log_path
    from cudapkgs.realise.scheduler import _append_log

    store = SimpleNamespace(store_dir=str(tmp_path / "store"))
    drv = SimpleNamespace(drv_path=str(tmp_path / "store" / "0123456789abcdfghijklmnpqrsvwxyz-demo.drv"))
    log = log_path(store, drv)
    log.parent.mkdir(parents=True)
    log.symlink_to(victim)
    _append_log(store, drv, "a line of the build log\n")
    _unchanged(victim)


def test_a_lock_file_is_not_created_through_a_planted_link(tmp_path):
    from cudapkgs.store.locks import PathLock

    target = tmp_path / "outside" / "created-by-the-lock"
    target.parent.mkdir()
    (tmp_path / "x.lock").symlink_to(target)
    with pytest.raises(OSError):
        PathLock(tmp_path / "x.lock").acquire()
    assert not target.exists()


def test_atomic_output_leaves_the_target_unchanged_on_an_error_and_never_replaces_a_directory(tmp_path):
    target = tmp_path / "file"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_files.atomic_output(target) as handle:
            handle.write(b"half")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old"
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        atomic_files.write_atomically(tmp_path / "dir", b"new")
    assert (tmp_path / "dir" / "inside").read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "file"]  # no temporary file left


def test_a_temporary_file_swapped_for_a_link_is_not_renamed_over_the_target(tmp_path, victim):
    """The rename takes only the file that was written: a link put at the temporary name meanwhile
    (by whoever can write the directory) never becomes the target."""
    target = tmp_path / "lock"
    target.write_bytes(b"old")
    fd, tmp = atomic_files.create_temporary(target)
    try:
        os.write(fd, b"new")
        os.unlink(tmp)
        os.symlink(victim, tmp)
        with pytest.raises(OSError):
            atomic_files.replace_checked(fd, tmp, target)
    finally:
        os.close(fd)
    assert target.read_bytes() == b"old" and not target.is_symlink()
    _unchanged(victim)
