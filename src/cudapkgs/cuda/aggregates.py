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

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..errors import CudapkgsError
from ..lib.fixpoint import AttrSet, lazy

# cudatoolkit.nix@de32314a48f96157b502d3a205596fa12ea484b8: the host tools, then the target
# libraries (cuda_crt from CUDA 13); every output of each except `static`.
TOOLKIT_HOST = ("cuda_cuobjdump", "cuda_gdb", "cuda_nvcc", "cuda_nvdisasm", "cuda_nvprune")
TOOLKIT_TARGET = (
    "cuda_cccl", "cuda_cudart", "cuda_cupti", "cuda_cuxxfilt", "cuda_nvml_dev", "cuda_nvrtc", "cuda_nvtx",
    "cuda_profiler_api", "cuda_sanitizer_api", "libcublas", "libcufft", "libcurand", "libcusolver",
    "libcusparse", "libnpp",
)
TOOLKIT_COMPONENTS = TOOLKIT_HOST + TOOLKIT_TARGET + ("cuda_crt",)

SYMLINK_JOIN = """\
mkdir -p "$out"
for path in "${paths[@]}"; do
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


def toolkit_components(scope: Any) -> tuple[str, ...]:
    """The attribute names cudatoolkit joins in `scope` (cuda_crt only from CUDA 13)."""
    crt = ("cuda_crt",) if scope.cudaAtLeast("13") else ()
    return TOOLKIT_HOST + TOOLKIT_TARGET + crt


def cudatoolkit(scope: Any, config: Any, system: str) -> Any:
    """Nixpkgs' cudatoolkit: `cuda-merged-X.Y`, a symlinkJoin of every output but `static` of the
    toolkit's components (those available here), licensed nvidiaCudaRedist, so refused unless
    unfree packages are allowed (cudatoolkit.nix@de32314a)."""
    from .. import licenses
    from ..stdenv import mk_derivation
    from ..meta import source_meta

    mm = scope.cudaMajorMinorVersion

    def attrs(final: Any) -> dict[str, Any]:
        def parts() -> list[Any]:
            return [p for p in (_try_usable(scope, n) for n in toolkit_components(scope)) if p is not None]

        def paths() -> list[str]:  # forced by the derivation: the unfree gate comes first
            licenses.check_unfree_allowed(config, final, name=final.name)
            return [p[o] for p in final.nativeBuildInputs for o in p.outputs if o != "static"]

        return {
            "name": f"cuda-merged-{mm}",
            "version": mm,
            "nativeBuildInputs": lazy(parts),
            "paths": lazy(paths),
            "stdenvCc": None,  # links and text only: Nixpkgs' symlinkJoin/runCommand use stdenvNoCC
            "strictDeps": False,
            "dontFixup": True,
            "installPhase": SYMLINK_JOIN,
            "passthru": AttrSet({"components": lazy(lambda: [p.pname for p in final.nativeBuildInputs])}),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "Wrapper substituting the deprecated runfile-based CUDA installation",
                "license": [licenses.nvidiaCudaRedist],
                "platforms": ["aarch64-linux", "x86_64-linux"],
            })),
        }

    return mk_derivation(config, attrs, system=system, name=f"{scope.attr_path}.cudatoolkit")


def redists_unpacked(scope: Any, config: Any, system: str) -> Any:
    """`tests.redists-unpacked`: a linkFarm of the `src` of every member with a redistName and a
    source here, named by attribute (aliases included), licensed by the union of theirs
    (tests/redists-unpacked.nix@62b71747). Here a redist's source is not a store path of its own
    (buildRedist fetches and unpacks it), so each entry records the archive's URL and SHA-256
    instead of linking an unpacked tree; realising it fetches nothing."""
    from ..stdenv import mk_derivation

    def attrs(final: Any) -> dict[str, Any]:
        def members() -> dict[str, Any]:
            found = {}
            for name, target in _redist_names(scope).items():
                package = scope[target]
                try:
                    if package.src is not None:
                        found[name] = package
                except CudapkgsError:  # an unfree source is left out, as tryEval would
                    continue
            return found

        def licenses_of() -> list[Any]:
            seen: list[Any] = []
            for package in final.passthru["redistsForPlatform"].values():
                for license in package.meta.license:
                    if license not in seen:
                        seen.append(license)
            return seen

        return {
            "name": f"{scope.cudaNamePrefix}-redists-unpacked",
            "entries": lazy(lambda: {n: f"{p.src.url} sha256:{p.src.sha256}"
                                     for n, p in final.passthru["redistsForPlatform"].items()}),
            "stdenvCc": None,  # links and text only: Nixpkgs' symlinkJoin/runCommand use stdenvNoCC
            "dontUnpack": True,
            "dontFixup": True,
            "installPhase": 'mkdir -p "$out"\nfor name in "${!entries[@]}"; do echo "${entries[$name]}" > "$out/$name"; done\n',
            "passthru": AttrSet({"redistsForPlatform": lazy(members)}),
            "meta": lazy(lambda: {"license": licenses_of(),
                                  "description": "The source of every redistributable of the set"}),
        }

    return mk_derivation(config, attrs, system=system, name=f"{scope.attr_path}.tests.redists-unpacked")


def _redist_names(scope: Any) -> dict[str, str]:
    """name -> the attribute holding the package, for every member that is a redist; in-set
    aliases (cusparselt) are listed under their own name too, read without their warning."""
    from .components import component_specs
    from .aliases import ALIASES

    components = {pname for specs in component_specs().values() for pname in specs}
    names = {}
    for name in scope:
        target = name if name in components else ALIASES.get(name, (None, None))[1]
        if target in components and scope[target] is not None and "redistName" in scope[target]:
            names[name] = target
    return names


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
            "stdenvCc": None,  # links and text only: Nixpkgs' symlinkJoin/runCommand use stdenvNoCC
            "strictDeps": False,
            "dontFixup": True,
            "installPhase": LINK_FARM,
            "meta": meta,
        },
        system=system,
        name=f"{scope.attr_path}.tests.redists-installed",
    )
