"""Store permissions (issue 8, part 8): explicit modes whatever the umask, refusal of a store others
can write, and read-only queries for a user who cannot write the store.

The suite runs as root, which ignores permission bits: the other user is `nobody`,
in a forked child that drops to it (everything it needs is imported before the fork).
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import tempfile
from pathlib import Path

import pytest

from cudapkgs.errors import StoreError
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store


def _tree(data: bytes):
    def build(out: Path) -> None:
        out.mkdir()
        (out / "f").write_bytes(data)

    return build


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_modes_are_explicit_under_umask_000(tmp_path):
    old = os.umask(0)
    try:
        with Store.open(tmp_path / "store") as store:
            path = store.add_path(make_store_path(store.store_dir, "output:out", "x", "x"), _tree(b"x"))
            with store.work_dir("w") as work:
                assert _mode(work) == 0o700
    finally:
        os.umask(old)
    root = tmp_path / "store"
    for directory in (root, root / ".meta", root / ".locks", root / ".tmp", root / ".gcroots", root / ".temproots"):
        assert _mode(directory) == 0o755, directory
    assert _mode(root / ".meta" / "db.sqlite") == 0o644
    assert _mode(path) == 0o555 and _mode(Path(path) / "f") == 0o444


@pytest.mark.parametrize("target", ["", ".meta", ".meta/db.sqlite"])
def test_a_store_others_can_write_is_refused(tmp_path, target):
    Store.open(tmp_path / "store").close()
    victim = tmp_path / "store" / target
    os.chmod(victim, _mode(victim) | 0o002)
    for read_only in (False, True):
        with pytest.raises(StoreError, match="writable by other users"):
            Store.open(tmp_path / "store", read_only=read_only)
    os.chmod(victim, _mode(victim) & ~0o022)
    Store.open(tmp_path / "store").close()


def test_a_group_writable_directory_is_refused_before_anything_is_created_in_it(tmp_path):
    """Debian's /nix/store is root:nixbld 1775: before, .locks, .gcroots, .meta... were created, then refused."""
    root = tmp_path / "nix" / "store"
    root.mkdir(parents=True)
    os.chmod(root, 0o1775)
    with pytest.raises(StoreError, match=f"refusing to use the store {root}: {root} is writable by other users "
                                         r"\(mode 1775\)"):
        Store.open(root)
    assert os.listdir(root) == []


