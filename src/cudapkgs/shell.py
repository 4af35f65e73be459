"""Development environments: the variables a build sees, for packages already in the store.

What Nixpkgs' setup hooks do inside a derivation build, done once for a shell: every
output of the requested packages, and everything they list in
`nix-support/propagated-build-inputs` (cuda_cudart brings its include, lib, static
and stubs outputs and nvcc's headers), contributes its `bin` to PATH, `include` to
CPATH, `lib`/`lib64` to LIBRARY_PATH (link time only: programs find their libraries
through RUNPATH, never LD_LIBRARY_PATH), its pkg-config directories, and, when marked
`nix-support/include-in-cudatoolkit-root`, a place in CMake's `CUDAToolkit_ROOT`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

SEARCH_PATHS = {
    "PATH": ("bin",),
    "CPATH": ("include",),
    "LIBRARY_PATH": ("lib", "lib64", "lib/stubs"),
    "PKG_CONFIG_PATH": ("lib/pkgconfig", "share/pkgconfig"),
}


def propagated_closure(paths: Iterable[str]) -> list[str]:
    """`paths` and, transitively, what they propagate, in first-seen order."""
    order: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(list(paths)))
    while stack:
        path = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        order.append(path)
        listed = Path(path, "nix-support", "propagated-build-inputs")
        if listed.is_file():
            stack.extend(reversed(listed.read_text().split()))
    return order


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


def shell_environment(paths: Iterable[str], base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment of a shell with `paths` (store paths) and what they propagate.

    A host CUDA installation never shows through: PATH entries outside the packages that
    hold CUDA toolkit programs (`host_cuda_dirs`) are removed, and inherited CUDA_HOME,
    CUDA_PATH, CUDACXX, CUDAToolkit_ROOT, ... are dropped, so that a shell for CUDA 12.8
    without nvcc has no nvcc rather than the host's CUDA 13 one.
    """
    closure = propagated_closure(paths)
    env = dict(base)
    hidden = set(host_cuda_dirs(base.get("PATH", ""), closure))
    for name in CUDA_VARIABLES:
        env.pop(name, None)
    for variable, subdirs in SEARCH_PATHS.items():
        found = [os.path.join(p, d) for p in closure for d in subdirs if os.path.isdir(os.path.join(p, d))]
        inherited = [entry for entry in base.get(variable, "").split(os.pathsep) if entry and entry not in hidden]
        if found or inherited:
            env[variable] = os.pathsep.join(dict.fromkeys(found + inherited))
        elif variable in env:
            env[variable] = ""
    roots = [p for p in closure if os.path.exists(os.path.join(p, "nix-support", "include-in-cudatoolkit-root"))]
    if roots:
        env["CUDAToolkit_ROOT"] = ";".join(roots)  # a CMake list
    nvcc = next((p for p in closure if os.path.isfile(os.path.join(p, "bin", "nvcc"))), None)
    if nvcc is not None:
        env["CUDA_HOME"] = env["CUDA_PATH"] = nvcc
        env["CUDACXX"] = os.path.join(nvcc, "bin", "nvcc")
    env["CUDAPKGS_SHELL"] = " ".join(closure)
    return env


def export_lines(env: Mapping[str, str], base: Mapping[str, str] = os.environ) -> str:
    """`export NAME='value'` for every variable that differs from `base` (for eval / direnv)."""
    import shlex

    return "".join(
        f"export {name}={shlex.quote(value)}\n" for name, value in sorted(env.items()) if base.get(name) != value
    )
