"""Substituting store paths from binary caches: ask (in parallel), decide, download (in parallel).

`Substituters` holds the caches a configuration names (`substituters`, tried in
order) with the keys it trusts (`trustedPublicKeys`) and `requireSigs`. It
answers which invalid paths can be substituted, with their whole runtime closure
(a path is substitutable only if every reference is valid or substitutable
too), and fetches a set of them dependencies first. A cache that does not answer
is reported once (one line) and not asked again in this run; a narinfo that is
malformed or not signed by a trusted key makes that path a miss (one line), so
the caller builds it instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import CudapkgsError
from ..cycles import find_cycle, topological_order
from ..unsynced import note_unsynced
from .base import Cache, CacheError, CacheUnavailable
from .narinfo import NarInfo
from .substitute_progress import PlainSubstituteProgress  # noqa: F401  (its old home: callers import it from here)
from .signing import PublicKey, trusted_keys

__all__ = ["Substitute", "Substituters", "SubstituteFailed", "compress_workers", "default_jobs"]


class SubstituteFailed(CacheError):
    """Some paths could not be substituted; `failures` maps each to its error."""

    def __init__(self, failures: dict[str, BaseException]) -> None:
        self.failures = failures
        first = next(iter(failures.values()))
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        super().__init__(f"{first}{more}")


@dataclass(frozen=True)
class Substitute:
    """A path a cache can give: where from, and its narinfo (`info.download_size` bytes to download)."""

    path: str
    cache: Cache
    info: NarInfo

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "cache": self.cache.url, "downloadSize": self.info.download_size, "narSize": self.info.nar_size}


class Substituters:
    """The caches to substitute from, in priority order, and the trust policy."""

    def __init__(
        self,
        caches: Sequence[Cache],
        keys: Iterable[PublicKey] = (),
        *,
        require_sigs: bool = True,
        warn: Callable[[str], None] | None = None,
        jobs: int = 8,
        scoped_keys: Mapping[str, Iterable[PublicKey]] | None = None,
    ) -> None:
        self.caches = list(caches)
        self.keys = list(keys)
        # Keys trusted for one cache only (by its URL): a project's keys, for the caches it names.
        self.scoped_keys = {url: list(k) for url, k in (scoped_keys or {}).items()}
        self.require_sigs = require_sigs
        self._warn = warn or (lambda _line: None)
        self._warn_lock = threading.Lock()  # lookups run on threads: one warning's line is written whole
        self.jobs = max(1, jobs)
        self._down: set[str] = set()
        self._lock = threading.Lock()
        # Each path's narinfo is asked for once per run (issue 23: `copy --from` asked twice).
        self._answers: dict[str, Substitute | None] = {}
        self._absent: set[str] = set()
        self._refused: dict[str, str] = {}  # path -> why a cache's narinfo for it was refused (the first reason)

    @classmethod
    def from_config(cls, config: Any, *, scoped_keys: Mapping[str, Iterable[str]] | None = None,
                    **options: Any) -> Substituters:
        """From a Config's `substituters`, `trustedPublicKeys` and `requireSigs` (CudapkgsError on a bad key or URL).

        `scoped_keys` maps some of the substituters (as the configuration spells them) to
        more keys ("name:base64") trusted for that cache alone.
        """
        from . import open_cache

        urls = list(_get(config, "substituters", ()) or ())
        keys = trusted_keys(_get(config, "trustedPublicKeys", ()) or ())
        caches = [open_cache(u) for u in urls]
        scoped = {cache.url: trusted_keys((scoped_keys or {}).get(url, ())) for url, cache in zip(urls, caches)
                  if (scoped_keys or {}).get(url)}
        return cls(caches, keys, require_sigs=bool(_get(config, "requireSigs", True)), scoped_keys=scoped, **options)

    def warn(self, line: str) -> None:
        """Say `line` (a warning) through the caller's `warn`, one line at a time whichever thread says it."""
        with self._warn_lock:
            self._warn(line)

    def keys_for(self, cache: Cache) -> list[PublicKey]:
        """The keys whose signatures `cache`'s narinfos may carry: everyone's, and its own scoped ones."""
        return self.keys + self.scoped_keys.get(cache.url, [])

    def __bool__(self) -> bool:
        return bool(self.caches)

    def _mark_down(self, cache: Cache, error: BaseException) -> None:
        with self._lock:
            if cache.url in self._down:
                return
            self._down.add(cache.url)
        self.warn(f"warning: {error}; not using {cache.url} for the rest of this run (building instead)")

    def lookup(self, path: str) -> Substitute | None:
        """The first cache (in order) with a trusted, well-formed narinfo for `path`, or None.

        The answer is remembered: a path is looked up once per `Substituters`, whoever asks again.
        """
        if path in self._answers:
            return self._answers[path]
        answer = self._lookup(path)
        with self._lock:
            self._answers[path] = answer
        return answer

    def absent(self, path: str) -> bool:
        """Whether every cache answered that it has no narinfo for `path` (as opposed to a bad or untrusted one,
        or a cache that did not answer); False for a path not looked up."""
        return path in self._absent

    def refusals(self) -> dict[str, str]:
        """The paths looked up so far whose narinfo a cache gave but was refused (untrusted signature,
        malformed narinfo), each with the first refusal's message (which names the path and the cache),
        in the order they were refused."""
        with self._lock:
            return dict(self._refused)

    def _lookup(self, path: str) -> Substitute | None:
        missing = 0
        for cache in self.caches:
            if cache.url in self._down:
                continue
            try:
                info = cache.narinfo(path)
                if info is None:
                    missing += 1
                    continue
                cache.verify(info, self.keys_for(cache), require_sigs=self.require_sigs)
            except CacheUnavailable as error:
                self._mark_down(cache, error)
                continue
            except CudapkgsError as error:
                with self._lock:
                    self._refused.setdefault(path, str(error))
                self.warn(f"warning: {error}")
                continue
            return Substitute(path, cache, info)
        if missing == len(self.caches):
            with self._lock:
                self._absent.add(path)
        return None

    def query(self, store: Any, paths: Iterable[str]) -> dict[str, Substitute]:
        """For the invalid paths among `paths`: those substitutable together with their whole runtime closure.

        References not valid in `store` are looked up too; a path whose closure
        has a hole (a reference neither valid nor in a cache) is left out.
        """
        if not self.caches:
            return {}
        self._check_store_dirs(store.store_dir)
        found: dict[str, Substitute | None] = {}
        todo = [p for p in dict.fromkeys(paths) if not store.is_valid(p)]
        while todo:
            batch = [p for p in dict.fromkeys(todo) if p not in found]
            todo = []
            for path, sub in zip(batch, _Threads(self.lookup, batch, self.jobs, "cudapkgs-query").outcomes(raising=True)):
                found[path] = sub
                if sub is not None:
                    for ref in sub.info.reference_paths():
                        if ref != path and ref not in found and not store.is_valid(ref):
                            todo.append(ref)
        # A path is usable when every invalid reference is usable too (a greatest fixed point),
        # and no path whose closure holds a reference cycle is: it could never be registered.
        usable = {p for p, s in found.items() if s is not None}
        while (cycle := find_cycle({p: found[p].info.reference_paths() for p in usable})) is not None:  # type: ignore[union-attr]
            path, parent = cycle
            self.warn(f"warning: {found[path].cache.url}: cycle detected in the references of '{path}' from "  # type: ignore[union-attr]
                      f"'{parent}'; not substituting them")
            usable -= {path, parent}
        changed = True
        while changed:
            changed = False
            for path in list(usable):
                sub = found[path]
                assert sub is not None
                if any(r != path and r not in usable and not store.is_valid(r) for r in sub.info.reference_paths()):
                    usable.discard(path)
                    changed = True
        return {p: found[p] for p in found if p in usable}  # type: ignore[misc]

    def _check_store_dirs(self, store_dir: str) -> None:
        """Take out (with a warning, once a run) every cache whose `nix-cache-info` names another store directory.

        Its narinfos are of other paths (a store path embeds its store directory), so every lookup would
        miss in silence and everything be built; Nix likewise refuses a binary cache whose StoreDir is not
        the store's (NixOS/nix src/libstore/binary-cache-store.cc, `BinaryCacheStore::init`).
        """
        for cache in self.caches:
            if cache.url in self._down:
                continue
            try:
                cache.check_store_dir(store_dir)
            except CudapkgsError as error:  # CacheUnavailable too: its nix-cache-info did not come
                self._mark_down(cache, error)

    def closure_of(self, subs: dict[str, Substitute], paths: Iterable[str]) -> list[str]:
        """`paths` and every reference among `subs` they reach (the paths to fetch)."""
        seen: list[str] = []
        stack = [p for p in paths if p in subs]
        marked = set(stack)
        while stack:
            path = stack.pop()
            seen.append(path)
            for ref in subs[path].info.reference_paths():
                if ref in subs and ref not in marked:
                    marked.add(ref)
                    stack.append(ref)
        return sorted(seen)

    def fetch(
        self,
        store: Any,
        subs: Sequence[Substitute],
        *,
        jobs: int = 4,
        progress: Any = None,
    ) -> list[str]:
        """Substitute `subs` (a closure: every reference valid or among them), `jobs` at once.

        NARs are downloaded and unpacked in parallel whatever their references; each
        path is registered only once its references are (dependencies first), so a
        large path does not wait for a small one's download. `progress` gets
        `started(sub)`, `bytes(sub, done)`, `finished(sub, error)`. Raises
        SubstituteFailed after the others finished if any failed (a path whose
        reference failed is not registered). Returns the paths added.
        """
        from ..store import Store

        by_path = {s.path: s for s in subs}
        refs_of = {s.path: [r for r in s.info.reference_paths() if r in by_path and r != s.path] for s in subs}
        order = _topological(refs_of)  # ReferenceCycleError before any download: they would wait on each other
        registered = {p: threading.Event() for p in by_path}
        expected = sorted(by_path)  # what may become valid while a path unpacks: looked for in the one read
        failed: dict[str, BaseException] = {}
        local = threading.local()
        opened: list[Any] = []
        lock = threading.Lock()

        def worker_store() -> Any:
            if not hasattr(local, "store"):
                local.store = Store.open(store.root)
                with lock:
                    opened.append(local.store)
            return local.store

        def one(sub: Substitute) -> str:
            def wait_for_references() -> None:
                # Unpacked, this path waits for its references to register. One of the largest (taken out of
                # dependency order) gives its CPU slot up first (`_Threads.yield_slot`: another thread takes
                # the next NAR meanwhile); the others wait on paths taken before them (`_largest_first`).
                if sub.path in ahead and not all(registered[ref].is_set() for ref in refs_of[sub.path]):
                    pool.yield_slot()
                for ref in refs_of[sub.path]:
                    registered[ref].wait()
                    if ref in failed:
                        raise CacheError(f"{sub.path}: its reference {ref} could not be substituted; not registered")

            if progress:
                progress.started(sub)
            try:
                sub.cache.substitute(
                    worker_store(), sub.path, trusted_keys=self.keys_for(sub.cache), require_sigs=self.require_sigs,
                    info=sub.info,
                    on_bytes=(lambda done: progress.bytes(sub, done)) if progress else None,
                    wait_for_references=wait_for_references, expected=expected,
                )
            except BaseException as error:
                failed[sub.path] = error
                registered[sub.path].set()
                if progress:
                    progress.finished(sub, error)
                raise
            registered[sub.path].set()
            if progress:
                progress.finished(sub, None)
            return sub.path

        def never_started(sub: Substitute) -> None:
            # stop() (an interrupt, say) before a worker took `sub`: a path waiting for it (the largest,
            # taken first) is told it failed instead of waiting for ever
            failed[sub.path] = CacheError(f"{sub.path}: not substituted (stopped before it started)")
            registered[sub.path].set()

        # One durable note of the whole closure before the first NAR, not one per path (unsynced.py).
        try:
            note_unsynced(store.root / ".meta", order)
        except OSError as error:
            raise CacheError(f"cannot note the paths to substitute in {store.root}/.meta/unsynced: "
                             f"{error.strerror or error}; nothing was substituted") from None
        added: list[str] = []
        failures: dict[str, BaseException] = {}
        pool = None
        try:
            start, ahead = _largest_first(order, by_path, jobs, refs_of)
            pool = _Threads(one, [by_path[p] for p in start], max(1, jobs), "cudapkgs-substitute",
                            on_skip=never_started, start=False)
            pool.start()
            for path, (_, error) in zip(start, pool.outcomes()):
                if error is None:
                    added.append(path)
                elif isinstance(error, Exception):
                    failures[path] = error
                else:
                    raise error
        finally:
            if pool is not None:
                pool.stop()
            if added:
                store.add_temp_roots(added)
            for s in opened:
                s.close()
        if failures:
            raise SubstituteFailed(failures)
        return added


