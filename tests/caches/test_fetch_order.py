"""Substituters.fetch takes the NARs largest first when it has more than one job, and still registers
every path after its references, whatever the number of jobs (no worker waits forever); a path unpacked
before its references gives its worker's slot to the next NAR while it waits."""

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
        sizes = {p: found[p].info.nar_size for p in paths}
        assert started == sorted(paths, key=lambda p: -sizes[p])
    else:
        assert started.index(low) < started.index(big) < started.index(top) < started.index(app)
    for path, refs in ((big, [low]), (top, [big]), (app, [top, low])):
        assert all(registered.index(r) < registered.index(path) for r in refs)


def test_a_path_waiting_for_its_references_lets_the_other_job_go_on(tmp_path):
    # big refers to a and b and is the largest: at -j 2 it is unpacked first and then waits for a and b
    # to register. Its worker used to keep its slot while it waited, so a and b were unpacked one after
    # the other by the second worker; now a and b are unpacked at the same time (the barrier needs both
    # in at once: with one worker left it breaks, and a and b fail).
    import threading

    store = Store.open(tmp_path / "store")
    a = store.add_path("a-1", lambda out: (out.mkdir(), (out / "f").write_bytes(os.urandom(1000))))
    b = store.add_path("b-1", lambda out: (out.mkdir(), (out / "f").write_bytes(os.urandom(2000))))
    big = store.add_path("big-1", lambda out: (out.mkdir(), (out / "f").write_bytes(os.urandom(200_000) + f"{a}\n{b}\n".encode())),
                         references_candidates=[a, b])
    key = generate("order-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.upload_closure(store, [big], secret_key=key)
    fresh = fresh_store_like(store, tmp_path / "old")
    both_in = threading.Barrier(2, timeout=20)  # a guard against a hang, not a time budget
    real = cache.substitute

    def substitute(to, path, **options):
        if path in (a, b):
            both_in.wait()
        return real(to, path, **options)

    cache.substitute = substitute  # type: ignore[method-assign]
    with fresh:
        subs = Substituters([cache], [key.public])
        found = subs.query(fresh, [big])
        assert sorted(subs.fetch(fresh, list(found.values()), jobs=2)) == sorted([a, b, big])
        assert fresh.verify() == []


def test_stop_tells_a_waiting_item_that_the_items_not_taken_will_never_run():
    # The largest NAR is taken first and waits for its references to register; stopped (Ctrl-C)
    # while one reference ran and the other was not taken yet, the pool waited for ever on it.
    import threading

    from cudapkgs.store.caches.substitution import _Threads

    done = {name: threading.Event() for name in ("a", "b")}
    running_a, release_a = threading.Event(), threading.Event()
    seen: list[str] = []

    def fn(item: str) -> str:
        if item == "largest":
            for ref in ("a", "b"):
                done[ref].wait()
            return "largest"
        if item == "a":
            running_a.set()
            release_a.wait()
        done[item].set()
        return item

    def skipped(item: str) -> None:
        seen.append(item)
        done[item].set()

    pool = _Threads(fn, ["largest", "a", "b"], 2, "test-pool", on_skip=skipped)
    assert running_a.wait(30)
    stopper = threading.Thread(target=pool.stop, daemon=True)
    stopper.start()
    release_a.set()
    stopper.join(30)
    assert not stopper.is_alive(), "stop() waited for an item that no thread will take"
    assert seen == ["b"]


def test_a_yielded_slot_runs_the_next_item_and_no_more_than_workers_run_at_once():
    # One worker: the first item waits for the two after it. Without yield_slot it would wait for ever (the
    # only worker is the one waiting); with it, a new thread takes the others, one at a time.
    import threading

    from cudapkgs.store.caches.substitution import _Threads

    done = {name: threading.Event() for name in ("a", "b")}
    lock = threading.Lock()
    running, most = [0], [0]
    pool: _Threads | None = None

    def fn(item: str) -> str:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if item == "first":
            with lock:
                running[0] -= 1
            pool.yield_slot()
            assert all(done[ref].wait(20) for ref in ("a", "b")), "the items after it never ran"
            return item
        with lock:
            running[0] -= 1
        done[item].set()
        return item

    pool = _Threads(fn, ["first", "a", "b"], 1, "test-pool", start=False)
    pool.start()
    assert pool.outcomes(raising=True) == ["first", "a", "b"]
    assert most[0] == 1


def test_threads_stay_bounded_when_many_paths_wait_for_one_small_reference(tmp_path, monkeypatch):
    # Twelve paths refer to one small path. Taken largest first, every one of them would be unpacked before
    # it and wait: a thread (with its store connection and lock) per path. Only the 2 * jobs largest are
    # taken ahead; the rest come after the small one, so no more than jobs + 4 threads ever run.
    from cudapkgs.store.caches import substitution

    store = Store.open(tmp_path / "store")
    leaf = store.add_path("leaf-1", lambda out: (out.mkdir(), (out / "f").write_bytes(os.urandom(500))))
    mids = [store.add_path(f"mid{i}-1", lambda out, i=i: (out.mkdir(), (out / "f").write_bytes(os.urandom(5000 + 1000 * i)
                                                                                        + f"{leaf}\n".encode())),
                           references_candidates=[leaf]) for i in range(12)]
    key = generate("order-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.upload_closure(store, mids, secret_key=key)
    fresh = fresh_store_like(store, tmp_path / "old")
    made = [0]
    real = substitution._Threads._thread

    def counted(self):
        made[0] += 1
        return real(self)

    monkeypatch.setattr(substitution._Threads, "_thread", counted)
    with fresh:
        subs = Substituters([cache], [key.public])
        found = subs.query(fresh, mids)
        made[0] = 0  # the query's threads are not the substitution's
        assert sorted(subs.fetch(fresh, list(found.values()), jobs=2)) == sorted([leaf, *mids])
        assert fresh.verify() == []
    assert made[0] <= 2 + 2 * 2


def test_after_the_largest_the_rest_go_larger_first_where_references_allow():
    """The rest of the closure is taken in a dependency order that prefers the larger NAR: in the plain
    order a 245 MiB NAR that triton (and so torch) waited for came last and unpacked alone at the end of
    the ML closure. References still come before the paths that refer to them."""
    from types import SimpleNamespace

    from cudapkgs.store.caches.substitution import _largest_first, _topological

    sizes = {"torch": 1100, "cudnn": 880, "cublas": 570, "triton": 550, "a-small": 1, "b-small": 2, "c-small": 3,
             "nvcc-tools": 245, "nvcc-dep": 4, "numpy": 68, "app": 5}
    refs_of = {"torch": ["triton", "cudnn", "cublas", "a-small"], "triton": ["nvcc-tools"], "nvcc-tools": ["nvcc-dep"],
               "numpy": ["b-small"], "app": ["torch", "numpy", "c-small"]}
    refs_of = {p: refs_of.get(p, []) for p in sizes}
    by_path = {p: SimpleNamespace(info=SimpleNamespace(nar_size=n)) for p, n in sizes.items()}
    order = _topological(refs_of)
    start, ahead = _largest_first(order, by_path, 2, refs_of)
    assert start[:4] == ["torch", "cudnn", "cublas", "triton"] and ahead == set(start[:4])
    rest = start[4:]
    assert sorted(rest) == sorted(set(sizes) - ahead)
    for p in rest:  # a dependency order among the rest
        assert all(rest.index(r) < rest.index(p) for r in refs_of[p] if r in rest)
    # nvcc-tools and its small reference first (the reference weighs what nvcc-tools does), then numpy's
    # reference and numpy, then the small paths; by size alone nvcc-dep (4) came after c-small (3)
    assert rest == ["nvcc-dep", "nvcc-tools", "b-small", "numpy", "c-small", "a-small", "app"]
    # one job: the plain dependency order, nothing moved
    assert _largest_first(order, by_path, 1, refs_of) == (order, set())
