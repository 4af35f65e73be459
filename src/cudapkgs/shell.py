"""Development environments: the variables a build sees, for packages already in the store.

`cudapkgs shell` hands its packages (every output of each) to
`cudapkgs.inputs.setup_environment` as both native and host inputs, as
``nix-shell -p`` does, together with stdenv.cc (the host compiler in its
cc-wrapper): the same function a build's environment comes from.  So PATH,
CPATH, LIBRARY_PATH (link time only: programs find their libraries through the
RUNPATH the wrapper adds, never LD_LIBRARY_PATH), PKG_CONFIG_PATH,
CMAKE_PREFIX_PATH, CUDAToolkit_ROOT / CUDAToolkit_INCLUDE_DIR, CUDACXX,
CUDAHOSTCXX and NVCC_CCBIN are those of a build with these inputs.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping

from .inputs import find_inputs, setup_environment

__all__ = ["export_lines", "propagated_closure", "shell_environment"]


def propagated_closure(paths: Iterable[str]) -> list[str]:
    """`paths` and, transitively, what they propagate, in first-seen order."""
    return find_inputs([], paths).host


def shell_environment(
    paths: Iterable[str],
    base: Mapping[str, str] = os.environ,
    *,
    store_dir: str | None = None,
    driver_dir: str | None = None,
) -> dict[str, str]:
    """The environment of a shell with `paths` (store paths) and what they propagate.

    `store_dir` (default: the first path's directory) is where the cc wrapper
    adds run paths from; `driver_dir` replaces a stubs directory in them.
    """
    paths = list(paths)
    if store_dir is None and paths:
        store_dir = os.path.dirname(paths[0].rstrip("/"))
    env = setup_environment(paths, paths, base=base, store_dir=store_dir, driver_dir=driver_dir)
    env["CUDAPKGS_SHELL"] = " ".join(find_inputs(paths, paths).native)
    return env


def export_lines(env: Mapping[str, str], base: Mapping[str, str] = os.environ) -> str:
    """`export NAME='value'` for every variable that differs from `base` (for eval / direnv)."""
    return "".join(
        f"export {name}={shlex.quote(value)}\n" for name, value in sorted(env.items()) if base.get(name) != value
    )
