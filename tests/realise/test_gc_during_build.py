"""A `cudapkgs gc` running beside a build must not delete what the build counts on (issue 8, part 6).

Before the fix, a valid but unrooted input could be collected between planning and
building (4 of 10 builds failed while gc looped). Now the plan's whole closure is
temporarily rooted before the first fetch. Each test runs the gc from a second
`Store` object, as another process would.
"""

from __future__ import annotations

import os

import pytest

from cudapkgs.derivation import Derivation
from cudapkgs.realise import context
from cudapkgs.realise.realise import realise
from cudapkgs.realise.scheduler import plan, run
from cudapkgs.store.store import Store


def write_inputs(drv, ctx, outputs) -> None:
    for directory in outputs.values():
        directory.mkdir()
        (directory / "inputs").write_text("\n".join(drv.data["inputs"].values()))
        for path in drv.data["inputs"].values():
            assert os.path.exists(path), f"input {path} vanished during the build"


@pytest.fixture(autouse=True)
def _builder(monkeypatch):
    monkeypatch.setitem(context.BUILDERS, "gc-test", f"{__name__}:write_inputs")


def mk(store_dir, name, deps=()):
    return Derivation(
        store_dir=os.fspath(store_dir), name=name, system="x86_64-linux", outputs=("out",), builder="gc-test",
        src=None, input_paths={d.name: d.outputs["out"] for d in deps}, attrs={}, deps=deps,
    )


def store_with_a(tmp_path, *, result=False):
    """(the store's root, `a`): a store at ``tmp_path/store`` where `a` was built by a process that has
    gone (nothing roots it), or with `result` rooted by the link ``tmp_path/result``."""
    root = tmp_path / "store"
    with Store.open(root) as store:
        a = mk(store.store_dir, "a")
        realise(store, [a])
        if result:
            store.add_indirect_root(tmp_path / "result", a.outputs["out"])
    return root, a


def gc_elsewhere(root) -> list[str]:
    """What a gc run from a second `Store` (as another process would) deletes."""
    with Store.open(root) as gc_process:
        return gc_process.gc().deleted


def the_auto_root(root) -> tuple[str, str]:
    """(the ``.gcroots/auto`` directory, its one entry)."""
    auto = os.fspath(root / ".gcroots" / "auto")
    (entry,) = os.listdir(auto)
    return auto, entry


def test_gc_between_plan_and_build_keeps_the_valid_inputs(tmp_path):
    root, a = store_with_a(tmp_path)
    b = mk(os.fspath(root), "b", [a])
    with Store.open(root) as store:  # a fresh process: nothing roots a
        the_plan = plan(store, [b])
        assert [d.name for d in the_plan.to_build] == ["b"]
        assert gc_elsewhere(root) == []
        assert run(store, the_plan) == [b.outputs["out"]]
        assert store.is_valid(a.outputs["out"]) and store.verify() == []
    # once the builder has gone, both are garbage again
    assert sorted(gc_elsewhere(root)) == sorted([a.outputs["out"], b.outputs["out"]])


def test_realise_roots_its_inputs_before_building(tmp_path):
    from cudapkgs.realise.realise import protect_inputs

    root, a = store_with_a(tmp_path)
    b = mk(os.fspath(root), "b", [a])
    c = mk(os.fspath(root), "c", [b])
    with Store.open(root) as store:
        assert protect_inputs(store, [c]) == [a.outputs["out"]]
        assert gc_elsewhere(root) == []
        realise(store, [c])
        assert store.verify() == []


def write_name(drv, ctx, outputs) -> None:
    for name, directory in outputs.items():
        directory.mkdir()
        (directory / "f").write_text(f"{drv.name} {name}\n")


_GC_LOOP = """
import os, sys, time
from cudapkgs.store.store import Store
root, stop = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 120  # bounded even if the test dies without a word
open(stop + ".started", "w").close()
while not os.path.exists(stop) and time.monotonic() < deadline:
    with Store.open(root) as store:
        store.gc()
"""


def test_builds_racing_a_gc_loop_keep_every_output(tmp_path, monkeypatch):
    """Issue 23 class 2: `cudapkgs gc` beside `cudapkgs build -o res` deleted the fresh output.

    Forty builds (two outputs each, linked as the command line links them) run while another
    process collects garbage in a loop. Before outputs were rooted at registration, a gc that
    got the lock between `add_outputs` and the build's own temporary root took them (7 of 40
    rounds here; the link then dangled or the command failed). Until the links were made under
    the shared gc lock, a gc that listed the roots just before `res-dev` was linked and read the
    temporary roots just after the build closed its Store took `-dev` (1 run in 5 to 15 failed;
    the interleaving is made certain in `test_a_root_made_while_gc_reads_the_roots_is_honoured`).
    """
    import subprocess
    import sys
    import time

    from cudapkgs.cli.build import realise_and_link
    from cudapkgs.cli.installables import Installable

    monkeypatch.setitem(context.BUILDERS, "gc-race", f"{__name__}:write_name")
    monkeypatch.chdir(tmp_path)
    root = os.fspath(tmp_path / "store")
    Store.open(root).close()
    stop = tmp_path / "stop"
    gc_loop = subprocess.Popen([sys.executable, "-c", _GC_LOOP, root, os.fspath(stop)])
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "stop.started").exists():
            assert gc_loop.poll() is None and time.monotonic() < deadline, "the gc loop did not start"
            time.sleep(0.01)
        lost = []
        for round_ in range(40):
            drv = Derivation(store_dir=root, name=f"race{round_}", system="x86_64-linux", outputs=("out", "dev"),
                             builder="gc-race", src=None, input_paths={}, attrs={}, deps=())
            try:
                realise_and_link(root, [Installable(drv.name, drv=drv)], out_link=f"res{round_}", jobs=1, quiet=True)
            except Exception as error:  # noqa: BLE001 - a lost output shows as a failed link
                lost.append(f"round {round_}: {error}")
                continue
            for link in (f"res{round_}", f"res{round_}-dev"):
                if not os.path.exists(os.path.join(link, "f")):
                    lost.append(f"round {round_}: {link} dangles")
        assert gc_loop.poll() is None, "the gc loop died"
    finally:
        stop.touch()
        try:
            gc_loop.wait(timeout=60)
        except subprocess.TimeoutExpired:
            gc_loop.kill()
            gc_loop.wait()
    assert lost == []
    with Store.open(root) as store:  # every output is rooted by its link, and the store is consistent
        assert store.gc().deleted == [] and store.verify() == []


