"""What a builder gets: the derivation, a work directory, a log, fetchers, the store.

A builder is a function `build(drv, ctx, outputs)` that must create every directory
in `outputs` (output name -> temporary directory). It runs in a fresh work
directory and writes what it does to `ctx.log`; the scheduler registers the
outputs in the store afterwards, all together, and only if the builder returned.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any, TextIO

from ..derivation import Derivation
from ..errors import CudapkgsError

# (bytes done, bytes total or None) for downloads; a step name for build phases.
DownloadProgress = Callable[[int, "int | None"], None]


class BuildContext:
    """The environment of one build: the store, the work directory, the log, the fetchers, progress
    callbacks and ``extra`` (a dict for builders).  A plain class, not a dataclass: dataclasses cost
    a build's start-up 10 ms (docs/bench-speed.md)."""

    store: Any  # cudapkgs.store.store.Store
    work_dir: Path
    log: TextIO
    fetchers: tuple[str, ...]
    on_download: DownloadProgress | None
    on_step: Callable[[str], None] | None
    extra: dict[str, Any]

    def __init__(self, store: Any, work_dir: Path, log: TextIO, fetchers: tuple[str, ...] = ("redist", "wheels"),
                 on_download: DownloadProgress | None = None, on_step: Callable[[str], None] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.store, self.work_dir, self.log, self.fetchers = store, work_dir, log, fetchers
        self.on_download, self.on_step = on_download, on_step
        self.extra = {} if extra is None else extra

    def __repr__(self) -> str:
        return f"BuildContext(work_dir={self.work_dir!r}, fetchers={self.fetchers!r})"

    def step(self, name: str) -> None:
        """Announce a build step (phase) to the log and the progress display."""
        self.log.write(f"@ {name}\n")
        self.log.flush()
        if self.on_step is not None:
            self.on_step(name)


Builder = Callable[[Derivation, BuildContext, Mapping[str, Path]], None]

# builder name (Derivation.builder) -> "module:function", imported on first use
BUILDERS: dict[str, str] = {
    "buildRedist": "cudapkgs.realise.redist:build",
    "mkDerivation": "cudapkgs.realise.generic:build",
    "fetchurl": "cudapkgs.fetch.fetchurl:build",
    "fetchFromGitHub": "cudapkgs.fetch.github:build",
    "fetchzip": "cudapkgs.fetch.fetchzip:build",
    "fetchPypi": "cudapkgs.fetch.pypi:build",
    "fetchFromGitHubOrSdist": "cudapkgs.fetch.github_or_sdist:build",
}


def builder_for(drv: Derivation) -> Builder:
    """The builder function a derivation names."""
    try:
        target = BUILDERS[drv.builder]
    except KeyError:
        raise CudapkgsError(f"{drv.name}: unknown builder {drv.builder!r} (known: {', '.join(BUILDERS)})") from None
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)
