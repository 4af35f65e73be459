"""A redist build's outputs come back after a gc without fetching, unpacking or hashing, and only unchanged.

The same release as tests/realise/test_redist_builder.py (gcc-built, on a loopback server):
realised, collected by a later process, realised again. The second realisation puts the
outputs back from what the store verified and kept (`cudapkgs.store.reuse`): the builder
does not run, and `verify` (which hashes every byte) agrees with what is registered. A
kept file changed in between makes the build run again from the download cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redist_fixtures as rf
from elf_builders import GCC

import cudapkgs
from cudapkgs.realise import redist
from cudapkgs.realise.realise import realise
from cudapkgs.store import reuse
from cudapkgs.store.store import Store

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc")


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> rf.Release:
    return rf.make_release(tmp_path_factory.mktemp("release"))


@pytest.fixture
def server(release):
    yield from rf.serve()


@pytest.fixture
def drv(tmp_path, server, release):
    server.files.update(release.archives)
    manifests = release.write_manifests(tmp_path / "manifests")
    config = {"allowUnfree": True, "manifestsDir": os.fspath(manifests), "storeDir": os.fspath(tmp_path / "store"),
              "fetchers": [f"mirror:{server.url}"]}
    return cudapkgs.import_pkgs(config=config, system="x86_64-linux")[rf.SET].cuda_cudart.derivation


def _built_then_collected(store_dir: Path, drv) -> dict[str, tuple[str, int]]:
    with Store.open(store_dir) as store:
        realise(store, [drv])
        infos = {p: (store.query(p).nar_hash, store.query(p).nar_size) for p in drv.outputs.values()}
    with Store.open(store_dir) as store:
        store.gc()
        assert not any(store.is_valid(p) for p in drv.outputs.values())
    return infos


def _counting_builds(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = redist.build

    def build(drv, ctx, outputs):
        calls.append(drv.name)
        return real(drv, ctx, outputs)

    monkeypatch.setattr(redist, "build", build)
    return calls


def test_after_gc_the_outputs_come_back_unbuilt_and_verified(tmp_path, drv, monkeypatch):
    store_dir = tmp_path / "store"
    infos = _built_then_collected(store_dir, drv)
    calls = _counting_builds(monkeypatch)
    with Store.open(store_dir) as store:
        realise(store, [drv])
        assert calls == []
        assert {p: (store.query(p).nar_hash, store.query(p).nar_size) for p in drv.outputs.values()} == infos
        assert store.verify() == []


def test_a_kept_file_changed_after_gc_is_refused_and_the_build_runs(tmp_path, drv, monkeypatch):
    store_dir = tmp_path / "store"
    infos = _built_then_collected(store_dir, drv)
    lib = drv.outputs["lib"]
    pool = reuse.pool_dir(store_dir, lib)
    victim = max((p for p in pool.rglob("*") if p.is_file() and not p.is_symlink()), key=lambda p: p.stat().st_size)
    mode = victim.stat().st_mode
    os.chmod(victim, 0o755)
    with open(victim, "r+b") as f:
        f.seek(100)
        f.write(b"\0\0\0\0")
    os.chmod(victim, mode)
    os.utime(victim, (1, 1))
    calls = _counting_builds(monkeypatch)
    with Store.open(store_dir) as store:
        realise(store, [drv])
        assert calls == [drv.name]
        assert {p: (store.query(p).nar_hash, store.query(p).nar_size) for p in drv.outputs.values()} == infos
        assert store.verify() == []


def test_the_plan_fetches_nothing_for_outputs_it_can_put_back(tmp_path, drv):
    from cudapkgs.realise.scheduler import plan

    _built_then_collected(tmp_path / "store", drv)
    with Store.open(tmp_path / "store") as store:
        the_plan = plan(store, [drv])
        assert [d.name for d in the_plan.to_build] == [drv.name] and the_plan.to_fetch == ()
