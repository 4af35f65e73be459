"""The Store: crash-safe add_path, locks, references, GC, verify, why-depends."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cudapkgs.errors import StoreError
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


def write_tree(files: dict[str, bytes], executable=()):
    def build(out: Path) -> None:
        out.mkdir()
        for name, data in files.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(data)
            if name in executable:
                os.chmod(out / name, 0o755)

    return build


def addressed(store, name, salt="x"):
    return make_store_path(store.store_dir, "output:out", salt + name, name)


def run_py(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_for(path: Path, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"timed out waiting for {path}"
        time.sleep(0.02)


def test_open_defaults_to_xdg_data_home_and_env(monkeypatch, tmp_path):
    with Store.open() as s:
        assert s.root == Path(os.environ["XDG_DATA_HOME"]) / "cudapkgs" / "store"
        assert (s.root / ".meta" / "db.sqlite").exists()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "env-store"))
    with Store.open() as s:
        assert s.root == tmp_path / "env-store"


def test_add_path_registers_read_only(store):
    path = addressed(store, "hello")
    got = store.add_path(path, write_tree({"bin/hello": b"#!/bin/sh\n", "share/doc": b"doc"}, executable={"bin/hello"}))
    assert got == path and store.is_valid(path)
    info = store.query(path)
    assert info.nar_hash.startswith("sha256:") and info.nar_size > 0 and info.references == ()
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [dirpath] + [os.path.join(dirpath, f) for f in filenames]:
            assert os.stat(name).st_mode & 0o222 == 0, name
    assert stat.S_IMODE(os.stat(f"{path}/bin/hello").st_mode) == 0o555
    assert stat.S_IMODE(os.stat(f"{path}/share/doc").st_mode) == 0o444
    assert os.listdir(store.tmp_dir) == []
    # Already valid: the builder is not run again.
    assert store.add_path(path, lambda out: pytest.fail("rebuilt")) == path


def test_content_addressed_add_path(store):
    a = store.add_path("src", write_tree({"f": b"data"}))
    b = store.add_path("src", write_tree({"f": b"data"}))
    c = store.add_path("src", write_tree({"f": b"other"}))
    assert a == b != c and os.path.basename(a).endswith("-src")


def test_single_file_output(store):
    path = store.add_path("script.sh", lambda out: out.write_text("echo hi\n"))
    assert Path(path).read_text() == "echo hi\n" and stat.S_IMODE(os.stat(path).st_mode) == 0o444


def test_failing_builder_leaves_nothing(store):
    path = addressed(store, "broken")

    def build(out: Path) -> None:
        out.mkdir()
        (out / "half").write_text("partial")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        store.add_path(path, build)
    assert not store.is_valid(path) and not os.path.lexists(path)
    assert store.all_paths() == [] and os.listdir(store.tmp_dir) == []
    with pytest.raises(StoreError, match="did not create its output"):
        store.add_path(path, lambda out: None)


def test_references_found_in_binary_file(store):
    dep = store.add_path(addressed(store, "libdep"), write_tree({"lib/libdep.so": b"\x7fELF"}))
    unrelated = store.add_path(addressed(store, "unrelated"), write_tree({"x": b"x"}))
    top = addressed(store, "app")
    blob = b"\x7fELF\x00\x01" + b"\xff" * 100 + f"{dep}/lib\x00".encode() + bytes(range(256))
    got = store.add_path(top, write_tree({"bin/app": blob}), references_candidates=[dep, unrelated])
    assert store.references(got) == [dep]
    assert store.referrers(dep) == [top]
    assert store.closure([top]) == {top, dep}
    assert store.closure_size([top]) == store.query(top).nar_size + store.query(dep).nar_size
    chains = store.why_depends(top, dep)
    assert [[(h.referrer, h.reference, h.files) for h in c] for c in chains] == [[(top, dep, ("bin/app",))]]
    assert store.why_depends(dep, top) == []


def test_self_reference(store):
    path = addressed(store, "selfref")
    store.add_path(path, lambda out: out.write_text(f"my path is {path}\n"))
    assert store.references(path) == [path]


def test_why_depends_through_chain(store):
    c = store.add_path(addressed(store, "c"), write_tree({"c": b"c"}))
    b = store.add_path(addressed(store, "b"), write_tree({"lib/b": c.encode()}), references_candidates=[c])
    a = store.add_path(addressed(store, "a"), write_tree({"bin/a": b.encode()}), references_candidates=[b, c])
    chains = store.why_depends(a, c)
    assert [[(h.referrer, h.reference, h.files) for h in ch] for ch in chains] == [[(a, b, ("bin/a",)), (b, c, ("lib/b",))]]


def test_stale_partial_path_is_replaced(store):
    path = addressed(store, "partial")
    os.makedirs(path)
    Path(path, "junk").write_text("from a crash")
    os.chmod(path, 0o555)
    store.add_path(path, write_tree({"good": b"1"}))
    assert os.listdir(path) == ["good"] and store.verify() == []


def test_sigkill_mid_build_then_next_run_completes(store, tmp_path):
    path = addressed(store, "slow")
    started = tmp_path / "started"
    child = run_py(
        """
        import sys, time
        from pathlib import Path
        from cudapkgs.store.store import Store
        store = Store.open(sys.argv[1])
        def build(out):
            out.mkdir()
            (out / "part").write_text("half")
            Path(sys.argv[3]).touch()
            time.sleep(60)
        store.add_path(sys.argv[2], build)
        """,
        store.store_dir, path, str(started),
    )
    wait_for(started)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert not store.is_valid(path) and not os.path.lexists(path)
    assert os.listdir(store.tmp_dir)  # the killed build's leftovers ...
    store.add_path(path, write_tree({"whole": b"done"}))
    assert store.is_valid(path) and os.listdir(path) == ["whole"]
    assert os.listdir(store.tmp_dir) == []  # ... were cleaned up, their owner's lock being free


def test_sigkill_between_move_and_registration(store):
    path = addressed(store, "moved")
    child = run_py(
        """
        import os, signal, sys
        from cudapkgs.store import db
        from cudapkgs.store.store import Store
        db.StoreDB.register = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        store = Store.open(sys.argv[1])
        def build(out):
            out.mkdir(); (out / "f").write_text("x")
        store.add_path(sys.argv[2], build)
        """,
        store.store_dir, path,
    )
    child.wait()
    assert child.returncode == -signal.SIGKILL
    assert os.path.isdir(path) and not store.is_valid(path)  # on disk, but not valid
    store.add_path(path, write_tree({"f": b"y"}))
    assert store.is_valid(path) and Path(path, "f").read_text() == "y" and store.verify() == []


def test_two_processes_build_once(store, tmp_path):
    path = addressed(store, "shared")
    counter = tmp_path / "counter"
    code = """
        import sys, time
        from cudapkgs.store.store import Store
        store = Store.open(sys.argv[1])
        def build(out):
            with open(sys.argv[3], "a") as f:
                f.write("built\\n")
            time.sleep(1)
            out.mkdir(); (out / "f").write_text("x")
        print(store.add_path(sys.argv[2], build))
        """
    children = [run_py(code, store.store_dir, path, str(counter)) for _ in range(3)]
    outs = [c.communicate(timeout=60) for c in children]
    assert [c.returncode for c in children] == [0, 0, 0], outs
    assert {o.strip() for o, _ in outs} == {path}
    assert counter.read_text() == "built\n"
    assert store.is_valid(path)


def test_no_space_left_is_a_clear_error(store):
    path = addressed(store, "big")

    def build(out: Path) -> None:
        out.mkdir()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "blob"))

    with pytest.raises(StoreError, match="no space left on device.*the store is unchanged"):
        store.add_path(path, build)
    assert not store.is_valid(path) and not os.path.lexists(path) and os.listdir(store.tmp_dir) == []


def test_rename_eacces_is_a_clear_error(store, monkeypatch):
    path = addressed(store, "denied")
    real_rename = os.rename

    def rename(src, dst):
        if os.fspath(dst) == path:
            raise PermissionError(errno.EACCES, "Permission denied", dst)
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(StoreError, match="permission denied"):
        store.add_path(path, write_tree({"f": b"x"}))
    assert store.all_paths() == [] and os.listdir(store.tmp_dir) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_unwritable_store(store):
    os.chmod(store.root, 0o500)
    try:
        with pytest.raises(StoreError, match="permission denied"):
            store.add_path(addressed(store, "ro"), write_tree({"f": b"x"}))
    finally:
        os.chmod(store.root, 0o755)
    assert store.all_paths() == []


def test_gc_keeps_closure_of_roots(store, tmp_path):
    dep = store.add_path(addressed(store, "dep"), write_tree({"f": b"dep"}))
    top = store.add_path(addressed(store, "top"), write_tree({"f": dep.encode()}), references_candidates=[dep])
    garbage = store.add_path(addressed(store, "garbage"), write_tree({"f": b"g" * 1000}))
    prof = store.add_path(addressed(store, "prof"), write_tree({"f": b"p"}))
    junk = addressed(store, "junk")
    os.makedirs(junk)  # unregistered leftover
    store.add_indirect_root(tmp_path / "result", top)
    store.add_root("default", prof)
    store.release_temp_roots()  # what this Store added stays only as long as a root keeps it
    assert os.readlink(tmp_path / "result") == top
    assert set(store.roots().values()) == {top, prof}

    dry = store.gc(dry_run=True)
    assert dry.deleted == sorted([garbage, junk]) and dry.bytes_freed >= 1000
    assert store.is_valid(garbage) and os.path.exists(garbage)

    result = store.gc()
    assert result.deleted == sorted([garbage, junk])
    assert not store.is_valid(garbage) and not os.path.lexists(garbage) and not os.path.lexists(junk)
    assert all(store.is_valid(p) and os.path.exists(p) for p in (top, dep, prof))
    assert store.verify() == []


def _add_linked(store, name: str, target: str) -> str:
    """An output whose one file is a hard link to `target` (a store file), as nvcc's nvvm/ links libnvvm's."""
    path = addressed(store, name)
    links: dict[str, str] = {}

    def build(dirs):
        os.makedirs(dirs[path] / "nvvm")
        os.link(target, dirs[path] / "nvvm" / "libnvvm.so")
        links[os.path.abspath(dirs[path] / "nvvm" / "libnvvm.so")] = target

    store.add_outputs([path], build, links=links)
    return path


def test_gc_counts_hard_linked_files_once_and_only_when_freed(store, tmp_path):
    # Deleting libnvvm while nvcc (whose nvvm/ links its files) stays frees nothing of them:
    # a user saw "133.5 MiB freed" while the store shrank by 40 KiB.
    big = b"n" * 100_000
    libnvvm = store.add_path(addressed(store, "libnvvm"), write_tree({"libnvvm.so": big, "small": b"s"}))
    nvcc = _add_linked(store, "nvcc", os.path.join(libnvvm, "libnvvm.so"))
    assert os.stat(os.path.join(nvcc, "nvvm/libnvvm.so")).st_nlink == 2  # the store kept the link
    store.add_indirect_root(tmp_path / "result", nvcc)
    store.release_temp_roots()

    dry = store.gc(dry_run=True)
    assert dry.deleted == [libnvvm] and dry.bytes_freed == 1  # only "small"
    assert store.gc().bytes_freed == 1
    assert os.path.getsize(os.path.join(nvcc, "nvvm/libnvvm.so")) == len(big)

    # Every link inside what is deleted: the file is freed, and counted once.
    again = store.add_path(addressed(store, "libnvvm2"), write_tree({"libnvvm.so": big}))
    twin = _add_linked(store, "nvcc2", os.path.join(again, "libnvvm.so"))
    store.release_temp_roots()
    os.unlink(tmp_path / "result")
    assert store.gc(dry_run=True).bytes_freed == 2 * len(big)  # nvcc's (its last link) and the twins' one
    result = store.gc()
    assert sorted(result.deleted) == sorted([again, nvcc, twin]) and result.bytes_freed == 2 * len(big)


def test_stale_indirect_roots_are_removed(store, tmp_path):
    a = store.add_path(addressed(store, "a"), write_tree({"f": b"a"}))
    b = store.add_path(addressed(store, "b"), write_tree({"f": b"b"}))
    store.add_indirect_root(tmp_path / "ra", a)
    store.add_indirect_root(tmp_path / "rb", b)
    (tmp_path / "ra").unlink()  # link gone
    (tmp_path / "rb").unlink()
    (tmp_path / "rb").symlink_to(tmp_path)  # points elsewhere
    store.release_temp_roots()
    assert store.roots() == {}
    assert len(os.listdir(store.gcroots_dir / "auto")) == 2
    assert sorted(store.gc().deleted) == sorted([a, b])
    assert os.listdir(store.gcroots_dir / "auto") == []


def test_indirect_root_refuses_to_clobber_a_file(store, tmp_path):
    a = store.add_path(addressed(store, "a"), write_tree({"f": b"a"}))
    (tmp_path / "result").write_text("precious")
    with pytest.raises(StoreError, match="not a symlink"):
        store.add_indirect_root(tmp_path / "result", a)


def test_verify_detects_tampering_and_missing(store):
    a = store.add_path(addressed(store, "a"), write_tree({"f": b"original"}))
    b = store.add_path(addressed(store, "b"), write_tree({"f": b"b"}))
    assert store.verify() == []
    os.chmod(f"{a}/f", 0o644)
    Path(a, "f").write_bytes(b"tampered")
    os.chmod(b, 0o755)
    os.unlink(f"{b}/f")
    os.rmdir(b)
    problems = {(p.path, p.kind) for p in store.verify()}
    assert problems == {(a, "hash-mismatch"), (b, "missing")}
    assert {(p.path, p.kind) for p in store.verify(check_contents=False)} == {(b, "missing")}


def test_query_errors(store):
    with pytest.raises(StoreError, match="is not in the store"):
        store.query("/nix/store/0mdqa9w1p6cmli6976v4wi0sw9r4p5pr-foo")
    with pytest.raises(StoreError, match="is not valid"):
        store.query(addressed(store, "never"))


def cli(*args: str, store_dir: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudapkgs", *args, "--store", store_dir], capture_output=True, text=True)


def test_cli_path_info_json_gc_dry_run_and_errors(store, tmp_path):
    with Store.open(store.store_dir) as adder:  # a process that has finished: its temporary roots are gone
        dep = adder.add_path(addressed(store, "dep"), write_tree({"f": b"dep"}))
        top = adder.add_path(addressed(store, "top"), write_tree({"f": dep.encode()}), references_candidates=[dep])
        adder.add_indirect_root(tmp_path / "result", top)
        garbage = adder.add_path(addressed(store, "garbage"), write_tree({"f": b"g"}))

    r = cli("path-info", "--json", "-rS", str(tmp_path / "result"), store_dir=store.store_dir)
    assert r.returncode == 0, r.stderr
    data = {o["path"]: o for o in json.loads(r.stdout)}
    assert set(data) == {top, dep}
    assert data[top]["references"] == [dep]
    assert data[top]["closureSize"] == data[top]["narSize"] + data[dep]["narSize"]
    assert data[dep]["narHash"] == store.query(dep).nar_hash

    r = cli("gc", "--dry-run", store_dir=store.store_dir)
    assert r.returncode == 0 and f"would delete '{garbage}'" in r.stdout
    assert store.is_valid(garbage)
    r = cli("gc", "--json", store_dir=store.store_dir)
    assert json.loads(r.stdout)["deleted"] == [garbage] and not store.is_valid(garbage)

    r = cli("why-depends", top, dep, store_dir=store.store_dir)
    assert r.returncode == 0 and dep in r.stdout and "f" in r.stdout

    r = cli("verify", store_dir=store.store_dir)
    assert r.returncode == 0 and "0 problem" in r.stdout

    r = cli("path-info", "/nix/store/0mdqa9w1p6cmli6976v4wi0sw9r4p5pr-hand-typed", store_dir=store.store_dir)
    assert r.returncode == 1
    assert r.stderr == f"cudapkgs: error: path '/nix/store/0mdqa9w1p6cmli6976v4wi0sw9r4p5pr-hand-typed' is not in the store {store.store_dir}\n"
    r = cli("path-info", addressed(store, "never"), store_dir=store.store_dir)
    assert r.returncode == 1 and "is not valid in the store" in r.stderr


def test_cli_path_info_h_is_human_readable_as_in_nix(store, tmp_path):
    # `nix path-info -rSh ./result` is the Nix idiom; -h used to print the help and exit 0, sizes unseen.
    with Store.open(store.store_dir) as adder:
        top = adder.add_path(addressed(store, "top"), write_tree({"f": b"x" * 3000}))
        adder.add_indirect_root(tmp_path / "result", top)
    r = cli("path-info", "-rSh", str(tmp_path / "result"), store_dir=store.store_dir)
    assert r.returncode == 0, r.stderr
    assert "usage:" not in r.stdout and top in r.stdout and "KiB" in r.stdout, r.stdout
    assert r.stdout == cli("path-info", "-rSH", str(tmp_path / "result"), store_dir=store.store_dir).stdout
    r = cli("path-info", "--help", store_dir=store.store_dir)
    assert r.returncode == 0 and r.stdout.startswith("usage: cudapkgs path-info") and "--human-readable" in r.stdout


def test_database_full_is_a_clear_error_and_leaves_no_path(store, monkeypatch):
    import sqlite3

    from cudapkgs.store import db

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(db.StoreDB, "register", full)
    path = addressed(store, "nodb")
    with pytest.raises(StoreError, match="database or disk is full"):
        store.add_path(path, write_tree({"f": b"x"}))
    assert not os.path.lexists(path) and os.listdir(store.tmp_dir) == []


def test_read_only_filesystem_on_open(tmp_path, monkeypatch):
    def erofs(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", erofs)
    with pytest.raises(StoreError, match=r"cannot open the store .*: read-only file system"):
        Store.open(tmp_path / "ro-store")


def test_many_processes_open_a_new_store_at_once(tmp_path):
    """Creating the database (WAL switch, schema) must wait for, not fail on, a concurrent opener."""
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from cudapkgs.store.store import Store\n"
        "start = float(sys.argv[2])\n"
        "while time.time() < start: pass\n"
        "for i in range(15):\n"
        "    Store.open(f'{sys.argv[1]}/{i}').close()\n"
    )
    import time

    start = str(time.time() + 1.5)  # every process opens each fresh store at the same moment
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "fresh"), start], stderr=subprocess.PIPE)
        for _ in range(6)
    ]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors


def test_cli_takes_the_store_from_the_configuration(store, tmp_path):
    path = store.add_path(addressed(store, "configured"), write_tree({"f": b"x"}))
    config = tmp_path / "cudapkgs.toml"
    config.write_text(f'storeDir = "{store.store_dir}"\n')
    env = {k: v for k, v in os.environ.items() if k != "CUDAPKGS_STORE"}
    env["CUDAPKGS_CONFIG"] = str(config)
    r = subprocess.run([sys.executable, "-m", "cudapkgs", "path-info", path], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == path


def test_temporary_roots_protect_fresh_paths_until_their_process_ends(store, tmp_path):
    fresh = store.add_path(addressed(store, "fresh"), write_tree({"f": b"x"}))
    store.add_temp_roots([fresh])
    other = Store.open(store.store_dir)  # another process's view: gc must not take it
    try:
        assert fresh not in other.gc().deleted and other.is_valid(fresh)
    finally:
        other.close()
    store.close()  # the roots go with the store (or the process)
    again = Store.open(store.store_dir)
    try:
        assert fresh in again.gc().deleted
        assert list((again.root / ".temproots").iterdir()) == []
    finally:
        again.close()

    # A process killed with its temp roots: the stale file is removed by the next gc.
    code = f"""
