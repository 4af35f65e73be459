"""Which ready build to start first: the one at the head of the longest chain of work still to do.

A scheduler that starts ready builds in plan order lets a small package go before a large
one on which the last build waits: in torch's closure cuDNN (a 0.9 GB wheel) started after
twenty small builds, and torch, which needs it, waited for it with a core idle.  As a
list scheduler for a task graph does (critical path first, "HLFET": highest level first
with estimated times), each build gets a *priority*: its own expected work plus the
largest priority among the builds that wait for it.  The work of a build is estimated by
the bytes it unpacks and hashes (the size of its source on this machine: a cached wheel,
a pinned wheel, a fetched archive), with a floor for builds whose size is unknown; only
the order of builds changes, never what a build does or checks.

A Python package (buildPythonPackage's install, `cudapkgs.builders.python_install`) unpacks
little but compiles every module in separate processes: sympy's 6 MB wheel takes 8 s of CPU
for its 1,533 modules, as much as unpacking and hashing cuDNN's 537 MB.  Its source is usually
a wheel the run fetches first, of no size known when the order is made, so such a build counts
at least `PYTHON_PACKAGE` bytes: it starts beside the large unpacks (whose work is this
process's) instead of after the last of them, with torch waiting for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["FLOOR", "PYTHON_PACKAGE", "priorities", "work_estimate"]

FLOOR = 1 << 20  # bytes: a build with no known source size (a wrapper, a fetch)
PYTHON_PACKAGE = 256 << 20  # bytes: the least a Python package's build (its byte compilation) counts
_PYTHON_INSTALL = "cudapkgs.builders.python_install:install"


def _file_size(path: Any) -> int | None:
    try:
        return os.stat(path).st_size if path else None
    except (OSError, TypeError, ValueError):
        return None


def work_estimate(drv: Any, fetches: Iterable[Any] = ()) -> int:
    """Bytes of work `drv` is expected to do: the size of its source (a `scheduler.Fetch` of it
    in `fetches`: the cached file's size, else the chosen fetcher's, else the source's), of
    its pinned wheel in the wheel cache (``wheel = {file, sha256}``, a rewired wheel), at least
    `PYTHON_PACKAGE` for a Python package's build, or `FLOOR` when none is known.  Reads only file sizes (``stat``); never raises for a missing file.
    """
    best = 0
    for fetch in fetches:
        choice = getattr(fetch, "choice", None)
        size = _file_size(getattr(choice, "cached", None)) if choice is not None else None
        if size is None and choice is not None:
            size = choice.size
        if size is None:
            size = fetch.size
        best = max(best, size or 0)
    wheel = drv.attrs.get("wheel") if isinstance(drv.attrs, Mapping) else None
    if isinstance(wheel, Mapping) and isinstance(wheel.get("file"), str):
        from ..errors import CudapkgsError
        from ..fetch.pinned_wheels import cached_pinned_wheel, parse_pin

        try:
            best = max(best, _file_size(cached_pinned_wheel(parse_pin(dict(wheel)))) or 0)
        except (CudapkgsError, OSError):  # a malformed pin fails in the build itself, with its message
            pass
    install = drv.attrs.get("installPhase") if isinstance(drv.attrs, Mapping) else None
    if isinstance(install, Mapping) and install.get("python") == _PYTHON_INSTALL:
        best = max(best, PYTHON_PACKAGE)
    return max(best, FLOOR)


def priorities(todo: Sequence[Any], fetches: Iterable[Any] = ()) -> dict[str, int]:
    """drv_path -> priority for each derivation of `todo` (dependencies anywhere in the list):
    `work_estimate` of it plus the largest priority of the derivations in `todo` that depend on it.

    Higher starts first.  `fetches`: the plan's `scheduler.Fetch` entries (their ``drv`` names
    the build).  Raises nothing for a derivation with no fetch; a cycle cannot occur (derivations
    are content-addressed by their inputs).
    """
    by_path = {d.drv_path: d for d in todo}
    fetch_of: dict[str, list[Any]] = {}
    for fetch in fetches:
        fetch_of.setdefault(fetch.drv.drv_path, []).append(fetch)
    dependents: dict[str, list[str]] = {p: [] for p in by_path}
    for drv in todo:
        for dep in drv.deps:
            if dep.drv_path in by_path:
                dependents[dep.drv_path].append(drv.drv_path)
    result: dict[str, int] = {}

    def visit(path: str) -> int:  # iterative: a long chain must not hit the recursion limit
        stack = [path]
        while stack:
            top = stack[-1]
            if top in result:
                stack.pop()
                continue
            pending = [d for d in dependents[top] if d not in result]
            if pending:
                stack.extend(pending)
                continue
            own = work_estimate(by_path[top], fetch_of.get(top, ()))
            result[top] = own + max((result[d] for d in dependents[top]), default=0)
            stack.pop()
        return result[path]

    for path in by_path:
        visit(path)
    return result