#: How many of the largest NARs, per job, are taken before the rest (in dependency order) when jobs > 1.
AHEAD_PER_JOB = 2


def _largest_first(order: list[str], by_path: Mapping[str, Substitute], jobs: int,
                   refs_of: Mapping[str, Sequence[str]] | None = None) -> tuple[list[str], set[str]]:
    """(the order to take the paths in, the paths taken ahead of their turn): the `AHEAD_PER_JOB * jobs`
    largest NARs first, largest first, then the rest in a dependency order (`refs_of`: references first;
    without it, `order`) that takes next the path with the largest NAR among it and the paths waiting on
    it (`_largest_ready_first`); nothing moved at one job.

    The largest first is the longest-processing-time rule: the jobs end together, instead of the largest
    NAR (torch's 1.1 GiB of the ML closure's 5.2) unpacking alone at the end. Unpacking does not wait for
    references, only registration does. A path taken ahead may wait for paths not taken yet, so it gives
    its worker's slot to the next path while it waits (`_Threads.yield_slot`): before, only the largest
    was moved first and kept its slot, and at ``-j 2`` torch's worker sat idle while the other unpacked the
    remaining 4 GiB (py-spy: 25 % of the workers' samples in that wait; docs/bench-speed.md, "Tenth
    session: substituting the ML closure"). The rest, larger first where the references allow: in the plain
    dependency order a 245 MiB NAR (cuda_nvcc-tools, which triton and so torch wait for) came last of the
    ML closure and unpacked alone for 0.7 of 7.1 s, and by size alone its 9 KiB reference (cudart's stubs)
    still came late (docs/bench-speed.md, "Twelfth session: substitution"). Every other
    path comes after its references (a global dependency order, the paths ahead taken out), and so after
    every path that any path it waits on waits for (a path ahead's references among the rest come before
    the rest's paths that refer to it): it waits holding its slot, and the chain it waits on ends at a path
    that runs. So at most `jobs` plus the paths ahead are threads at once, whatever the closure's size (a
    thread for every waiting path would be a thread, a store connection and a lock per path).
    """
    if jobs < 2:
        return order, set()  # one at a time: each registers as soon as it is unpacked
    rank = {p: i for i, p in enumerate(order)}
    ahead = sorted(order, key=lambda p: (-by_path[p].info.nar_size, rank[p]))[: AHEAD_PER_JOB * jobs]
    taken = set(ahead)
    if refs_of is None:
        return ahead + [p for p in order if p not in taken], taken
    return ahead + _largest_ready_first(order, refs_of, {p: by_path[p].info.nar_size for p in order}, taken), taken