import os, signal
from cudapkgs.store.store import Store
s = Store.open({str(tmp_path / "s2")!r})
s.add_path("rooted", lambda out: out.write_text("x"))  # rooted by this process until it dies
os.kill(os.getpid(), signal.SIGKILL)
"""
    subprocess.run([sys.executable, "-c", code])
    s2 = Store.open(tmp_path / "s2")
    try:
        assert list((s2.root / ".temproots").glob("*")) != []
        s2.gc()
        assert list((s2.root / ".temproots").glob("*")) == []
    finally:
        s2.close()


def test_every_way_of_adding_a_path_roots_it_until_the_store_closes(store, tmp_path):
    """Issue 23 class 2: a gc between registration and the caller's ./result took fresh outputs.

    Before the fix, `add_path`, `add_outputs` and `add_verified_path` rooted nothing: the gc
    of another process run right after each returned deleted every path made here.
    """
    from cudapkgs.store import nar

    addressed_path = store.add_path(addressed(store, "addressed"), write_tree({"f": b"a"}))
    content_path = store.add_path("content", write_tree({"f": b"c"}))
    outs = store.add_outputs([addressed(store, "o1"), addressed(store, "o2")],
                             lambda dirs: [write_tree({"f": p.encode()})(d) for p, d in dirs.items()])
    source = tmp_path / "source"
    write_tree({"f": b"substituted"})(source)
    digest, size, _ = nar.hash_and_scan(source, {})
    substituted = addressed(store, "substituted")
    assert store.add_verified_path(substituted, lambda out: write_tree({"f": b"substituted"})(out),
                                   nar_hash=nar.format_hash(digest), nar_size=size, references=[])
    mine = {addressed_path, content_path, *outs, substituted}
    with Store.open(store.store_dir) as other:  # another process's gc, right after each returned
        assert other.gc().deleted == []
        # Another process that finds them valid roots them too, before it counts on them.
        assert other.add_path(addressed_path, write_tree({"f": b"never built"})) == addressed_path
        assert other.add_outputs(outs, lambda dirs: pytest.fail("rebuilt a valid path")) == outs
        assert other.add_verified_path(substituted, lambda out: pytest.fail("refilled"), nar_hash="", nar_size=0,
                                       references=[]) is False
        store.close()
        with Store.open(store.store_dir) as third:
            assert third.gc().deleted == [content_path]  # the only one `other` did not count on
            assert sorted(third._live_temp_roots(False)) == sorted({addressed_path, *outs, substituted})
    with Store.open(store.store_dir) as last:  # both processes gone: garbage now
        assert sorted(last.gc().deleted) == sorted(mine - {content_path})


def test_verify_says_an_empty_store_is_empty_and_which(tmp_path):
    """It said "checked 0 store paths: 0 problem(s)", a clean bill for a store a typo made."""
    Store.open(tmp_path / "empty").close()
    r = cli("verify", store_dir=str(tmp_path / "empty"))
    assert r.returncode == 0 and r.stdout.strip() == (f"the store {tmp_path / 'empty'} is empty: it holds no valid "
                                                       "paths, so there was nothing to check"), r.stdout + r.stderr
    r = cli("verify", "--json", store_dir=str(tmp_path / "empty"))
    assert r.returncode == 0 and json.loads(r.stdout) == []
    assert f"note: the store {tmp_path / 'empty'} is empty" in r.stderr


def test_verify_only_the_paths_given(store, tmp_path):
    a = store.add_path(addressed(store, "a"), write_tree({"f": b"original"}))
    b = store.add_path(addressed(store, "b"), write_tree({"f": b"b"}))
    store.add_indirect_root(tmp_path / "result", b)
    os.chmod(f"{a}/f", 0o644)
    Path(a, "f").write_bytes(b"tampered")
    assert store.verify(paths=[b]) == []
    assert store.verify(paths=[str(tmp_path / "result")]) == []  # a link to a path
    assert [(p.path, p.kind) for p in store.verify(paths=[f"{a}/f", b])] == [(a, "hash-mismatch")]  # a file inside
    with pytest.raises(StoreError, match="is not valid"):
        store.verify(paths=[addressed(store, "never")])

    r = cli("verify", str(tmp_path / "result"), store_dir=store.store_dir)
    assert r.returncode == 0 and "checked 1 store path: 0 problem(s)" in r.stdout, r.stdout + r.stderr
    r = cli("verify", "--json", a, store_dir=store.store_dir)
    assert r.returncode == 1 and [p["kind"] for p in json.loads(r.stdout)] == ["hash-mismatch"]
    r = cli("verify", addressed(store, "never"), store_dir=store.store_dir)
    assert r.returncode == 1 and "is not valid in the store" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "cudapkgs", "verify", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "PATH" in r.stdout and "./result" in r.stdout


def test_verify_encodes_the_candidates_once(store, monkeypatch):
    # verify scans every path for every valid path's hash part: building that set per scanned
    # path made it quadratic (0.17 s at 1,000 paths, 1.88 s at 5,000). It is built once now.
    from cudapkgs.store import nar

    paths = [store.add_path(addressed(store, f"p{i}"), write_tree({"f": b"%d" % i})) for i in range(12)]
    built = []
    real_new = nar.Candidates.__new__

    def counting_new(cls, hashes=()):
        built.append(1)
        return real_new(cls, hashes)

    monkeypatch.setattr(nar.Candidates, "__new__", counting_new)
    assert store.verify() == []
    assert len(built) == 1
    assert store.verify(paths=paths[:3]) == [] and len(built) == 2


def test_the_temporary_area_spreads_new_build_directories(store):
    # ext4's Orlov flag (chattr +T) on <store>/.tmp: where supported (ext2/3/4), it is set.
    import fcntl
    import struct

    from cudapkgs.store.workdirs import _FS_IOC_GETFLAGS, _FS_TOPDIR_FL, spread_subdirectories

    fd = os.open(store.tmp_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            flags = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
        except OSError:
            pytest.skip("the file system of the test's temporary directory has no inode flags (not ext2/3/4)")
    finally:
        os.close(fd)
    if spread_subdirectories(store.tmp_dir):
        assert flags & _FS_TOPDIR_FL
    assert spread_subdirectories(store.tmp_dir / "absent") is False


def test_verify_counts_each_store_path_once(store, tmp_path):
    # review r1: `verify ./result ./result` (or a path and a file inside it) checked one store
    # path but reported "checked 2 store paths".
    a = store.add_path(addressed(store, "a"), write_tree({"f": b"a", "sub/g": b"g"}))
    store.add_indirect_root(tmp_path / "result", a)
    r = cli("verify", str(tmp_path / "result"), str(tmp_path / "result"), f"{a}/sub/g", a, store_dir=store.store_dir)
    assert r.returncode == 0 and "checked 1 store path: 0 problem(s)" in r.stdout, r.stdout + r.stderr


def test_verify_reports_progress_by_paths_and_nar_bytes(store):
    # r2 (session 3): verify of 80 real paths ran 17 s without a word.
    paths = [store.add_path(addressed(store, f"v{i}"), write_tree({"f": b"x" * (1000 * (i + 1))})) for i in range(4)]
    calls = []
    assert store.verify(progress=lambda *a: calls.append(a)) == []
    total = sum(store.query(p).nar_size for p in paths)
    assert [c[:2] for c in calls] == [(i, 4) for i in range(5)]  # before each path, then once at the end
    assert [c[3] for c in calls] == [total] * 5
    assert [c[2] for c in calls] == sorted(c[2] for c in calls) and calls[0][2] == 0 and calls[-1][2] == total


def test_verify_progress_lines_on_a_pipe_and_in_place_on_a_terminal():
    import io

    from cudapkgs.cli.store import _VerifyProgress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    pipe = io.StringIO()
    report = _VerifyProgress(pipe, interval=0.0)
    for done in range(3):
        report(done, 3, done * 1024, 3 * 1024)
    report(3, 3, 3 * 1024, 3 * 1024)
    assert pipe.getvalue().splitlines() == [  # a line per call on a pipe, none for the end
        "verifying: 0/3 paths, 0 B of 3.0 KiB",
        "verifying: 1/3 paths, 1.0 KiB of 3.0 KiB",
        "verifying: 2/3 paths, 2.0 KiB of 3.0 KiB",
    ]
    quiet = io.StringIO()
    report = _VerifyProgress(quiet, interval=3600.0)  # a verify shorter than the interval says nothing
    report(0, 1, 0, 10)
    report(1, 1, 10, 10)
    assert quiet.getvalue() == ""
    tty = Tty()
    report = _VerifyProgress(tty)
    report._last -= 1  # as if a moment had passed
    report(1, 2, 5, 10)
    report(2, 2, 10, 10)
    assert tty.getvalue() == "\r\033[Kverifying: 1/2 paths, 5 B of 10 B\r\033[K"  # the line is cleared at the end
