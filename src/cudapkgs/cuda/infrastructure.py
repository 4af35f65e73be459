"""`_cuda`: the fixed point outside every CUDA package set (db, lib, extensions).

It is evaluated once per process and shared by every top level and variant that
does not change it; change it with `.extend`, e.g. to add to `extensions`, the
list of scope extensions applied to every package set.
"""

from __future__ import annotations

import functools
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .. import db, flags, platform
from ..lib.fixpoint import AttrSet, lazy, make_extensible
from ..lib.versions import version_at_least, version_older
from .backend_stdenv import failed_assertions_string
from ..package_sets import known_products, mk_versioned_name


def _lib(final: AttrSet) -> AttrSet:
    """`_cuda.lib`: Nixpkgs' helper functions, under their Nixpkgs names."""
    from .. import licenses

    def format_capabilities(args: Any) -> dict[str, Any]:
        return flags.format_capabilities(
            args["cudaCapabilityToInfo"], args["cudaCapabilities"], args["cudaForwardCompat"]
        )

    def get_redist_system(args: Any) -> str:
        return platform.get_redist_system(
            args["cudaCapabilities"], args["cudaMajorMinorVersion"], args["system"],
            final.db.cudaCapabilityToInfo,
        )

    def select_manifests(versions: Any) -> AttrSet:
        """selectManifests (top-level/cuda-packages.nix@c12d1f68: ``lib.mapAttrs (name: version:
        _cuda.manifests.${name}.${version})``): product -> version to product -> manifest, each read
        on first use from the vendored manifests (`manifests.load_manifest`; a product or version
        without one is a `ManifestError` naming it)."""
        from ..manifests import load_manifest

        return AttrSet({product: lazy(lambda p=product, v=version: load_manifest(p, str(v)))
                        for product, version in dict(versions).items()}, name="_cuda.lib.selectManifests")

    def evaluate_assertions(assertions: Any) -> bool:
        return failed_assertions_string([(a["assertion"], a["message"]) for a in assertions]) == ""

    return AttrSet(
        {
            "dropDots": flags.drop_dots,
            "dotsToUnderscores": flags.dots_to_underscores,
            "mkRealArchitecture": flags.mk_real_architecture,
            "mkVirtualArchitecture": flags.mk_virtual_architecture,
            "mkGencodeFlag": flags.mk_gencode_flag,
            "mkCmakeCudaArchitecturesString": flags.mk_cmake_cuda_architectures_string,
            "formatCapabilities": format_capabilities,
            "mkCudaSystemFeature": flags.mk_cuda_system_feature,
            "getCudaSystemFeatures": lambda caps: flags.get_cuda_system_features(caps, final.db.cudaCapabilityToInfo),
            "getRedistSystem": get_redist_system,
            "getNixSystems": platform.get_nix_systems,
            "mkRedistUrl": platform.mk_redist_url,
            "_redistSystemIsSupported": platform.redist_system_is_supported,
            "_cudaCapabilityIsSupported": db.capability_is_supported,
            "_cudaCapabilityIsDefault": db.capability_is_default,
            "_mkFailedAssertionsString": lambda assertions: failed_assertions_string(
                [(a["assertion"], a["message"]) for a in assertions]
            ),
            "_evaluateAssertions": evaluate_assertions,
            "mkVersionedName": mk_versioned_name,
            "versionOlder": version_older,
            "versionAtLeast": version_at_least,
            "allowUnfreeCudaPredicate": licenses.allow_unfree_cuda_predicate,
            "selectManifests": select_manifests,
            "cudaLicenseNames": lazy(lambda: sorted(licenses.CUDA_LICENSE_NAMES)),
        },
        name="_cuda.lib",
    )


def _cuda_fixed_point(final: AttrSet) -> dict[str, Any]:
    def bootstrap_data() -> AttrSet:
        return AttrSet(
            {
                "cudaCapabilityToInfo": lazy(db.cuda_capability_to_info),
                "nvccCompatibilities": lazy(db.nvcc_compatibilities),
                "redistNames": lazy(lambda: list(known_products())),
                "redistSystems": list(platform.REDIST_SYSTEMS),
                "redistUrlPrefix": platform.REDIST_URL_PREFIX,
            },
            name="_cuda.bootstrapData",
        )

    def database() -> AttrSet:
        # Derived lists read final.db, so overriding cudaCapabilityToInfo changes them too.
        return final.bootstrapData.update(
            {
                "allSortedCudaCapabilities": lazy(
                    lambda: db.all_sorted_cuda_capabilities(final.db.cudaCapabilityToInfo)
                ),
                "cudaArchNameToCapabilities": lazy(
                    lambda: db.cuda_arch_name_to_capabilities(final.db.cudaCapabilityToInfo)
                ),
            }
        ).named("_cuda.db")

    return {
        "bootstrapData": lazy(bootstrap_data),
        "db": lazy(database),
        "extensions": [],
        "lib": lazy(lambda: _lib(final)),
    }


@functools.cache
def default_cuda() -> AttrSet:
    """The `_cuda` every top level starts from."""
    return make_extensible(_cuda_fixed_point, name="_cuda")