def _largest_ready_first(order: list[str], refs_of: Mapping[str, Sequence[str]], size: Mapping[str, int],
                         exclude: Iterable[str] = ()) -> list[str]:
    """The paths of `order` (a dependency order of `refs_of`) but `exclude`, again in a dependency order of
    all of `order` (`exclude` taken out after: a path still comes after what it waits on through them):
    of the paths whose references are all placed, the one with the largest weight next, a path's weight
    being the largest `size` of it and of every path not excluded that (transitively) refers to it, so a
    small reference of a large path goes as early as the large path could (ties: `size`, then `order`'s).
    Excluded paths are placed as soon as their references are. Kahn's algorithm with a heap;
    O(n log n + edges)."""
    import heapq

    excluded = set(exclude)
    rank = {p: i for i, p in enumerate(order)}
    missing = {p: 0 for p in order}
    users: dict[str, list[str]] = {p: [] for p in order}
    for p in order:
        for r in set(refs_of.get(p, ())):
            if r in rank and r != p:
                missing[p] += 1
                users[r].append(p)
    weight: dict[str, int] = {}
    for p in reversed(order):  # users come after their references in `order`: each weight is known when needed
        weight[p] = max([0 if p in excluded else size[p], *(weight[u] for u in users[p])])

    def key(p: str) -> tuple[int, int, int, str]:
        return (-(1 << 62), 0, rank[p], p) if p in excluded else (-weight[p], -size[p], rank[p], p)

    ready = [key(p) for p in order if not missing[p]]
    heapq.heapify(ready)
    out: list[str] = []
    placed = 0
    while ready:
        *_, p = heapq.heappop(ready)
        placed += 1
        if p not in excluded:
            out.append(p)
        for u in users[p]:
            missing[u] -= 1
            if not missing[u]:
                heapq.heappush(ready, key(u))
    if placed != len(order):  # a cycle: `order` would not exist (topological_order raised before)
        return [p for p in order if p not in excluded]
    return out


