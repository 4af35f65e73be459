"""Hostile archives and planted symlinks: nothing an unpack, a hook or a fix-up does may touch a file outside its tree.

Issue 8, part 1: a chain ``d/s1 -> ..``, ``d/s2 -> s1/..``, … passes a lexical check
of each link but resolves above the tree; a hard link through it, or a hook moving
``lib/pkgconfig`` through a planted link, reached host files.  Each test plants a
"victim" file or directory beside the tree and checks it is untouched.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from cudapkgs.fetch import archives
from cudapkgs import confine
from cudapkgs import hooks
from cudapkgs.store.store import Store


def _tar(path: Path, members: list[tuple[str, str, str, bytes | None]], *, mode: int = 0o644) -> Path:
    """members: (name, kind in {"file","dir","sym","hard","chr","fifo"}, linkname, data)."""
    kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
             "chr": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, linkname, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = kinds[kind], linkname, mode
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _victim(tmp_path: Path) -> tuple[Path, os.stat_result]:
    victim = tmp_path / "victim.txt"
    victim.write_text("host file\n")
    os.chmod(victim, 0o640)
    return victim, os.stat(victim)


def _untouched(victim: Path, before: os.stat_result) -> None:
    after = os.stat(victim)
    assert victim.read_text() == "host file\n"
    assert (after.st_mode, after.st_mtime_ns, after.st_nlink) == (before.st_mode, before.st_mtime_ns, before.st_nlink)


def _chain(depth: int) -> list[tuple[str, str, str, bytes | None]]:
    """d/s1 -> .., d/s2 -> s1/.., …: each lexically inside, d/s<depth> ends above the tree."""
    members = [("d", "dir", "", None), ("d/s1", "sym", "..", None)]
    members += [(f"d/s{i}", "sym", f"s{i - 1}/..", None) for i in range(2, depth + 1)]
    return members


def test_symlink_chain_escaping_the_tree_is_refused(tmp_path):
    archive = _tar(tmp_path / "a.tar.gz", _chain(20))
    with pytest.raises(archives.UnpackError, match="leads outside"):
        archives.unpack(archive, tmp_path / "out")


def test_hard_link_through_a_symlink_chain_never_links_an_outside_file(tmp_path):
    victim, before = _victim(tmp_path)
    rel = os.path.relpath(victim, "/")
    archive = _tar(tmp_path / "a.tar.gz", _chain(20) + [("x", "hard", f"d/s20/{rel}", None)])
    with pytest.raises(archives.UnpackError, match="hard link"):
        archives.unpack(archive, tmp_path / "out")
    _untouched(victim, before)


@pytest.mark.parametrize(
    "members",
    [
        [("f", "file", "", b"x"), ("l", "sym", "f", None), ("h", "hard", "l", None)],  # to a link
        [("d", "dir", "", None), ("h", "hard", "d", None)],  # to a directory
        [("h", "hard", "later", None), ("later", "file", "", b"x")],  # to a later member
        [("h", "hard", "../victim.txt", None)],  # outside, lexically
    ],
    ids=["to-symlink", "to-directory", "to-later-member", "to-outside"],
)
def test_hard_links_only_to_earlier_regular_members(tmp_path, members):
    victim, before = _victim(tmp_path)
    with pytest.raises(archives.UnpackError):
        archives.unpack(_tar(tmp_path / "a.tar.gz", members), tmp_path / "out")
    _untouched(victim, before)


def test_a_later_link_that_lengthens_a_chain_is_caught(tmp_path):
    # d/s2 -> s1/../.. is inside while d/s1 -> x (a directory); replacing d/s1 by "." sends s2 out.
    members = [("d/x", "dir", "", None), ("d/s1", "sym", "x", None), ("d/s2", "sym", "s1/../..", None),
               ("d/s1", "sym", ".", None), ("d/keep", "file", "", b"k")]
    with pytest.raises(archives.UnpackError, match="s2"):
        archives.unpack(_tar(tmp_path / "a.tar.gz", members), tmp_path / "out")


def test_a_link_escaping_the_single_top_directory_is_refused(tmp_path):
    # The caller moves the x-archive/ root elsewhere: a link to its parent would point beside the store path.
    members = [("x-archive/lib", "dir", "", None), ("x-archive/lib/up", "sym", "../..", None)]
    with pytest.raises(archives.UnpackError, match="up"):
        archives.unpack(_tar(tmp_path / "a.tar.gz", members), tmp_path / "out")


def test_symlink_loop_is_an_unpack_error(tmp_path):
    members = [("lib", "dir", "", None), ("lib/libx.so", "sym", "libx.so", None)]
    with pytest.raises(archives.UnpackError, match="loop"):
        archives.unpack(_tar(tmp_path / "a.tar.gz", members), tmp_path / "out")


@pytest.mark.parametrize("kind", ["chr", "fifo"])
def test_device_nodes_and_fifos_are_refused(tmp_path, kind):
    with pytest.raises(archives.UnpackError, match="not a file"):
        archives.unpack(_tar(tmp_path / "a.tar.gz", [(f"dev{kind}", kind, "", None)]), tmp_path / "out")


def test_setuid_and_world_writable_bits_are_dropped(tmp_path):
    archive = _tar(tmp_path / "a.tar.gz", [("bin/tool", "file", "", b"#!/bin/sh\n")], mode=0o6777)
    root = archives.unpack(archive, tmp_path / "out")
    assert stat.S_IMODE(os.stat(root / "tool").st_mode) == 0o755  # bin/ is the single top dir


def test_a_member_may_not_turn_a_file_into_a_directory_path(tmp_path):
    members = [("a", "file", "", b"x"), ("a/b", "file", "", b"y")]
    with pytest.raises(archives.UnpackError, match="through the file"):
        archives.unpack(_tar(tmp_path / "a.tar.gz", members), tmp_path / "out")


def test_inside_links_and_hard_links_still_unpack(tmp_path):
    members = [("x/lib/libx.so.1", "file", "", b"lib"), ("x/lib/libx.so", "sym", "libx.so.1", None),
               ("x/lib64", "sym", "lib", None), ("x/lib/hard", "hard", "x/lib/libx.so.1", None),
               ("x/include/up", "sym", "../lib/../lib64/libx.so", None)]
    root = archives.unpack(_tar(tmp_path / "a.tar.gz", members), tmp_path / "out")
    assert (root / "include" / "up").read_bytes() == b"lib"
    assert os.stat(root / "lib" / "hard").st_ino == os.stat(root / "lib" / "libx.so.1").st_ino


# --- resolve_in_tree ----------------------------------------------------------------------------


def test_resolve_in_tree_follows_chains_against_the_real_tree(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "l").symlink_to("b")
    (tmp_path / "a" / "m").symlink_to("l/../l")
    assert confine.resolve_in_tree(tmp_path, "a/m/x") == "a/b/x"
    (tmp_path / "a" / "up").symlink_to("../..")
    with pytest.raises(confine.TreeEscapeError):
        confine.resolve_in_tree(tmp_path, "a/up")
    (tmp_path / "abs").symlink_to("/nix/store/x-foo")
    with pytest.raises(confine.TreeEscapeError, match="absolute"):
        confine.resolve_in_tree(tmp_path, "abs")
    assert confine.resolve_in_tree(tmp_path, "abs", allow_absolute=("/nix/store/",)) is None


# --- hooks and fix-ups never move, delete or write through a planted link ----------------------


@pytest.fixture
def outside(tmp_path) -> Path:
    """A host directory with files the hooks would move or delete if they followed a link."""
    host = tmp_path / "host"
    for rel in ("pkgconfig/host.pc", "12/libhost.so", "stubs/libcuda.so", "keep"):
        (host / rel).parent.mkdir(parents=True, exist_ok=True)
        (host / rel).write_text(rel)
    return host


def _host_files(host: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), host) for d, _, fs in os.walk(host) for f in fs)


def test_move_pkgconfig_does_not_follow_a_planted_share_link(tmp_path, outside):
    tree = tmp_path / "tree"
    (tree / "pkgconfig").mkdir(parents=True)
    (tree / "pkgconfig" / "x.pc").write_text("x")
    (tree / "share").symlink_to(outside)
    before = _host_files(outside)
    with pytest.raises(confine.TreeEscapeError, match="share"):
        hooks.move_pkgconfig(tree)
    assert _host_files(outside) == before


def test_move_pkgconfig_does_not_empty_a_linked_pkgconfig_dir(tmp_path, outside):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "pkgconfig").symlink_to(outside / "pkgconfig")
    with pytest.raises(confine.TreeEscapeError, match="pkgconfig"):
        hooks.move_pkgconfig(tree)
    assert (outside / "pkgconfig" / "host.pc").exists()


def test_lift_versioned_lib_dir_does_not_follow_a_linked_lib(tmp_path, outside):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "lib").symlink_to(outside)
    before = _host_files(outside)
    assert hooks.lift_versioned_lib_dir(tree, 12) is False
    assert _host_files(outside) == before


def test_split_outputs_does_not_move_stubs_through_a_linked_lib(tmp_path, outside):
    tree = tmp_path / "o"
    (tree / "include").mkdir(parents=True)
    (tree / "include" / "x.h").write_text("x")
    (tree / "lib").symlink_to(outside)
    before = _host_files(outside)
    paths = hooks.split_outputs(tree, ["out", "include", "lib", "stubs"])
    assert _host_files(outside) == before
    assert not any(paths["stubs"].iterdir())


def test_markers_are_not_written_through_a_linked_nix_support(tmp_path, outside):
    out = tmp_path / "out"
    out.mkdir()
    (out / "nix-support").symlink_to(outside)
    with pytest.raises(confine.TreeEscapeError):
        hooks.mark_for_cudatoolkit_root({"out": out}, pname="x")
    assert not (outside / "include-in-cudatoolkit-root").exists()


def test_a_hard_linked_host_file_in_an_output_is_never_chmodded(tmp_path):
    victim, before = _victim(tmp_path)

    def build(out: Path) -> None:
        out.mkdir()
        os.link(victim, out / "linked")

    with Store.open(tmp_path / "store") as store:
        path = store.add_path("hardlinked", build)
        assert (Path(path) / "linked").read_text() == "host file\n"
        assert os.stat(Path(path) / "linked").st_ino != before.st_ino
        assert store.verify() == []
    _untouched(victim, before)


def test_unshare_hardlinks_gives_each_file_its_own_inode(tmp_path):
    victim, before = _victim(tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    os.link(victim, tree / "a")
    assert confine.unshare_hardlinks(tree) == 1
    os.chmod(tree / "a", 0o444)
    _untouched(victim, before)
    assert stat.S_IMODE(os.stat(tree / "a").st_mode) == 0o444


# --- expansion caps (issue 8, part 10) ----------------------------------------------------------


def test_a_decompression_bomb_fails_with_both_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(archives, "MIN_EXPANDED_BYTES", 1 << 20)  # the floor, scaled down to keep the test small
    archive = tmp_path / "bomb.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 16 << 20  # 16 MiB of zeros: about 16 KB compressed, a 1000x expansion
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    declared = archive.stat().st_size
    limit = max(1 << 20, archives.EXPANSION_RATIO * declared)
    with pytest.raises(archives.UnpackError, match=rf"past {limit} bytes, 40x the {declared} bytes"):
        archives.unpack(archive, tmp_path / "out", declared_size=declared)
    assert not (tmp_path / "out" / "zeros").exists()  # refused before a byte of it was written
    assert archives.unpack(archive, tmp_path / "ok", declared_size=None)  # no declared size: no bound


def test_too_many_members_for_the_declared_size_fail(tmp_path, monkeypatch):
    monkeypatch.setattr(archives, "MIN_MEMBERS", 100)
    archive = _tar(tmp_path / "many.tar.gz", [(f"d/f{i}", "file", "", b"") for i in range(500)])
    with pytest.raises(archives.UnpackError, match=r"more than 100 members.*declares as \d+ bytes"):
        archives.unpack(archive, tmp_path / "out", declared_size=archive.stat().st_size)


def test_expansion_limits_leave_real_releases_room():
    # libcublas 13.0 for x86_64 is about 700 MB compressed; cuda_cccl about 1 MB with thousands of headers.
    max_bytes, max_members = archives.expansion_limits(700 << 20)
    assert max_bytes >= 10 * (700 << 20) and max_members >= 50_000
    assert archives.expansion_limits(None) == (None, None)