def _as_nobody(fn) -> dict:
    """Run fn() in a forked child as nobody; its JSON-able result (or the error's text)."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody on this machine")
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user (setuid to nobody)")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            try:
                result = {"ok": fn()}
            except Exception as error:  # noqa: BLE001 - reported to the parent
                result = {"error": f"{type(error).__name__}: {error}"}
            os.write(write_end, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_read_only_queries_work_for_a_user_who_cannot_write_the_store():
    base = Path(tempfile.mkdtemp(prefix="cudapkgs-perm-"))
    try:
        os.chmod(base, 0o755)
        with Store.open(base / "store") as store:
            dep = store.add_path(make_store_path(store.store_dir, "output:out", "d", "dep"), _tree(b"dep"))
            top = store.add_path(make_store_path(store.store_dir, "output:out", "t", "top"), _tree(dep.encode()),
                                 references_candidates=[dep])

        def query() -> dict:
            with Store.open(base / "store", read_only=True) as ro:
                return {
                    "refs": ro.references(top),
                    "why": [[h.reference for h in chain] for chain in ro.why_depends(top, dep)],
                    "problems": len(ro.verify(check_contents=False)),
                    "full": len(ro.verify()),
                }

        got = _as_nobody(query)
        assert got == {"ok": {"refs": [dep], "why": [[dep]], "problems": 0, "full": 0}}, got

        def write() -> str:
            with Store.open(base / "store") as rw:
                rw.add_path(make_store_path(rw.store_dir, "output:out", "n", "new"), _tree(b"n"))
            return "written"

        denied = _as_nobody(write)
        assert "error" in denied and "permission denied" in denied["error"].lower(), denied
        with Store.open(base / "store") as store:
            assert sorted(store.all_paths()) == sorted([dep, top]) and store.verify() == []
    finally:
        import shutil

        for dirpath, dirnames, _ in os.walk(base):
            for d in dirnames:
                p = os.path.join(dirpath, d)
                if not os.path.islink(p):
                    os.chmod(p, 0o755)
        shutil.rmtree(base)


@pytest.mark.parametrize("target", ["", ".meta", ".meta/db.sqlite"])
def test_a_store_another_user_owns_is_refused(tmp_path, target, nobody_uid):
    """Before: a store (or its database) that another user owns was used, though its owner can plant paths."""
    nobody = nobody_uid
    Store.open(tmp_path / "store").close()
    os.chown(tmp_path / "store" / target, nobody, -1)
    for read_only in (False, True):
        with pytest.raises(StoreError, match=rf"refusing to use the store {tmp_path}/store: {tmp_path}/store/?"
                                             rf"{target}.* belongs to nobody \(uid {nobody}\), not to you \(root \(uid 0\)\)"):
            Store.open(tmp_path / "store", read_only=read_only)
    os.chown(tmp_path / "store" / target, 0, -1)
    Store.open(tmp_path / "store").close()


def test_a_store_below_a_directory_another_user_owns_or_can_write_is_refused(tmp_path, nobody_uid):
    nobody = nobody_uid
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, nobody, -1)  # its owner could rename store away and put another in its place
    with pytest.raises(StoreError, match=rf"the directory {shared} above it belongs to nobody \(uid {nobody}\)"):
        Store.open(shared / "x" / "store")
    assert not (shared / "x").exists()  # refused before anything is made
    os.chown(shared, 0, -1)
    os.chmod(shared, 0o775)
    with pytest.raises(StoreError, match=rf"the directory {shared} above it is writable by other users \(mode 0775"):
        Store.open(shared / "store")
    os.chmod(shared, 0o1777)  # as /tmp: others cannot rename what is not theirs
    Store.open(shared / "store").close()
    # reached through a link: the directories it resolves to count too, the target's parents included
    theirs = tmp_path / "theirs"
    (theirs / "mine").mkdir(parents=True)
    os.chown(theirs, nobody, -1)
    link = tmp_path / "link"
    link.symlink_to(theirs / "mine")
    with pytest.raises(StoreError, match=rf"the directory {theirs} above it belongs to nobody \(uid {nobody}\)"):
        Store.open(link / "store")
    link.unlink()
    link.symlink_to(theirs)
    with pytest.raises(StoreError, match=rf"the directory {link} above it belongs to nobody \(uid {nobody}\)"):
        Store.open(link / "store")


def test_a_store_reached_through_a_link_of_another_user_is_refused(tmp_path, nobody_uid):
    """A link's owner points it elsewhere at will: a link of nobody's in a sticky directory (as ``/tmp``) led to
    root's own directory, every directory Store.open looked at was root's, and the store was used (before: the
    root, the directories above it as written and as resolved were stat'ed through the link, never the link
    itself). Nix refuses any link there (local-store.cc); a link of the user's or root's is kept."""
    nobody = nobody_uid
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # /tmp: nobody may make links here
    mine = tmp_path / "mine"
    (mine / "real").mkdir(parents=True)
    (mine / "rootstore").mkdir()
    cases = {  # the path given -> the link of nobody's it goes through
        "root": (sticky / "store", sticky / "store", mine / "rootstore"),
        "parent": (sticky / "dir" / "store", sticky / "dir", mine / "real"),
        "in a chain": (mine / "hop" / "store", sticky / "hop2", mine / "real"),
    }
    (mine / "hop").symlink_to(sticky / "hop2")  # root's link, to nobody's link, to root's directory
    for name, (given, link, target) in cases.items():
        link.symlink_to(target)
        os.lchown(link, nobody, -1)
        for read_only in (False, True):
            if read_only:
                os.lchown(link, 0, -1)
                Store.open(given).close()  # a database for read_only to find
                os.lchown(link, nobody, -1)
            with pytest.raises(StoreError, match=rf"refusing to use the store {given}: it is reached through the "
                                                 rf"link {link}, which belongs to nobody \(uid {nobody}\)"):
                Store.open(given, read_only=read_only)
        os.lchown(link, 0, -1)  # root's own link: used
        Store.open(given).close()
        link.unlink()


def test_links_followed_are_every_link_on_the_way_in_order(tmp_path):
    from cudapkgs.path_links import MAX_LINKS, links_followed

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "l1").symlink_to("a/l2/..")  # relative, through another link, then ".." from its target
    (tmp_path / "a" / "l2").symlink_to(tmp_path / "a" / "b")
    (tmp_path / "loop").symlink_to("loop")
    assert [p for p, _ in links_followed(tmp_path / "l1" / "b" / "x")] == [str(tmp_path / "l1"),
                                                                            str(tmp_path / "a" / "l2")]
    assert [p for p, _ in links_followed(tmp_path / "missing" / "l1")] == []
    assert len(list(links_followed(tmp_path / "loop" / "x"))) == MAX_LINKS
    with pytest.raises(ValueError):
        list(links_followed("relative/path"))
