"""Packages made of a set's other packages: `cudatoolkit` and `tests.redists-installed`.

`cudatoolkit` is Nixpkgs' redist-era approximation of NVIDIA's monolithic runfile:
one tree of symlinks joining every output of the toolkit's components (the first
path providing a file wins, as `symlinkJoin`'s lndir does). Nixpkgs discourages it
for new work; it exists for software that wants a single CUDA_HOME.

`tests.redists-installed` links every output of every redistributable that is
available here as `<pname>-<output>`, so that realising it realises (and checks)
the whole set; components that are not available are left out and listed in its
`meta`, and when none is available it says so in `meta.problems`, as Nixpkgs does.
"""

from __future__ import annotations

from typing import Any

from ..errors import CudapkgsError

# The components Nixpkgs' redist-based cudatoolkit joins (those present in a release).
TOOLKIT_COMPONENTS = (
    "cuda_cccl", "cccl", "cuda_crt", "cuda_cudart", "cuda_cuobjdump", "cuda_cupti", "cuda_cuxxfilt",
    "cuda_gdb", "cuda_nvcc", "cuda_nvdisasm", "cuda_nvml_dev", "cuda_nvprune", "cuda_nvrtc", "cuda_nvtx",
    "cuda_profiler_api", "cuda_sanitizer_api", "libcublas", "libcufft", "libcurand", "libcusolver",
    "libcusparse", "libnpp", "libnvjitlink", "libnvvm",
)

SYMLINK_JOIN = """\
mkdir -p "$out"
for path in "${nativeBuildInputs[@]}"; do
  cp -rsn --no-preserve=mode "$path"/. "$out"/ 2>/dev/null || cp -rsn "$path"/. "$out"/
done
rm -rf "$out/nix-support"
"""

LINK_FARM = """\
mkdir -p "$out"
for name in "${!entries[@]}"; do
  ln -s "${entries[$name]}" "$out/$name"
done
"""


def _usable(scope: Any, name: str) -> Any | None:
    """The package `name` of the set if it exists and can be used here, else None."""
    if name not in scope:
        return None
    package = scope[name]
    if package is None or "redistName" not in package or package.release is None:
        return None
    return package if package.meta.available else None


def _try_usable(scope: Any, name: str) -> Any | None:
    try:
        return _usable(scope, name)
    except CudapkgsError:
        return None


def cudatoolkit(scope: Any, config: Any, system: str) -> Any:
    """The symlinkJoin of the toolkit's components that are available here."""
    from ..stdenv import mk_derivation

    from ..build_inputs import get_output

    parts = [p for p in (_try_usable(scope, n) for n in TOOLKIT_COMPONENTS) if p is not None]
    return mk_derivation(
        config,
        {
            "pname": "cudatoolkit",
            "version": scope.cudaMajorMinorPatchVersion,
            "name": f"{scope.cudaNamePrefix}-cudatoolkit-{scope.cudaMajorMinorPatchVersion}",
            # Every output of every part (an input alone would contribute its dev output).
            "nativeBuildInputs": [get_output(p, *p.outputs) for p in parts],
            "stdenvCc": None,
            "strictDeps": False,
            "dontFixup": True,
            "installPhase": SYMLINK_JOIN,
            "passthru": {"components": [p.pname for p in parts]},
            "meta": {"description": "The CUDA toolkit's redistributables joined into one tree (prefer the components)"},
        },
        system=system,
        name=f"{scope.attr_path}.cudatoolkit",
    )


def redists_installed(scope: Any, config: Any, system: str) -> Any:
    """`tests.redists-installed`: a link to every output of every available redistributable."""
    from ..stdenv import mk_derivation

    from .components import component_specs

    components = {pname for specs in component_specs().values() for pname in specs}
    available, left_out = [], []
    for name in scope:
        if name not in components:  # only the redistributables: reading `pkgs` would build a top level
            continue
        package = scope[name]
        if package is None or "redistName" not in package:
            continue
        try:  # like Nixpkgs' tryEval: a package that fails to evaluate is left out, not fatal
            usable = _usable(scope, name) is not None
        except CudapkgsError:
            usable = False
        if usable:
            available.append(package)
        else:
            left_out.append(name)
    entries = {f"{p.pname}-{o}": p[o] for p in available for o in p.outputs}
    meta: dict[str, Any] = {"description": "Every output of every redistributable available here", "leftOut": left_out}
    if not available:
        meta["problems"] = {
            "noRedistsAvailable": {
                "kind": "unsupported",
                "message": "No redists are available for the current NVIDIA system identifier "
                f"({scope.backendStdenv.hostRedistSystem}); ensure proper licenses are allowed and that the "
                "CUDA version in use supports the system.",
            }
        }
        meta["available"] = False
    return mk_derivation(
        config,
        {
            "name": f"{scope.cudaNamePrefix}-redists-installed",
            "nativeBuildInputs": available,
            "entries": entries,
            "strictDeps": False,
            "dontFixup": True,
            "installPhase": LINK_FARM,
            "meta": meta,
        },
        system=system,
        name=f"{scope.attr_path}.tests.redists-installed",
    )
