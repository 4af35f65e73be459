"""cuda-library-samples: NVIDIA's CUDALibrarySamples (cuBLASLt, cuSOLVER, cuTENSOR examples).

Follows pkgs/development/cuda-modules/packages/cuda-library-samples.nix@c9e42f38ea0704efb9182ba320e058b4bc9cb760:
one source (NVIDIA/CUDALibrarySamples rev 5aab6809, Nixpkgs' sha256 in Nix base-32), three
packages (`cublas` from cuBLASLt/, `cusolver` from cuSOLVER/gesv, `cutensor` from cuTENSOR/ with
CUTENSOR_ROOT), each named `cuda<X.Y>-cuda-library-samples-<lib>`, built with CMake against
`cudatoolkit-legacy-runfile` (this set's cudatoolkit, as the alias says), with the driver run
path, BSD-3, x86_64-linux only. Nixpkgs builds each from a subdirectory of the fetched tree
(``src = "${src}/cuBLASLt"``); here the whole tree is the source and `sourceRoot` picks the
directory. The archive is not in the mirror and GitHub is unreachable from these machines: they
evaluate; building needs the archive.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import AttrSet, lazy
from ...meta import source_meta
from ...stdenv import mk_derivation
from ..from_source import CMAKE_BUILD, CMAKE_CONFIGURE, CMAKE_INSTALL, present, resolve_externals
from ..substitute import SUBSTITUTE_IN_PLACE

REV = "5aab680905d853bce0dbad4c488e4f7e9f7b2302"
SHA256 = "0gwgbkq05ygrfgg5hk07lmap7n7ampxv0ha1axrv8qb748ph81xs"
# sample -> (pname suffix, directory under the tree)
SAMPLES = {"cublas": "cuBLASLt", "cusolver": "cuSOLVER/gesv", "cutensor": "cuTENSOR"}


def cuda_library_samples(backendStdenv: Any, autoAddDriverRunpath: Any, cudaMajorMinorVersion: str,
                         cudatoolkit: Any, fetchFromGitHub: Any, config: Any, top: Any,
                         libcutensor: Any = None) -> AttrSet:
    """The three sample packages of a CUDA set (an attribute set: cublas, cusolver, cutensor)."""
    system = backendStdenv.hostNixSystem
    cmake = resolve_externals(top, ("cmake",))["cmake"]
    src = lazy(lambda: fetchFromGitHub(owner="NVIDIA", repo="CUDALibrarySamples", rev=REV, sha256=SHA256))

    def sample(which: str) -> Any:
        def attrs(final: Any) -> dict[str, Any]:
            extra: dict[str, Any] = {}
            broken = [{"message": "cmake is available", "assertion": cmake is not None}]
            inputs = [cudatoolkit]
            if which == "cutensor":
                inputs = [libcutensor] if libcutensor is not None else []
                broken.append({"message": "libcutensor is available", "assertion": libcutensor is not None})
                extra = {
                    "cmakeFlags": ['-DCUTENSOR_EXAMPLE_BINARY_INSTALL_DIR=$out/bin'],
                    "CUTENSOR_ROOT": libcutensor,
                    # CUTENSOR_ROOT is double escaped in CMakeLists.txt (cuda-library-samples.nix)
                    "postPatch": lazy(lambda: SUBSTITUTE_IN_PLACE + "substituteInPlace CMakeLists.txt --replace-fail "
                                      f"'${{CUTENSOR_ROOT}}/include' '{libcutensor.include}/include'\n"),
                }
            return {
                "pname": f"cuda-library-samples-{which}",
                "version": REV[:7],
                "name": lazy(lambda: f"cuda{cudaMajorMinorVersion}-{final.pname}"),
                "src": src,
                "sourceRoot": f"source/{SAMPLES[which]}",
                "nativeBuildInputs": present(autoAddDriverRunpath, cmake, cudatoolkit),
                "buildInputs": inputs,
                "configurePhase": CMAKE_CONFIGURE, "buildPhase": CMAKE_BUILD, "installPhase": CMAKE_INSTALL,
                **extra,
                "passthru": {"brokenAssertions": broken},
                "meta": lazy(lambda: source_meta(final, config, system, {
                    "description": "examples of using libraries using CUDA",
                    "license": licenses.bsd3,
                    "platforms": ["x86_64-linux"],
                })),
            }

        return mk_derivation(config, attrs, system=system, name=f"cuda{cudaMajorMinorVersion}.cuda-library-samples.{which}")

    return AttrSet({which: lazy(lambda which=which: sample(which)) for which in SAMPLES},
                   name=f"cuda{cudaMajorMinorVersion}.cuda-library-samples")