class _Threads:
    """`fn(item)` for each of `items` on up to `workers` threads, taken in order (first in, first out).

    What `concurrent.futures.ThreadPoolExecutor` gave here, without importing it (and `logging`
    with it: 8 ms of a substitution's start-up). `outcomes()` waits for every item and gives
    (result, exception or None) in the order of `items`; `stop()` lets no thread take another
    item and waits for those running (after an interrupt, say). An item about to wait on something
    other than the CPU (another item) calls `yield_slot()`: a new thread takes the next item, and the
    caller's thread ends with its item, so `workers` threads at most take items *and run*.
    """

    def __init__(self, fn: Callable[[Any], Any], items: Sequence[Any], workers: int, name: str,
                 on_skip: Callable[[Any], None] | None = None, *, start: bool = True) -> None:
        """`on_skip(item)` is called by `stop()` for every item no thread took, before it waits for the
        running ones: an item that waits on another (a NAR unpacked before its references, waiting for
        them to register) must be told that the other will never run, or `stop()` waits forever.
        With `start` False the threads start at `start()` (when `fn` needs this object first)."""
        self._fn, self._items, self._on_skip, self._name = fn, list(items), on_skip, name
        self._results: list[Any] = [None] * len(self._items)
        self._errors: list[BaseException | None] = [None] * len(self._items)
        self._next = 0
        self._stopped = False
        self._lock = threading.Lock()
        self._local = threading.local()
        self._threads = [self._thread() for _ in range(min(max(1, workers), len(self._items)))]
        self._started = False
        if start:
            self.start()

    def _thread(self) -> threading.Thread:
        return threading.Thread(target=self._work, name=f"{self._name}_{len(getattr(self, '_threads', ()))}", daemon=True)

    def start(self) -> None:
        """Start the workers (once; `__init__` does unless told not to)."""
        with self._lock:
            if self._started:
                return
            self._started = True
            threads = list(self._threads)
        for thread in threads:
            thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if self._stopped or self._next >= len(self._items):
                    return
                index = self._next
                self._next += 1
            self._local.yielded = False
            try:
                self._results[index] = self._fn(self._items[index])
            except BaseException as error:  # handed to whoever reads the outcomes
                self._errors[index] = error
            if self._local.yielded:
                return  # the thread started in its place goes on with the items

    def yield_slot(self) -> None:
        """Called by `fn` on a worker thread before it blocks on another item: a new thread takes the next
        item (if any is left) and this thread ends after its current item. Once per item; a no-op elsewhere."""
        if getattr(self._local, "yielded", True):
            return  # not on a worker thread running an item, or yielded already
        self._local.yielded = True
        with self._lock:
            if self._stopped or self._next >= len(self._items):
                return
            thread = self._thread()
            self._threads.append(thread)
            thread.start()

    def _join_all(self) -> None:
        # Threads are appended (by `yield_slot`) only by a live thread of the list, before it ends: once the
        # loop reaches the end of the list, every thread of it has ended and none can be added.
        i = 0
        while i < len(self._threads):
            if self._threads[i].ident is not None:  # started (a pool never started has nothing to join)
                self._threads[i].join()
            i += 1

    def outcomes(self, *, raising: bool = False) -> list[Any]:
        """(result, error) per item, in order, once all are done; with `raising`, the results, raising the first error."""
        try:
            self._join_all()
        finally:
            self.stop()
        if raising:
            for error in self._errors:
                if error is not None:
                    raise error
            return list(self._results)
        return list(zip(self._results, self._errors))

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            skipped = self._items[self._next:]
            self._next = len(self._items)
        if self._on_skip is not None:
            for item in skipped:
                self._on_skip(item)
        self._join_all()


