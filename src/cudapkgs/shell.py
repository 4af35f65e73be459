"""Development environments: the variables a build sees, for packages already in the store.

`cudapkgs shell` hands its packages (every output of each) to
`cudapkgs.build_inputs.setup_environment` as both native and host inputs, as
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

from .build_inputs import find_inputs, setup_environment

__all__ = ["export_lines", "propagated_closure", "shell_environment"]


def propagated_closure(paths: Iterable[str]) -> list[str]:
    """`paths` and, transitively, what they propagate, in first-seen order."""
    return find_inputs([], paths).host


# Programs of a CUDA toolkit: a PATH directory outside the shell's packages holding one of
# them is a host CUDA installation, which must not stand in for a package the shell lacks.
HOST_CUDA_TOOLS = ("nvcc", "ptxas", "cuobjdump", "nvdisasm", "fatbinary", "nvlink", "cuda-gdb", "nvprune", "cu++filt")

# Variables pointing at a toolkit; inherited values are dropped (the shell sets its own).
CUDA_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "CUDAToolkit_ROOT", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR")


def host_cuda_dirs(path_value: str, closure: Iterable[str] = ()) -> list[str]:
    """Entries of ``path_value`` (a PATH) outside ``closure`` that hold a CUDA toolkit program."""
    inside = tuple(p.rstrip("/") + "/" for p in closure)
    found = []
    for entry in path_value.split(os.pathsep):
        if not entry or (entry.rstrip("/") + "/").startswith(inside):
            continue
        if any(os.path.isfile(os.path.join(entry, tool)) for tool in HOST_CUDA_TOOLS):
            found.append(entry)
    return list(dict.fromkeys(found))


def shell_environment(
    paths: Iterable[str],
    base: Mapping[str, str] = os.environ,
    *,
    store_dir: str | None = None,
    driver_dir: str | None = None,
) -> dict[str, str]:
    """The environment of a shell with `paths` (store paths) and what they propagate.

    A host CUDA installation never shows through: PATH entries outside the packages that
    hold CUDA toolkit programs (`host_cuda_dirs`) are removed, and inherited CUDA_HOME,
    CUDA_PATH, CUDACXX, CUDAToolkit_ROOT, ... are dropped, so that a shell for CUDA 12.8
    without nvcc has no nvcc rather than the host's CUDA 13 one.  `store_dir` (default:
    the first path's directory) is where the cc wrapper adds run paths from;
    `driver_dir` replaces a stubs directory in them.
    """
    paths = list(paths)
    if store_dir is None and paths:
        store_dir = os.path.dirname(paths[0].rstrip("/"))
    closure = propagated_closure(paths)
    hidden = set(host_cuda_dirs(base.get("PATH", ""), closure))
    clean = {k: v for k, v in base.items() if k not in CUDA_VARIABLES}
    if "PATH" in clean:
        clean["PATH"] = os.pathsep.join(e for e in clean["PATH"].split(os.pathsep) if e and e not in hidden)
    env = setup_environment(paths, paths, base=clean, store_dir=store_dir, driver_dir=driver_dir)
    env["CUDAPKGS_SHELL"] = " ".join(closure)
    return env


def export_lines(env: Mapping[str, str], base: Mapping[str, str] = os.environ) -> str:
    """`export NAME='value'` for every variable that differs from `base` (for eval / direnv)."""
    return "".join(
        f"export {name}={shlex.quote(value)}\n" for name, value in sorted(env.items()) if base.get(name) != value
    )
