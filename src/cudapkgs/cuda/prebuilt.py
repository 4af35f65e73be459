"""Set members taken from NVIDIA's prebuilt PyPI wheel instead of a source build (config ``prebuiltWheels``).

Nixpkgs builds NCCL (packages/nccl.nix) and NVSHMEM (packages/libnvshmem.nix) from source in
every set; cudapkgs keeps those expressions (`cudapkgs.pkgs.nccl`, `cudapkgs.pkgs.libnvshmem`)
and, for the names listed in ``prebuiltWheels``, gives the same attribute NVIDIA's wheel of
the same version instead (``nvidia-nccl-cu13`` 2.30.7 for source 2.30.7-1): minutes instead
of NCCL's hour-long compile, and NVSHMEM without the MPI, UCX, libfabric and PMIx its source
build needs (none of which cudapkgs has, so the source build is broken here).  Every consumer
of the set (torch, nccl-tests) then sees the one package.

The wheel is fetched by pip and checked against the index's sha256, as every NVIDIA wheel
(`cudapkgs.fetch.wheels`), unpacked with each file checked against RECORD, laid out as the
source build installs it, and fixed up like any package (RUNPATH from DT_NEEDED, the driver
directory).  NVSHMEM's bootstrap and transport plugins that need a library cudapkgs does not
have (MPI, OpenSHMEM, PMIx, libfabric, UCX) are left out, so every DT_NEEDED in the closure is
satisfied; the ``libmlx5`` of the InfiniBand transports comes from the top level's rdma-core.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..errors import ConfigError

__all__ = ["PREBUILT", "prebuilt"]

# attribute -> (PyPI project without the -cuXX suffix, outputs, {output: prefix paths}, prefix paths left out,
#               top-level libraries it needs).  Contents read from nvidia-nccl-cu13 2.30.7 and
#               nvidia-nvshmem-cu13 3.4.5 (readelf -d of every library, 2026-12-01).
# (config.PREBUILT_WHEEL_NAMES lists the same names, for validating the key without importing this room.)
PREBUILT: dict[str, tuple[str, list[str], dict[str, list[str]], list[str], list[str]]] = {
    "nccl": ("nvidia-nccl", ["out", "dev"], {"dev": ["include"]}, [], []),
    "libnvshmem": ("nvidia-nvshmem", ["out"], {}, [
        "lib/nvshmem_bootstrap_mpi.so.3",  # libmpi.so.40
        "lib/nvshmem_bootstrap_shmem.so.3",  # liboshmem.so.40
        "lib/nvshmem_bootstrap_pmix.so.3",  # libpmix.so.2
        "lib/nvshmem_transport_libfabric.so.3",  # libfabric.so.1
        "lib/nvshmem_transport_ucx.so.3",  # libucs.so.0, libucp.so.0
    ], ["rdma-core"]),
}


def prebuilt(scope: Any, config: Any, attr: str, source: Any) -> Any:
    """The member `attr` of the set `scope` from NVIDIA's wheel of `source`'s version (`source`: the
    from-source package, whose version, description and license are kept)."""
    from ..builders.rewired_wheel import nvidia_wheel
    from ..lib.fixpoint import AttrSet, lazy
    from ..meta import source_meta
    from ..lib.versions import version_core

    if attr not in PREBUILT:
        raise ConfigError(f"{attr} has no prebuilt wheel (known: {', '.join(sorted(PREBUILT))})")
    project, outputs, moved, removed, libraries = PREBUILT[attr]
    major = int(scope.cudaMajorVersion)
    system = scope.backendStdenv.hostNixSystem
    top = scope.auto_args
    inputs = [top[name] for name in libraries if name in top]

    def attrs(final: Any) -> dict[str, Any]:
        version = str(source.version)
        wheel_version = version_core(version)
        return {
            "pname": attr,
            "version": version,
            "name": f"{scope.cudaNamePrefix}-{attr}-{version}",
            "outputs": outputs,
            "nvidiaWheel": {"project": f"{project}-cu{major}", "version": wheel_version, "cudaMajor": major},
            "wheelOutputs": moved,
            "wheelRemove": removed,
            "buildInputs": inputs,
            "passthru": AttrSet({
                "fromWheel": f"{project}-cu{major}=={wheel_version}",
                "platformAssertions": lazy(lambda: list(source.passthru.get("platformAssertions") or ())),
            }, name=f"{scope.attr_path}.{attr}.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": f"{source.meta.get('description', attr)} (NVIDIA's prebuilt wheel "
                               f"{project}-cu{major} {wheel_version})",
                "homepage": source.meta.get("homepage"),
                "license": source.meta.get("license"),
                "platforms": ["x86_64-linux", "aarch64-linux"],
                "sourceProvenance": ["binaryNativeCode"],
            })),
        }

    return nvidia_wheel(config, attrs, system=system).named(f"{scope.attr_path}.{attr}")