def default_jobs(cache: Cache) -> int:
    """How many paths to substitute at once from `cache` when the user did not say: 4, but from a local
    directory (file://: no waiting on a network, each job all CPU) no more than the CPUs this process may
    use, and 1 while other work keeps the CPUs busy (`cpu_contended`), at least 1.

    On 2 cores, `-j 4` from file:// took more CPU than `-j 2` (the CUDA compile closure: 2.36 s against
    2.18 s, medians of 4) and more memory (34.7 against 30.3 MiB peak RSS), and no less wall time. On
    the same 2 cores at a load of 4-7 from other processes, `-j 1` took less CPU *and* less wall time than
    `-j 2` in three A/Bs (1.65, 1.82, 2.13 s against 2.04, 2.01, 2.34 s of CPU; 2.68, 2.08, 3.24 s against
    2.97, 2.47, 3.55 s of wall; medians of 6): the likely cause is that two threads of one Python process hand
    each other the GIL at every zstd read, hash update and write, and under load each hand-off waits for
    the woken thread to get a CPU. With the machine idle `-j 2` took two thirds of the wall time of `-j 1`
    (1.08 s against 1.72 s) for 4 % more CPU. docs/binary-caches.md, "Third round".
    """
    if getattr(cache, "local_dir", None) is None:
        return 4
    return _usable_cpus_unless_busy()


