"""Parallel realisation: plan what is missing (`cudapkgs.realise.planning`), then build it with N
workers, dependencies first.

`run` executes a plan on a thread pool: a derivation starts once every
derivation it depends on has been built. After a failure nothing new starts,
running builds finish, and every failure is reported together.

Progress goes through the small `Progress` interface (`NullProgress` by default); the
command line's displays (`cudapkgs.cli.progress`) implement it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from ..derivation import Derivation
from ..table import format_size
from .errors import BuildError
from .planning import Fetch, Plan, plan
from .realise import build_one, log_path, protect_inputs
from .errors import BuildFailed

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = [
    "BuildFailed",
    "Fetch",
    "NullProgress",
    "Plan",
    "Progress",
    "plan",
    "realise_parallel",
    "run",
]


# -- progress ---------------------------------------------------------------


class Progress(Protocol):
    """What the scheduler reports; called from worker threads, so implementations lock."""

    def begin(self, plan: Plan, jobs: int) -> None: ...

    def started(self, drv: Derivation) -> None: ...

    def download(self, drv: Derivation, done: int, total: int | None) -> None: ...

    def step(self, drv: Derivation, name: str) -> None: ...

    def finished(self, drv: Derivation, error: BaseException | None) -> None: ...

    def end(self) -> None: ...


class NullProgress:
    """Reports nothing."""

    def begin(self, plan: Plan, jobs: int) -> None:
        pass

    def started(self, drv: Derivation) -> None:
        pass

    def download(self, drv: Derivation, done: int, total: int | None) -> None:
        pass

    def step(self, drv: Derivation, name: str) -> None:
        pass

    def finished(self, drv: Derivation, error: BaseException | None) -> None:
        pass

    def end(self) -> None:
        pass


# -- running ------------------------------------------------------------------


def run(
    store: Any,
    the_plan: Plan,
    *,
    jobs: int = 1,
    keep_failed: bool = False,
    progress: Progress | None = None,
    fetchers: Sequence[str] | None = None,
    substituters: Any = None,
    stream: TextIO | None = None,
    builders: Any = None,
) -> list[str]:
    """Substitute `the_plan.to_substitute`, then build `the_plan.to_build` with `jobs` workers.

    Returns the output paths built. A path that cannot be substituted (cache down,
    damaged or refused NAR) is reported in one line on `stream` (stderr), and what
    is still missing is planned again and built. Raises `BuildFailed` naming every
    failed build (and its log) once the running ones are done.

    With `builders` (a `dask_executor.DaskBuilders`) the builds run on that Dask
    cluster instead of here, and their outputs are substituted from its cache.
    """
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    if the_plan.to_substitute:
        the_plan = _substitute(store, the_plan, substituters, jobs, stream or sys.stderr)
    todo = the_plan.to_build
    if not todo:
        return []
    from .realise import fetchers_for

    skip = the_plan.skipped_fetchers
    if builders is not None:
        from .dask_executor import run_on_dask

        run_on_dask(store, todo, builders, stream=stream or sys.stderr)
        built = [p for drv in todo for p in drv.outputs.values()]
        store.add_temp_roots(built)
        return built
    # Imported here: a no-op build never needs them.
    import traceback
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from ..builders import python_bytecode

    # This run's stop signal, bound in each of its threads: set on the way out, it stops this run's
    # compilations only (not another run's in this process, nor a later build's).
    stop = threading.Event()

    progress = progress or NullProgress()
    by_path = {d.drv_path: d for d in todo}
    waiting_on = {d.drv_path: {dep.drv_path for dep in d.deps if dep.drv_path in by_path} for d in todo}
    dependents: dict[str, list[str]] = {p: [] for p in by_path}
    for path, deps in waiting_on.items():
        for dep in deps:
            dependents[dep].append(path)

    root = store.root
    local = threading.local()
    opened: list[Any] = []
    opened_lock = threading.Lock()

    def worker_store() -> Any:
        # A store (so an SQLite connection) per worker: transactions on one shared connection would interleave.
        if not hasattr(local, "store"):
            from ..store.store import Store

            local.store = Store.open(root)
            with opened_lock:
                opened.append(local.store)
        return local.store

    def build(drv: Derivation) -> list[str]:
        python_bytecode.bind_stop(stop)
        progress.started(drv)
        try:
            paths = build_one(
                worker_store(), drv, keep_failed=keep_failed, fetchers=fetchers_for(drv, fetchers, skip),
                on_download=lambda done, total: progress.download(drv, done, total),
                on_step=lambda name: progress.step(drv, name),
                prepared=ahead.take if ahead is not None else None,
            )
        except BuildError as error:
            _append_log(store, drv, f"error: {error}\n")
            progress.finished(drv, error)
            raise
        except Exception as error:  # a builder bug: the traceback goes to the log, one line to the user
            _append_log(store, drv, traceback.format_exc())
            failure = BuildError(f"building {drv.name} failed: {type(error).__name__}: {error} (log: {log_path(store, drv)})")
            progress.finished(drv, failure)
            raise failure from error
        progress.finished(drv, None)
        return paths

    built: list[str] = []
    succeeded = 0
    failures: list[BuildError] = []
    running: dict[Future[list[str]], Derivation] = {}
    # The ready build at the head of the longest chain of work starts first (`priorities`).
    from .priorities import priorities

    rank = priorities(todo, the_plan.to_fetch)
    order = {d.drv_path: i for i, d in enumerate(sorted(todo, key=lambda d: -rank[d.drv_path]))}
    ready = sorted((d for d in todo if not waiting_on[d.drv_path]), key=lambda d: order[d.drv_path])
    progress.begin(the_plan, jobs)
    ahead: Any = None
    pool: Any = None
    try:
        # Inside the try: a Ctrl-C once the work ahead has started stops and closes it too.
        ahead = _unpack_ahead(store, the_plan, ready[:jobs], jobs, fetchers, order, stop)
        pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="cudapkgs-build")
        while ready or running:
            if failures and ahead is not None:
                ahead.cancel_pending()
            # No more than `jobs` submitted: a build queued in the pool would keep its place
            # ahead of a higher-priority one that becomes ready later.
            while ready and not failures and len(running) < jobs:
                drv = ready.pop(0)
                running[pool.submit(build, drv)] = drv
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: running[f].drv_path):
                drv = running.pop(future)
                error = future.exception()
                if error is not None:
                    failures.append(error if isinstance(error, BuildError) else BuildError(str(error)))
                    continue
                built.extend(future.result())
                succeeded += 1
                for path in dependents[drv.drv_path]:
                    waiting_on[path].discard(drv.drv_path)
                    if not waiting_on[path]:
                        ready.append(by_path[path])
                ready.sort(key=lambda d: order[d.drv_path])
    except BaseException:
        # Ctrl-C (or another way out): compilations under way in the workers (threads no
        # KeyboardInterrupt reaches) stop now, not when they are done; later ones do not start.
        stop.set()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if ahead is not None:
            ahead.cancel_pending()
        raise
    finally:
        progress.end()
        if ahead is not None:
            ahead.close()  # waits for unpacks under way; removes the trees no build took
    pool.shutdown(wait=True)
    if built:  # taken over from the workers' stores before they close (and drop theirs)
        store.add_temp_roots(built)
    for opened_store in opened:
        opened_store.close()
    if failures:
        raise BuildFailed(failures, skipped=len(todo) - succeeded - len(failures))
    return built


def _unpack_ahead(store: Any, the_plan: Plan, starting: Sequence[Derivation], jobs: int,
                  fetchers: Sequence[str] | None, order: dict[str, int] | None = None,
                  stop: threading.Event | None = None) -> Any:
    """An `UnpackAhead` for the builds that do not start at once: redist builds whose source is on this
    machine, and rewired wheels in the wheel cache (their install and byte code: `install_ahead`).

    The largest first (`priorities.work_estimate`), ties in the order builds start (`order`:
    drv_path -> rank, else the plan's); `jobs` threads
    (they share the cores with the builds: unpacking is mostly inflating and hashing, which
    release the GIL). None when there is nothing to unpack ahead. `stop`: the run's stop signal, bound
    in these threads too (`python_bytecode.bind_stop`: a byte compilation ahead stops with the run).
    """
    from .realise import fetchers_for

    from . import install_ahead, redist_source

    started = {d.drv_path for d in starting}
    local = {f.drv.drv_path for f in the_plan.to_fetch if f.cached}
    later = [d for d in the_plan.to_build if d.drv_path not in started
             and ((d.builder == "buildRedist" and d.drv_path in local) or install_ahead.eligible(d))]
    if order is not None:
        later.sort(key=lambda d: order.get(d.drv_path, len(order)))
    # The largest work first (ties in start order): torch's install (a 555 MB wheel, 14 s of CPU
    # with its byte code) is needed last, but queued last it was still under way when its
    # inputs were done, and the build waited 12 s for it.
    from .priorities import work_estimate

    fetches: dict[str, list[Any]] = {}
    for fetch in the_plan.to_fetch:
        fetches.setdefault(fetch.drv.drv_path, []).append(fetch)
    later.sort(key=lambda d: -work_estimate(d, fetches.get(d.drv_path, ())))
    if not later:
        return None
    from .unpack_ahead import UnpackAhead

    from ..builders import python_bytecode

    def install(drv: Derivation, *args: Any, **kwargs: Any) -> Any:
        python_bytecode.bind_stop(stop)
        return install_ahead.prepare(drv, *args, **kwargs)

    skip = the_plan.skipped_fetchers
    return UnpackAhead(store, later, lambda drv: fetchers_for(drv, fetchers, skip), workers=jobs,
                       prepare_of=lambda drv: redist_source.prepare if drv.builder == "buildRedist" else install)


def _substitute(store: Any, the_plan: Plan, substituters: Any, jobs: int, stream: TextIO) -> Plan:
    from ..store.caches.substitution import PlainSubstituteProgress, SubstituteFailed

    subs = the_plan.to_substitute
    if substituters is None:
        raise ValueError("a plan with paths to substitute needs the Substituters that made it (their trusted keys)")
    fetcher = substituters
    caches = sorted({s.cache.url for s in subs})
    stream.write(
        f"substituting {len(subs)} path(s) ({format_size(the_plan.substitute_download_size)} download, "
        f"{format_size(the_plan.substitute_nar_size)} unpacked) from {', '.join(caches)}\n"
    )
    try:
        progress = PlainSubstituteProgress(stream, len(subs), the_plan.substitute_download_size)
        fetcher.fetch(store, subs, jobs=min(max(jobs, 1), 8), progress=progress)
        stream.write(progress.summary() + "\n")
    except SubstituteFailed as error:
        stream.write(f"warning: {len(error.failures)} path(s) could not be substituted; building what is missing instead\n")
        stream.flush()
        return plan(store, the_plan.roots)
    protect_inputs(store, the_plan.roots)  # the substituted paths, until the outputs are linked
    return Plan(the_plan.roots, the_plan.to_build, the_plan.to_fetch, (), the_plan.skipped)


def realise_parallel(store: Any, derivations: Iterable[Derivation], **options: Any) -> list[str]:
    """`realise` with workers: plan, run, and return the output paths of `derivations`."""
    roots = list(derivations)
    run(store, plan(store, roots), **options)
    return [p for drv in roots for p in drv.outputs.values()]


def _append_log(store: Any, drv: Derivation, text: str) -> None:
    try:
        path = log_path(store, drv)
        path.parent.mkdir(parents=True, exist_ok=True)
        from ..atomic_files import open_kept

        with open_kept(path, append=True) as log:
            log.write(text.encode())
    except OSError:
        pass
