"""Substituters.fetch starts the largest NAR first when it has more than one job, and still registers
every path after its references, whatever the number of jobs (no worker waits forever)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cache_helpers import fresh_store_like

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.store import Store


def _chain(store: Store) -> list[str]:
    """low <- big <- top <- app, and alone: big is the largest and sits in the middle of the order."""
    def filled(size: int, refs: list[str]):
        def build(out: Path) -> None:
            out.mkdir()
            (out / "data").write_bytes(os.urandom(size) + "".join(r + "\n" for r in refs).encode())
        return build

    low = store.add_path("low-1", filled(1000, []))
    big = store.add_path("big-1", filled(300_000, [low]), references_candidates=[low])
    top = store.add_path("top-1", filled(2000, [big]), references_candidates=[big])
    app = store.add_path("app-1", filled(500, [top, low]), references_candidates=[top, low])
    alone = store.add_path("alone-1", filled(700, []))
    return [low, big, top, app, alone]


@pytest.mark.parametrize("jobs", [1, 2, 3, 8])
def test_the_largest_starts_first_and_every_path_registers_after_its_references(tmp_path, jobs):
    store = Store.open(tmp_path / "store")
    low, big, top, app, alone = paths = _chain(store)
    key = generate("order-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.upload_closure(store, [app, alone], secret_key=key)
    fresh = fresh_store_like(store, tmp_path / "old")
    registered: list[str] = []
    real = type(fresh.db).register

    def register(db, path, *args, **kwargs):
        registered.append(path)
        return real(db, path, *args, **kwargs)

    type(fresh.db).register = register
    try:
        with fresh:
            subs = Substituters([cache], [key.public])
            found = subs.query(fresh, [app, alone])
            started: list[str] = []

            class Progress:
                def started(self, sub): started.append(sub.path)
                def bytes(self, sub, done): pass
                def finished(self, sub, error): assert error is None, error

            assert sorted(subs.fetch(fresh, list(found.values()), jobs=jobs, progress=Progress())) == sorted(paths)
            assert fresh.verify() == []
    finally:
        type(fresh.db).register = real
    if jobs > 1:
        assert started[0] == big
    else:
        assert started.index(low) < started.index(big) < started.index(top) < started.index(app)
    for path, refs in ((big, [low]), (top, [big]), (app, [top, low])):
        assert all(registered.index(r) < registered.index(path) for r in refs)
