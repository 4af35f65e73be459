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


def test_gc_between_plan_and_build_keeps_the_valid_inputs(tmp_path):
    root = tmp_path / "store"
    with Store.open(root) as store:
        a = mk(store.store_dir, "a")
        realise(store, [a])
    b = mk(os.fspath(root), "b", [a])
    with Store.open(root) as store:  # a fresh process: nothing roots a
        the_plan = plan(store, [b])
        assert [d.name for d in the_plan.to_build] == ["b"]
        with Store.open(root) as gc_process:
            assert gc_process.gc().deleted == []
        assert run(store, the_plan) == [b.outputs["out"]]
        assert store.is_valid(a.outputs["out"]) and store.verify() == []
    with Store.open(root) as gc_process:  # once the builder has gone, both are garbage again
        assert sorted(gc_process.gc().deleted) == sorted([a.outputs["out"], b.outputs["out"]])


def test_realise_roots_its_inputs_before_building(tmp_path):
    root = tmp_path / "store"
    with Store.open(root) as store:
        a = mk(store.store_dir, "a")
        realise(store, [a])
    b = mk(os.fspath(root), "b", [a])
    c = mk(os.fspath(root), "c", [b])
    with Store.open(root) as store:
        rooted = __import__("cudapkgs.realise.realise", fromlist=["protect_inputs"]).protect_inputs(store, [c])
        assert rooted == [a.outputs["out"]]
        with Store.open(root) as gc_process:
            assert gc_process.gc().deleted == []
        realise(store, [c])
        assert store.verify() == []
