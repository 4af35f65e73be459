"""Fetch and unpack the sources of builds ahead of time, while their inputs are built.

A redist build's first phases (fetch, unpack, with every check: the source's sha256 or
the wheel's recorded hash, each file against the wheel's RECORD, confinement) do not
depend on its inputs; only what follows does (nvcc's profile, run paths, references).
So while ``cuda_nvcc`` waits for ``libnvvm`` and ``cuda_cccl``, its wheel is unpacked
already, as ``uv`` unpacks every wheel at once. The scheduler (`scheduler.run`) starts an
`UnpackAhead` with the builds that cannot start at once; a build asks for its tree with
`UnpackAhead.take`:

* already unpacked: the builder renames the tree into its stage (`redist_source.Prepared`);
* still unpacking: the build waits for it;
* not started yet, or failed: None; the builder fetches and unpacks itself (a failure is
  then reported by the build, in its log, exactly as without unpacking ahead).

Only sources already on this machine (download cache, wheel cache, local mirror) are
unpacked ahead: a download is shown by the build that needs it. At most ``limit`` trees
are unpacked and not yet taken at any time, so a long build list does not fill the disk
ahead of the builds. Unpacked trees live in locked work directories of the store's
temporary area: `close` removes the ones never taken, and a killed process leaves them
to the next build or gc (`Store._clean_tmp`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..derivation import Derivation

__all__ = ["UnpackAhead"]


class UnpackAhead:
    """Unpack the sources of `derivations` (redist builds) on `workers` threads, in the order given.

    `fetchers_of(drv)` gives the fetchers a build of ``drv`` tries; `prepare_of(drv)` the function
    that does the work (default `redist_source.prepare`; a rewired wheel's: `install_ahead.prepare`). Thread-safe: `take` is
    called by the build workers, `close` by the scheduler once every build is done.
    """

    def __init__(self, store: Any, derivations: Sequence[Derivation], fetchers_of: Any, *,
                 workers: int = 1, limit: int | None = None, prepare_of: Any = None) -> None:
        from . import redist_source

        # drv -> the function doing its work ahead (drv, store, fetchers) -> an object with close()
        self._prepare_of = prepare_of or (lambda drv: redist_source.prepare)
        self._store = store
        self._fetchers_of = fetchers_of
        from ..store import reuse

        # Outputs the store can put back from what it verified before (`cudapkgs.store.reuse`)
        # need no source; their builds fall back to unpacking themselves if that fails.
        self._queue: deque[Derivation] = deque(
            d for d in derivations if not reuse.is_reusable(store.db, d.outputs.values()))
        self._futures: dict[str, Future[Any]] = {}
        self._needed: dict[str, threading.Event] = {}  # set once a build waits for the source
        self._outstanding = 0  # submitted and not yet taken (or given up)
        self._limit = limit if limit is not None else 2 * workers + 2
        self._lock = threading.Lock()
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="cudapkgs-unpack")
        with self._lock:
            self._pump()

    def _pump(self) -> None:
        # Called with the lock held.
        while self._queue and self._outstanding < self._limit and not self._closed:
            drv = self._queue.popleft()
            needed = threading.Event()
            self._needed[drv.drv_path] = needed
            self._futures[drv.drv_path] = self._pool.submit(self._prepare_ahead, drv, needed)
            self._outstanding += 1

    def _prepare_ahead(self, drv: Derivation, needed: threading.Event) -> Any:
        # A wheel's members unpacked ahead yield to those of a wheel a build waits for now, until
        # `take` says this one is waited for too (`wheel_unpack.unpacking_ahead`).
        from ..fetch.wheel_unpack import unpacking_ahead

        with unpacking_ahead(needed):
            return self._prepare_of(drv)(drv, self._store, self._fetchers_of(drv))

    def take(self, drv: Derivation) -> Any:
        """The `redist_source.Prepared` source of `drv` (waiting while it unpacks), or None: then build it from scratch."""
        with self._lock:
            future = self._futures.pop(drv.drv_path, None)
            needed = self._needed.pop(drv.drv_path, None)
            if needed is not None:
                needed.set()  # its members go before those unpacked ahead of need
            if future is None:
                self._queue = deque(d for d in self._queue if d.drv_path != drv.drv_path)  # built before its turn
                return None
            if future.cancel():  # not started: the build does it itself, now
                self._outstanding -= 1
                self._pump()
                return None
        try:
            return future.result()
        except Exception:  # the build tries again, and its log says why it fails
            return None
        finally:
            with self._lock:
                self._outstanding -= 1
                self._pump()

    def cancel_pending(self) -> None:
        """Unpack nothing more (a build failed: the builds that would use it will not run)."""
        with self._lock:
            self._queue.clear()
            for future in self._futures.values():
                future.cancel()

    def close(self) -> None:
        """Stop, wait for unpacks under way, and remove every tree not taken."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            futures = list(self._futures.values())
            self._futures.clear()
        for future in futures:
            future.cancel()
        self._pool.shutdown(wait=True)
        for future in futures:
            if future.cancelled() or future.exception() is not None:
                continue
            future.result().close()