def test_a_root_made_while_gc_reads_the_roots_is_honoured(tmp_path):
    """The interleaving behind issue 23's lost `-dev` outputs, made to happen every time.

    `gc` reads the permanent roots, then the temporary ones. A build that linked its output
    and closed its Store (dropping the temporary root) between those two reads was in
    neither, and its output was deleted under the fresh link. Now the link is made under the
    shared gc lock, so it waits for the running gc, whose temporary roots still hold it.
    """
    import threading

    root = tmp_path / "store"
    builder = Store.open(root)  # the `cudapkgs build -o result` process
    a = mk(builder.store_dir, "a")
    realise(builder, [a])  # valid, and a temporary root of `builder` only
    path = a.outputs["out"]
    link = tmp_path / "result"
    done = threading.Event()
    threads = []

    def link_and_close() -> None:
        builder.add_indirect_root(link, path)
        builder.close()
        done.set()

    with Store.open(root) as gc_process:
        read_temp_roots = gc_process._live_temp_roots

        def after_the_permanent_roots(*args, **kwargs):
            threads.append(threading.Thread(target=link_and_close))
            threads[0].start()
            done.wait(0.5)  # without the shared lock the link is made and the Store closed by now
            return read_temp_roots(*args, **kwargs)

        gc_process._live_temp_roots = after_the_permanent_roots
        try:
            assert gc_process.gc().deleted == []
        finally:
            del gc_process._live_temp_roots
            threads[0].join(timeout=60)
        assert done.is_set() and os.path.exists(link) and os.readlink(link) == path
        assert gc_process.gc().deleted == [] and gc_process.is_valid(path)  # the link keeps it now


def test_a_root_entry_renamed_while_gc_lists_the_roots_is_skipped(tmp_path, monkeypatch):
    """The gc loop of the race above died once: `os.readlink` on a ``.tmp-`` entry that
    `add_indirect_root` had renamed into place since gc listed it (FileNotFoundError).

    A gc no longer runs while roots are made, but a leftover entry of a killed process can
    still go (a user cleaning up); gc skips what is gone."""
    root, a = store_with_a(tmp_path, result=True)
    auto, entry = the_auto_root(root)
    half_made = os.path.join(auto, entry + ".tmp-0123")
    os.symlink(os.fspath(tmp_path / "result"), half_made)  # a replacement half made
    readlink = os.readlink

    def rename_then_readlink(path, *args, **kwargs):
        if os.fspath(path) == half_made and os.path.lexists(half_made):  # gc saw it; now the replacement lands
            os.replace(half_made, os.path.join(auto, entry))
        return readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", rename_then_readlink)
    assert gc_elsewhere(root) == []
    monkeypatch.undo()
    assert os.listdir(auto) == [entry]


def test_an_indirect_root_that_cannot_be_looked_at_stops_the_gc(tmp_path, monkeypatch):
    """A result link gc cannot look at (EACCES on a directory above it) is no stale root: the gc
    stops naming it, deleting nothing and keeping its `auto` entry (Nix would skip the root and
    collect its path, src/libstore/gc.cc findRoots). A link that is gone still loses its entry."""
    from cudapkgs.errors import StoreError

    root, a = store_with_a(tmp_path, result=True)
    auto, entry = the_auto_root(root)
    hidden = os.fspath(tmp_path / "result")
    real_lstat, real_islink = os.lstat, os.path.islink

    def denied(path, *args, **kwargs):
        if os.fspath(path) == hidden:
            raise PermissionError(13, "Permission denied", hidden)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", denied)
    monkeypatch.setattr(os.path, "islink", lambda p: False if os.fspath(p) == hidden else real_islink(p))
    with pytest.raises(StoreError, match="cannot look at the GC root .*result"):
        gc_elsewhere(root)
    monkeypatch.undo()
    assert os.listdir(auto) == [entry]
    assert gc_elsewhere(root) == []  # readable again: the root keeps its path
    with Store.open(root) as store:
        assert store.is_valid(a.outputs["out"])
    os.unlink(hidden)
    assert a.outputs["out"] in gc_elsewhere(root)
    assert os.listdir(auto) == []
