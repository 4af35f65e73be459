"""The registration makes an output read-only in the pass that hashes and scans it (`nar.Freeze`).

Before, `Store.add_outputs` hashed every output (`nar.TreePass`: a listing, an lstat and an open
per entry), then walked it again to make it read-only (`files._make_read_only`: a listing, an lstat,
a chmod and a utime by path per entry): for torch's 15,853 entries, 0.17–0.22 s on the build's
critical path. Now the same pass does it through the descriptors it has open; the tree ends exactly
as the walk left it, and a file hard-linked from outside is copied before its bytes are hashed.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from cudapkgs.store import files as store_files
from cudapkgs.store import nar
from cudapkgs.store import registration
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


def _fill(out: Path) -> None:
    """Directories, small and large files (past `nar.CHUNK`: read in chunks), executables, links, an empty dir."""
    (out / "bin").mkdir(parents=True)
    (out / "bin" / "tool").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(out / "bin" / "tool", 0o750)
    (out / "lib" / "deep" / "er").mkdir(parents=True)
    (out / "lib" / "libbig.so").write_bytes(os.urandom(3 * nar.CHUNK + 17))
    os.chmod(out / "lib" / "libbig.so", 0o755)
    (out / "lib" / "data.bin").write_bytes(os.urandom(2 * nar.CHUNK))
    (out / "lib" / "deep" / "er" / "note.txt").write_text("note\n")
    os.chmod(out / "lib" / "deep" / "er" / "note.txt", 0o600)
    (out / "empty").mkdir()
    os.symlink("libbig.so", out / "lib" / "libbig.so.1")
    os.symlink("/nonexistent/target", out / "dangling")


def _modes(root: Path) -> dict[str, tuple[str, int, int | None]]:
    """relative path -> (kind, permission bits, mtime in ns; None for links) of every entry but the root."""
    found = {}
    for rel, st in nar.walk(root):
        if not rel:
            continue
        if stat.S_ISLNK(st.st_mode):
            found[rel] = ("l", 0, None)
        else:
            found[rel] = ("d" if stat.S_ISDIR(st.st_mode) else "f", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return found


def test_the_tree_ends_as_the_old_walk_left_it_and_its_hash_is_of_it(store, tmp_path):
    path = make_store_path(store.store_dir, "output:out", "freeze", "frozen")
    store.add_outputs([path], lambda dirs: _fill(dirs[path]))
    reference = tmp_path / "reference"
    _fill(reference)
    store_files._make_read_only(reference, keep_root_writable=True)
    try:
        assert _modes(Path(path)) == _modes(reference)
        assert {m for kind, m, _ in _modes(Path(path)).values() if kind == "f"} == {0o444, 0o555}
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o555 and os.lstat(path).st_mtime == 1
        assert store.verify(paths=[path]) == []
    finally:
        store_files._remove_tree(reference)


def test_no_second_walk_by_path_makes_the_output_read_only(store, monkeypatch):
    """Every chmod, utime and lstat of the output's entries goes through a descriptor or a name in an open
    directory: none by a path under the build's output (the old walk did one of each per entry)."""
    path = make_store_path(store.store_dir, "output:out", "freeze", "counted")
    by_path: list[tuple[str, str]] = []
    built: list[str] = []

    def counting(name, real):
        def call(target, *args, **kwargs):
            if isinstance(target, (str, bytes, os.PathLike)) and kwargs.get("dir_fd") is None:
                text = os.fsdecode(os.fspath(target))
                if built and text.startswith(built[0] + "/"):
                    by_path.append((name, text))
            return real(target, *args, **kwargs)
        return call

    for name in ("chmod", "utime", "lstat"):
        monkeypatch.setattr(os, name, counting(name, getattr(os, name)))

    def build(dirs):
        _fill(dirs[path])
        built.append(os.fspath(dirs[path]))  # counted from here: what the store does with it

    store.add_outputs([path], build)
    assert by_path == []
    assert _modes(Path(path))["lib/deep/er/note.txt"] == ("f", 0o444, 1_000_000_000)


def test_a_file_linked_from_outside_is_copied_before_its_bytes_are_hashed(store, tmp_path, monkeypatch):
    """The outside file changes right after the output is hashed: the store keeps the bytes it hashed.

    Before, the copy was made after the hash (in the read-only walk), so it held the changed bytes
    while the registered hash was of the old ones: `verify` found the path corrupt."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"hashed bytes\n")
    path = make_store_path(store.store_dir, "output:out", "freeze", "linked")
    real = registration._hash_and_scan_all

    def then_changed(*args, **kwargs):
        result = real(*args, **kwargs)
        with open(outside, "r+b") as f:  # the same inode the output was given as a hard link
            f.write(b"CHANGED")
        return result

    monkeypatch.setattr(registration, "_hash_and_scan_all", then_changed)

    def build(dirs):
        (dirs[path] / "share").mkdir(parents=True)
        os.link(outside, dirs[path] / "share" / "file")

    store.add_outputs([path], build)
    kept = Path(path) / "share" / "file"
    assert kept.read_bytes() == b"hashed bytes\n"
    assert os.stat(kept).st_ino != os.stat(outside).st_ino and os.stat(outside).st_nlink == 1
    assert outside.read_bytes().startswith(b"CHANGED")
    assert stat.S_IMODE(os.stat(outside).st_mode) != 0o444  # the outside file was never chmodded
    assert store.verify(paths=[path]) == []


def test_a_pass_that_fails_half_way_leaves_nothing_behind(store):
    """Directories made read-only before the pass met a FIFO are still removed with the build."""
    path = make_store_path(store.store_dir, "output:out", "freeze", "fifo")

    def build(dirs):
        _fill(dirs[path])
        os.mkfifo(dirs[path] / "zz-fifo")

    with pytest.raises(Exception, match="zz-fifo"):
        store.add_outputs([path], build)
    assert not os.path.lexists(path)
    tmp = Path(store.store_dir) / ".tmp"
    assert not tmp.exists() or [p for p in tmp.iterdir() if not p.name.endswith(".lock")] == []


def test_freeze_leaves_the_nar_bytes_alone(tmp_path):
    """The digest with `freeze` is the digest without it (and `dump`'s) for the same tree."""
    one, two = tmp_path / "one", tmp_path / "two"
    _fill(one)
    shutil.copytree(one, two, symlinks=True)
    plain = nar.TreePass(None).run(os.fsencode(one))
    frozen = nar.TreePass(None, freeze=nar.Freeze(root_writable=False)).run(os.fsencode(two))
    assert plain == frozen == nar.nar_hash(one)
    assert stat.S_IMODE(os.lstat(two).st_mode) == 0o555
    store_files._remove_tree(two)
