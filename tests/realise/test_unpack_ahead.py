"""Sources unpacked ahead of their builds (`cudapkgs.realise.unpack_ahead`), while the inputs are built.

The gcc-built release of `redist_fixtures` (libcublas needs cuda_cudart), realised at -j 1
from a warm download cache: libcublas's archive is unpacked while cuda_cudart builds. The
result must be exactly the ordinary build's, every check must still apply, and nothing
unpacked may be left behind, whatever fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redist_fixtures as rf
from elf_builders import GCC

import cudapkgs
from cudapkgs.realise import redist_source, unpack_ahead
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import log_path
from cudapkgs.realise.errors import BuildFailed
from cudapkgs.realise.scheduler import realise_parallel
from cudapkgs.store.store import Store

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc")


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> rf.Release:
    return rf.make_release(tmp_path_factory.mktemp("release"))


@pytest.fixture
def server(release):
    yield from rf.serve()


@pytest.fixture
def warm(tmp_path, server, release):
    """(cuda package set, store dir, NAR hashes of the first build) with the download cache filled and the outputs collected."""
    server.files.update(release.archives)
    config = {
        "allowUnfree": True,
        "manifestsDir": os.fspath(release.write_manifests(tmp_path / "manifests")),
        "storeDir": os.fspath(tmp_path / "store"),
        "fetchers": [f"mirror:{server.url}"],
        "driverLibDir": os.fspath(tmp_path / "driver"),
    }
    cuda = cudapkgs.import_pkgs(config=config, system="x86_64-linux")[rf.SET]
    store_dir = tmp_path / "store"
    with Store.open(store_dir) as store:
        realise_parallel(store, [cuda.libcublas.derivation], jobs=1)
        first = {p: store.query(p).nar_hash for d in (cuda.libcublas, cuda.cuda_cudart) for p in d.derivation.outputs.values()}
    with Store.open(store_dir) as store:  # a later process: nothing keeps them alive
        store.gc()
        store.gc()  # twice: the outputs kept for reuse go too (cudapkgs.store.reuse), so they are built again
        assert store.all_paths() == [] and not (store_dir / ".links").exists() or not any((store_dir / ".links").iterdir())
    return cuda, store_dir, first


def cached_archive(store_dir: Path, release: rf.Release, pname: str) -> Path:
    sha = release.manifest()[pname]["linux-x86_64"]["sha256"]
    return redist_source.download_dir(store_dir, sha) / Path(release.entries[pname][1]).name


def tmp_left(store_dir: Path) -> list[str]:
    return sorted(os.listdir(store_dir / ".tmp"))


def test_a_waiting_build_takes_its_tree_unpacked_ahead_and_the_result_is_the_same(warm, server, monkeypatch):
    cuda, store_dir, first = warm
    taken = []
    real_take = unpack_ahead.UnpackAhead.take

    def take(self, drv):
        got = real_take(self, drv)
        taken.append((drv.name, got is not None))
        return got

    monkeypatch.setattr(unpack_ahead.UnpackAhead, "take", take)
    with Store.open(store_dir) as store:
        realise_parallel(store, [cuda.libcublas.derivation], jobs=1)
        assert {p: store.query(p).nar_hash for p in first} == first  # byte for byte the ordinary build's
        assert store.verify() == []
        log = log_path(store, cuda.libcublas.derivation).read_text()
    # cuda_cudart started at once (nothing unpacked ahead for it); libcublas waited, its tree ready
    assert taken == [(cuda.cuda_cudart.derivation.name, False), (cuda.libcublas.derivation.name, True)]
    assert "(fetched and unpacked ahead, while the inputs were built)" in log and "fixup" in log
    assert log.count("@ fetch\n") == 1 and log.count("@ unpack\n") == 1  # each step once (fetch was twice)
    assert server.hits() == 2  # the first build's two downloads; nothing fetched again
    assert tmp_left(store_dir) == []


def test_a_damaged_source_unpacked_ahead_fails_its_build_as_before_and_leaves_nothing(warm, server, release):
    cuda, store_dir, _ = warm
    archive = cached_archive(store_dir, release, "libcublas")
    damaged = bytearray(archive.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # same size: the plan counts it as cached, the sha256 check does not
    archive.write_bytes(bytes(damaged))
    server.files["/cuda/redist/" + release.entries["libcublas"][1]] = bytes(damaged)
    with Store.open(store_dir) as store:
        with pytest.raises(BuildFailed) as failed:
            realise_parallel(store, [cuda.libcublas.derivation], jobs=1)
        assert "expected sha256" in str(failed.value) and "libcublas" in str(failed.value)
        assert not any(store.is_valid(p) for p in cuda.libcublas.derivation.outputs.values())
        assert all(store.is_valid(p) for p in cuda.cuda_cudart.derivation.outputs.values())
        assert store.verify() == []
    assert tmp_left(store_dir) == []


def test_trees_no_build_takes_are_removed(warm, server, release):
    cuda, store_dir, _ = warm
    # cuda_cudart cannot be fetched (its cached archive and the server's copy are damaged), so
    # libcublas, unpacked ahead, never builds: its tree must go.
    archive = cached_archive(store_dir, release, "cuda_cudart")
    damaged = bytearray(archive.read_bytes())
    damaged[100] ^= 0xFF
    archive.write_bytes(bytes(damaged))
    server.files["/cuda/redist/" + release.entries["cuda_cudart"][1]] = bytes(damaged)
    prepared = []
    real_prepare = redist_source.prepare

    def prepare(drv, store, fetchers):
        got = real_prepare(drv, store, fetchers)
        prepared.append(got.tree)
        return got

    redist_prepare = pytest.MonkeyPatch()
    redist_prepare.setattr(redist_source, "prepare", prepare)
    try:
        with Store.open(store_dir) as store, pytest.raises(BuildFailed, match="cuda_cudart"):
            realise_parallel(store, [cuda.libcublas.derivation], jobs=1)
    finally:
        redist_prepare.undo()
    assert tmp_left(store_dir) == []
    assert all(not os.path.lexists(tree) for tree in prepared)


def test_take_of_a_derivation_never_queued_or_not_started_is_none(warm):
    cuda, store_dir, _ = warm
    cublas, cudart = cuda.libcublas.derivation, cuda.cuda_cudart.derivation
    with Store.open(store_dir) as store:
        ahead = unpack_ahead.UnpackAhead(store, [cublas], lambda drv: tuple(drv.context["fetchers"]), workers=1, limit=0)
        try:
            assert ahead.take(cudart) is None  # never queued
            assert ahead.take(cublas) is None  # queued, not started (limit 0): the build does it itself
        finally:
            ahead.close()
        assert tmp_left(store_dir) == []


def test_a_source_unpacked_ahead_is_marked_needed_once_a_build_waits_for_it(warm, monkeypatch):
    """Its wheel's members yield to those of wheels builds wait for (`wheel_unpack.unpacking_ahead`)
    only until a build takes it: then it is needed now, as they are."""
    import threading

    from cudapkgs.fetch import wheel_unpack

    cuda, store_dir, _ = warm
    cublas = cuda.libcublas.derivation
    seen: dict = {}
    started, go_on = threading.Event(), threading.Event()

    def prepare(drv, store, fetchers):
        seen["needed"] = wheel_unpack._ahead.event
        seen["at first"] = seen["needed"].is_set()
        started.set()
        assert go_on.wait(10)
        return None

    monkeypatch.setattr(redist_source, "prepare", prepare)
    with Store.open(store_dir) as store:
        ahead = unpack_ahead.UnpackAhead(store, [cublas], lambda drv: tuple(drv.context["fetchers"]), workers=1)
        try:
            assert started.wait(10)
            taker = threading.Thread(target=ahead.take, args=(cublas,), daemon=True)
            taker.start()
            assert seen["needed"].wait(10)  # set by take, while the unpack still runs
            go_on.set()
            taker.join(10)
        finally:
            go_on.set()
            ahead.close()
    assert seen["at first"] is False
    assert getattr(wheel_unpack._ahead, "event", None) is None  # only the unpacking thread was marked