def compress_workers() -> int:
    """How many zstd frames `copy --to` compresses at once: the CPUs this process may use (at most 4), and 1
    while other work keeps the CPUs busy (`cpu_contended`: there a second thread mostly waits for a CPU).

    On this machine's 2 cores, cuda_nvcc's 244 MiB NAR took 0.63 s of wall with two (1.08 CPU-s) against
    0.97 s with one (0.97 CPU-s), in process at load 2.7 (docs/binary-caches.md, "`copy --to`").
    """
    return _usable_cpus_unless_busy()


def _usable_cpus_unless_busy(most: int = 4) -> int:
    """The CPUs this process may use (its affinity; at most `most`), or 1 while other work keeps them busy."""
    import os

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    if usable > 1 and cpu_contended():
        return 1
    return max(1, min(most, usable))


#: Linux's CPU pressure (PSI, 4.20+): ``some avg10=`` is the share (per cent) of the last 10 s in which some
#: runnable task waited for a CPU. Absent (no PSI, not Linux): `SCHEDSTAT` alone decides.
CPU_PRESSURE = "/proc/pressure/cpu"
#: From this 10-s CPU pressure (per cent) the CPUs are taken as busy with other work.
CONTENDED_PRESSURE = 30.0
#: Linux's scheduler statistics of the calling thread: nanoseconds on a CPU, nanoseconds runnable but
#: waiting for one, time slices. Absent (not Linux, no schedstats): nothing is assumed from it.
SCHEDSTAT = "/proc/thread-self/schedstat"
#: From this share of its runnable time spent waiting for a CPU, the CPUs are taken as busy with other work.
CONTENDED_SHARE = 0.25
#: Less runnable time than this (nanoseconds) says too little: nothing is assumed.
_SHORTEST_NS = 20_000_000


