"""`cudaPackages.nvidia_driver`: always broken, pointing at the host's driver.

Nixpkgs: pkgs/development/cuda-modules/packages/nvidia_driver.nix@2973b267eb5247d53f34adfcd489f26af859bd03
is `buildRedist { pname = "nvidia_driver"; outputs = ["out"]; brokenAssertions = [{ message =
"use drivers from linuxPackages"; assertion = false; }]; }`: NVIDIA's manifests list the driver,
but a set never installs it. Here the driver is the host's (the one NixOS' linuxPackages would
provide), found at run time through the driver directory (autoAddDriverRunpath); the package
evaluates with `meta.broken` and Nixpkgs' message, and building it is refused with it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

MESSAGE = "use drivers from linuxPackages"


def nvidia_driver(cuda: Any, config: Any) -> Any:
    """The broken `nvidia_driver` package of the set `cuda`; its version is the manifest's
    nvidia_driver entry when the set's cuda manifest has one (else the set's CUDA version)."""
    from .. import licenses
    from ..lib.fixpoint import lazy
    from ..meta import source_meta
    from ..stdenv import mk_derivation

    def version() -> str:
        # The set's manifests are `Manifest` records (their entries under `.releases`), not mappings.
        manifests = cuda.manifests
        manifest = manifests["cuda"] if "cuda" in manifests else None
        entry = None if manifest is None else manifest.releases.get("nvidia_driver")
        return str(cuda.cudaMajorMinorPatchVersion) if entry is None else str(entry.version)

    system = cuda.backendStdenv.hostNixSystem

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "nvidia_driver",
            "version": lazy(version),
            "outputs": ["out"],
            "stdenvCc": None, "driverLibDir": None,
            "dontUnpack": True, "dontConfigure": True, "dontBuild": True, "dontFixup": True,
            "installPhase": 'echo "nvidia_driver: use the host\'s NVIDIA driver" >&2; exit 1\n',
            "passthru": {"brokenAssertions": [{"message": MESSAGE, "assertion": False}], "platformAssertions": []},
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "NVIDIA's driver, as listed in the CUDA manifests: use the host's driver "
                               "(Nixpkgs: linuxPackages.nvidiaPackages)",
                "license": [licenses.nvidia_cuda] if hasattr(licenses, "nvidia_cuda") else [],
                "platforms": ["aarch64-linux", "x86_64-linux"],
            })),
        }

    return mk_derivation(config, attrs, system=system, name=f"{cuda.attr_path}.nvidia_driver")
