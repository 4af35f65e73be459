"""Development environments: the variables a build sees, for packages already in the store.

`cudapkgs shell` hands its packages (every output of each) to
`cudapkgs.build_inputs.setup_environment` as both native and host inputs, as
``nix-shell -p`` does, together with stdenv.cc (the host compiler in its
cc-wrapper): the same function a build's environment comes from.  So PATH,
CPATH, LIBRARY_PATH (link time only: programs find their libraries through the
RUNPATH the wrapper adds, never LD_LIBRARY_PATH), PKG_CONFIG_PATH,
CMAKE_PREFIX_PATH, CUDAToolkit_ROOT / CUDAToolkit_INCLUDE_DIR, CUDACXX,
CUDAHOSTCXX and NVCC_CCBIN are those of a build with these inputs.

Two store paths of its own (`prepare`) make the machine's tools work unchanged:

* **a joined CUDA toolkit root** (`hooks.cudatoolkit_root`) when nvcc is among the
  packages: cuda_nvcc's output, then every output marked for CUDAToolkit_ROOT
  (markForCudatoolkitRootHook), as one tree whose ``bin/nvcc`` reports the tree as its
  ``TOP``.  Its ``bin`` comes first on PATH and CUDAToolkit_ROOT, CUDA_HOME, CUDA_PATH
  and CUDACXX name it, so a plain ``cmake`` (FindCUDAToolkit, enable_language(CUDA))
  finds nvcc, ``cuda_runtime.h``, cudart and CUDA::cublas & co. where CMake 3.18 and
  later look.  Its ``lib`` is the last LIBRARY_PATH entry: the compiler's implicit link
  directory, so CMake adds no run path into the tree, and the cc wrapper gives each
  library its own output's directory.
* **host CUDA tools shadowed one by one**: each CUDA toolkit program (`HOST_CUDA_TOOLS`)
  found on the inherited PATH outside the packages, which the packages do not provide,
  gets a stand-in in a directory placed before the inherited PATH, that says it is not in
  this shell and exits 127; every other program of those directories stays reachable.
  So a shell for CUDA 12.8 without nvcc has no nvcc, rather than the host's CUDA 13 one,
  and docker, psql & co. beside it are still there.  Inherited CUDA_HOME, CUDA_PATH,
  CUDACXX, CUDAToolkit_ROOT, … are dropped.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .build_inputs import find_inputs, setup_environment
from .hooks.cudatoolkit_root import NVCC_WRAPPER, join_roots
from .hooks.mark_for_cudatoolkit_root import MARKER

__all__ = [
    "CudaSet", "HOST_CUDA_TOOLS", "ShellExtras", "cuda_set_variables", "cuda_sets_in", "export_lines",
    "host_cuda_dirs", "host_cuda_tools", "mixed_sets_message", "prepare", "propagated_closure",
    "shell_environment", "shell_root", "toolkit_roots", "torch_cmake_dir",
]


def propagated_closure(paths: Iterable[str]) -> list[str]:
    """`paths` and, transitively, what they propagate, in first-seen order."""
    return find_inputs([], paths).host


#: Programs of a CUDA toolkit and the set's package that provides each: one on the inherited
#: PATH outside the shell's packages is a host CUDA installation's, which must not stand in
#: for a package the shell lacks.
HOST_CUDA_TOOLS: dict[str, str] = {
    **{tool: "cuda_nvcc" for tool in ("nvcc", "ptxas", "fatbinary", "nvlink", "cudafe++", "bin2c",
                                      "__nvcc_device_query")},
    "cuobjdump": "cuda_cuobjdump", "nvdisasm": "cuda_nvdisasm", "cuda-gdb": "cuda_gdb",
    "nvprune": "cuda_nvprune", "cu++filt": "cuda_cuxxfilt", "compute-sanitizer": "cuda_sanitizer_api",
}

# Variables pointing at a toolkit; inherited values are dropped (the shell sets its own).
CUDA_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "CUDAToolkit_ROOT", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR")

_TOOLKIT_ROOT = "cuda-toolkit-root"
_SHADOW = "cuda-host-tools-hidden"
_SHELL_ENV = "shell-env"
_FORMAT = 1  # of the two trees below: part of their store paths' fingerprints


def _inside(entry: str, closure: Iterable[str]) -> bool:
    inside = tuple(p.rstrip("/") + "/" for p in closure)
    return (entry.rstrip("/") + "/").startswith(inside)


def host_cuda_tools(path_value: str, closure: Iterable[str] = ()) -> dict[str, str]:
    """tool -> its path, for each CUDA toolkit program (`HOST_CUDA_TOOLS`) found on ``path_value``
    (a PATH) outside ``closure``, where PATH lookup would find it (its first executable entry)."""
    closure = list(closure)
    found: dict[str, str] = {}
    for entry in path_value.split(os.pathsep):
        if not entry or _inside(entry, closure):
            continue
        for tool in HOST_CUDA_TOOLS:
            candidate = os.path.join(entry, tool)
            if tool not in found and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                found[tool] = candidate
    return found


def host_cuda_dirs(path_value: str, closure: Iterable[str] = ()) -> list[str]:
    """Entries of ``path_value`` (a PATH) outside ``closure`` that hold a CUDA toolkit program."""
    return list(dict.fromkeys(os.path.dirname(p) for p in host_cuda_tools(path_value, closure).values()))


def toolkit_roots(closure: Sequence[str]) -> list[str]:
    """What a joined toolkit root joins: cuda_nvcc's output (the first path of `closure` holding
    ``bin/nvcc``), then every output of `closure` marked for CUDAToolkit_ROOT
    (``nix-support/include-in-cudatoolkit-root``), in closure order; [] without nvcc
    (FindCUDAToolkit cannot use a toolkit without it)."""
    nvcc = next((p for p in closure if os.path.isfile(os.path.join(p, "bin", "nvcc"))), None)
    if nvcc is None:
        return []
    marked = [p for p in closure if p != nvcc and os.path.exists(os.path.join(p, MARKER))]
    return [nvcc, *marked]


@dataclass(frozen=True)
class ShellExtras:
    """The shell's own store paths (`prepare`): the joined toolkit root and the stand-ins'
    directory (either None when not needed), and the host tools the stand-ins hide."""

    toolkit_root: str | None = None
    shadow_dir: str | None = None
    hidden: Mapping[str, str] | None = None


def _fixed_path(store: Any, kind: str, fingerprint: str, name: str) -> str:
    from .store.paths import make_store_path

    return make_store_path(store.store_dir, "output:out", f"cudapkgs-{kind}:{_FORMAT}:{fingerprint}", name)


def _shadow_script(tool: str, host_path: str) -> str:
    message = (f"{tool}: not in this cudapkgs shell (the host's {host_path} is hidden so that it cannot stand in "
               f"for the set's; add {HOST_CUDA_TOOLS[tool]} to the packages)")
    return f"#!/bin/sh\necho {shlex.quote(message)} >&2\nexit 127\n"


def prepare(store: Any, paths: Sequence[str], base: Mapping[str, str] = os.environ, *,
            toolkit_root: bool = True) -> ShellExtras:
    """Make (or find) the shell's own store paths in `store` for `paths`; see the module docstring.
    `toolkit_root` False: only the stand-ins (`cudapkgs develop`, whose environment is the builder's).

    Both are input-addressed from what they are made of (the joined outputs; the hidden
    tools and their host paths), so entering the same shell again makes nothing.  Raises
    `StoreError` / `FixupError` when the store cannot take them.
    """
    closure = propagated_closure(paths)
    roots = toolkit_roots(closure) if toolkit_root else []
    root = None
    if roots:
        root = _fixed_path(store, "toolkit-root", f"{NVCC_WRAPPER}\n" + "\n".join(roots), _TOOLKIT_ROOT)
        store.add_path(root, lambda out: join_roots(out, roots), references_candidates=closure)
    provided = {tool for p in closure for tool in HOST_CUDA_TOOLS if os.path.isfile(os.path.join(p, "bin", tool))}
    hidden = {t: p for t, p in host_cuda_tools(base.get("PATH", ""), closure).items() if t not in provided}
    shadow = None
    if hidden:
        fingerprint = "\n".join(f"{t}={p}" for t, p in sorted(hidden.items()))
        shadow = _fixed_path(store, "hidden-tools", fingerprint, _SHADOW)

        def build(out: Any) -> None:
            os.makedirs(os.path.join(out, "bin"))
            for tool, host_path in hidden.items():
                script = os.path.join(out, "bin", tool)
                with open(script, "w", encoding="utf-8") as handle:
                    handle.write(_shadow_script(tool, host_path))
                os.chmod(script, 0o755)

        store.add_path(shadow, build)
    return ShellExtras(root, shadow, hidden)


def shell_environment(
    paths: Iterable[str],
    base: Mapping[str, str] = os.environ,
    *,
    store_dir: str | None = None,
    driver_dir: str | None = None,
    extras: ShellExtras | None = None,
    cuda_set: CudaSet | None = None,
    build_tree: str | None = None,
) -> dict[str, str]:
    """The environment of a shell with `paths` (store paths) and what they propagate.

    `base` is the inherited environment (its CUDA_HOME, CUDA_PATH, CUDACXX,
    CUDAToolkit_ROOT, … are dropped); `store_dir` (default: the first path's directory) is
    where the cc wrapper adds run paths from; `driver_dir` replaces a stubs directory in
    them; `extras` (from `prepare`) adds the joined toolkit root and the stand-ins for host
    CUDA tools (see the module docstring); `cuda_set` and torch in the closure add the variables
    of `cuda_set_variables`, and torch's CMake directory first on CMAKE_PREFIX_PATH; `build_tree` (the
    directory the shell starts in) is CUDAPKGS_BUILD_TREE, under which the cc wrapper keeps run paths
    a link asks for (`hooks.cc_wrapper`).  Nothing on the inherited PATH is removed.
    """
    paths = list(paths)
    if store_dir is None and paths:
        store_dir = os.path.dirname(paths[0].rstrip("/"))
    closure = propagated_closure(paths)
    clean = {k: v for k, v in base.items() if k not in CUDA_VARIABLES}
    env = setup_environment(paths, paths, base=clean, store_dir=store_dir, driver_dir=driver_dir)
    extras = extras or ShellExtras()
    entries = [e for e in env.get("PATH", "").split(os.pathsep) if e]
    own = [e for e in entries if _inside(e, closure)]
    rest = [e for e in entries if not _inside(e, closure)]
    front = [f"{extras.toolkit_root}/bin"] if extras.toolkit_root else []
    shadow = [f"{extras.shadow_dir}/bin"] if extras.shadow_dir else []
    env["PATH"] = os.pathsep.join(dict.fromkeys([*front, *own, *shadow, *rest]))
    if extras.toolkit_root:
        root = extras.toolkit_root
        env["CUDAToolkit_ROOT"] = env["CUDA_HOME"] = env["CUDA_PATH"] = root
        env["CUDAToolkit_INCLUDE_DIR"] = f"{root}/include"
        env["CUDACXX"] = f"{root}/bin/nvcc"
        if os.path.isdir(f"{root}/lib"):
            libs = [e for e in env.get("LIBRARY_PATH", "").split(os.pathsep) if e]
            env["LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys([*libs, f"{root}/lib"]))
    torch_cmake = torch_cmake_dir(closure)
    if torch_cmake is not None:
        prefixes = [e for e in env.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if e]
        env["CMAKE_PREFIX_PATH"] = os.pathsep.join(dict.fromkeys([torch_cmake, *prefixes]))
    env.update(cuda_set_variables(cuda_set, torch_cmake, clean))
    if build_tree and not clean.get("CUDAPKGS_BUILD_TREE"):
        env["CUDAPKGS_BUILD_TREE"] = build_tree
    env["CUDAPKGS_SHELL"] = " ".join(closure)
    return env


def shell_root(store: Any, paths: Sequence[str], extras: ShellExtras | None = None) -> str:
    """One store path that keeps the whole shell alive: ``nix-support/shell-paths`` lists `paths`, what
    they propagate and the shell's own paths (`extras`), so they are its references and a GC root
    to it (``cudapkgs shell --profile LINK``) keeps them and their closures, as ``nix develop
    --profile`` roots a shell's environment.  Input-addressed from that list: the same shell gives
    the same path.  Raises `StoreError` when the store cannot take it."""
    extras = extras or ShellExtras()
    keep = list(dict.fromkeys([*propagated_closure(paths),
                               *(p for p in (extras.toolkit_root, extras.shadow_dir) if p)]))
    path = _fixed_path(store, "shell-env", "\n".join(keep), _SHELL_ENV)

    def build(out: Any) -> None:
        os.makedirs(os.path.join(out, "nix-support"))
        with open(os.path.join(out, "nix-support", "shell-paths"), "w", encoding="utf-8") as handle:
            handle.write("".join(f"{p}\n" for p in keep))

    return store.add_path(path, build, references_candidates=keep)


class CudaSet(NamedTuple):
    """What a shell takes from a CUDA package set: its attribute name (``cudaPackages_13_0``), its
    CUDA version ("13.0"), its ``flags.cudaCapabilities`` (["9.0"]) and its
    ``flags.cmakeCudaArchitecturesString`` ("90")."""

    name: str
    version: str
    capabilities: tuple[str, ...]
    cmake_architectures: str


# A CUDA set's member is named ``cuda<major>.<minor>-<pname>-<version>`` (cudaNamePrefix, as Nixpkgs').
_SET_PREFIX = re.compile(r"^cuda(\d+)\.(\d+)-")


def cuda_sets_in(closures: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Which CUDA sets the shell's packages come from: ``cudaPackages_X_Y`` -> the labels (of
    `closures`: label -> the derivation names of that package's closure) reaching a member of it,
    in first-seen order.  A member is known by its name's ``cudaX.Y-`` prefix (the sets'
    ``cudaNamePrefix``), so a package built against a set counts for that set."""
    found: dict[str, list[str]] = {}
    for label, names in closures.items():
        for name in names:
            match = _SET_PREFIX.match(name)
            if match:
                labels = found.setdefault(f"cudaPackages_{match[1]}_{match[2]}", [])
                if label not in labels:
                    labels.append(label)
    return found


def mixed_sets_message(found: Mapping[str, Sequence[str]]) -> str | None:
    """The warning for a shell whose packages come from more than one CUDA set (`cuda_sets_in`), naming
    each set and what brings it; None for one set or none.  Nixpkgs calls such a mix leakage: two
    CUDA runtimes' headers and libraries in one environment (libraries of one, nvcc of the other)."""
    if len(found) < 2:
        return None
    parts = "; ".join(f"{name} ({', '.join(labels[:4])}{', …' if len(labels) > 4 else ''})"
                      for name, labels in found.items())
    return (f"this shell's packages come from {len(found)} CUDA sets: {parts}; what is built here may mix "
            "their headers and libraries (`cudapkgs check-leakage` names the chain): take every package from one set")


def torch_cmake_dir(closure: Iterable[str]) -> str | None:
    """torch's CMake package directory (``…/site-packages/torch/share/cmake``, holding
    ``Torch/TorchConfig.cmake``) in the first path of `closure` that has one, else None.  Nixpkgs'
    torch moves that directory to its ``dev`` output, which CMake finds on CMAKE_PREFIX_PATH
    (pkgs/development/python-modules/torch/source/default.nix@00d0ced3, postInstall: ``mv …/torch/share
    $dev/share``); torch's wheel keeps it inside the package."""
    from .hooks.python_path import site_packages_dirs

    for site in site_packages_dirs(list(closure)):
        candidate = os.path.join(site, "torch", "share", "cmake")
        if os.path.isfile(os.path.join(candidate, "Torch", "TorchConfig.cmake")):
            return candidate
    return None


def cuda_set_variables(cuda_set: CudaSet | None, torch_cmake: str | None,
                       base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables a shell sets from its CUDA set and torch, each only where `base` (the user's
    environment) has none:

    * ``CUDAARCHS``: the set's ``cmakeCudaArchitecturesString``, which CMake (3.20 and later) takes
      as the default of CMAKE_CUDA_ARCHITECTURES (cmake.org/cmake/help/latest/envvar/CUDAARCHS.html),
      so ``enable_language(CUDA)`` builds for the set's capabilities, not nvcc's default;
    * with torch (`torch_cmake`, from `torch_cmake_dir`): ``TORCH_CUDA_ARCH_LIST``, the set's
      ``cudaCapabilities`` joined by ";", which ``torch.utils.cpp_extension`` reads (else it asks the
      GPU, and fails without one); Nixpkgs' torch exports the same list before its build
      (source/default.nix@00d0ced3, ``export TORCH_CUDA_ARCH_LIST="${gpuTargetString}"``) and as
      ``passthru.cudaCapabilities``; ``Torch_DIR`` (``<torch_cmake>/Torch``) for ``find_package(Torch)``.
    """
    found: dict[str, str] = {}
    if cuda_set is not None and cuda_set.capabilities:
        found["CUDAARCHS"] = cuda_set.cmake_architectures
        if torch_cmake is not None:
            found["TORCH_CUDA_ARCH_LIST"] = ";".join(cuda_set.capabilities)
    if torch_cmake is not None:
        found["Torch_DIR"] = os.path.join(torch_cmake, "Torch")
    return {k: v for k, v in found.items() if not base.get(k)}


def export_lines(env: Mapping[str, str], base: Mapping[str, str] = os.environ) -> str:
    """`export NAME='value'` for every variable that differs from `base` (for eval / direnv)."""
    return "".join(
        f"export {name}={shlex.quote(value)}\n" for name, value in sorted(env.items()) if base.get(name) != value
    )