def cpu_pressure(pressure: str | None = None) -> float | None:
    """The ``some avg10=`` per cent of `pressure` (default `CPU_PRESSURE`; at most 4 KiB read), or None when
    it is absent, unreadable or not in that form (a value outside 0-100 included)."""
    try:
        with open(pressure or CPU_PRESSURE, "rb") as f:
            text = f.read(4096)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(b"some "):
            for field in line.split()[1:]:
                if field.startswith(b"avg10="):
                    try:
                        value = float(field[6:])
                    except ValueError:
                        return None
                    return value if 0.0 <= value <= 100.0 else None  # NaN fails too
    return None


def cpu_contended(schedstat: str | None = None, pressure: str | None = None) -> bool:
    """Whether other work keeps the CPUs busy: the 10-s CPU pressure is at least `CONTENDED_PRESSURE` %, or
    the calling thread spent at least `CONTENDED_SHARE` of its runnable time waiting for a CPU.

    `pressure` defaults to `CPU_PRESSURE`, `schedstat` to `SCHEDSTAT` (at most 4 KiB read of each); for the
    `copy` command the thread's time is its start-up and the narinfo queries (70-170 ms runnable), which
    says little (0-17 % in runs at pressures of 7-57 %, 29-68 % in a few), so the pressure decides most
    often. On the 2-core machine of docs/binary-caches.md ("Third round"), at pressures of 36-57 % one
    job took 12 % less CPU and 6 % less wall time than two; at 7-25 % two jobs took 15 % less wall time
    (16 % more CPU). The 10-s average lags: for a few seconds after a load has gone it still reads high
    (one job then, where two would have been faster). A file that is absent, unreadable or not in its
    form says nothing; a thread runnable for under 20 ms says nothing.
    """
    avg10 = cpu_pressure(pressure)
    if avg10 is not None and avg10 >= CONTENDED_PRESSURE:
        return True
    try:
        with open(schedstat or SCHEDSTAT, "rb") as f:
            fields = f.read(4096).split()
    except OSError:
        return False
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        return False
    running, waiting = int(fields[0]), int(fields[1])
    if running + waiting < _SHORTEST_NS:
        return False
    return waiting >= CONTENDED_SHARE * (running + waiting)


def _topological(refs_of: dict[str, list[str]]) -> list[str]:
    """The keys of `refs_of` with every path after the paths it refers to (among the keys).

    Raises `ReferenceCycleError` when they refer to each other in a cycle (`cycles.topological_order`).
    """
    return topological_order(refs_of)


def _get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    try:
        return config[key]
    except (KeyError, TypeError):
        return getattr(config, key, default)
