"""python3Packages.pycuda: pycuda 2026.1 from its PyPI sdist, built against the top level's cudaPackages.

Like Nixpkgs (pkgs/development/python-modules/pycuda/default.nix @ 0abe6cc5): the
sdist through ``fetchPypi``, ``configure.py`` run before the build with the set's
CUDA, the driver run path added to the extension (``addDriverRunpath``: here
``autoAddDriverRunpath``), numpy/pytools/mako/platformdirs propagated.  Differences,
each chosen for a closure that a user can carry:

* the Boost.Python subset shipped in the sdist is used (Nixpkgs links its boost);
* cuRAND support is off (``--no-cuda-enable-curand``): libcurand's lib output is
  about 100 MiB, and only ``pycuda.curandom`` needs it;
* only cuda_cudart's ``include`` (cuda.h) and ``stubs`` (libcuda.so, link-only)
  outputs and cuda_profiler_api's ``include`` (cudaProfiler.h) are inputs: the extension links ``-lcuda`` against the stub, and at run time
  ``libcuda.so.1`` comes from the driver (the driver directory is in its RUNPATH, the
  stubs directory never is).  pycuda's ``SourceModule`` runs ``nvcc`` at run time;
  nvcc is not in the closure, so kernels come as cubin/PTX (``module_from_buffer``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PYCUDA_HASH", "PYCUDA_VERSION", "pycuda"]

PYCUDA_VERSION = "2026.1"
# sha256 of pycuda-2026.1.tar.gz as PyPI serves it (759516160628ba06…4e14ba).
PYCUDA_HASH = "sha256-dZUWFgYougbzLOflY+P1uSFGkdyVKKA+qZ6hBz9OFLo="

CONFIGURE = r"""
if [ -n "${enableParallelBuilding-}" ]; then printf '[build_ext]\nparallel = %s\n' "$NIX_BUILD_CORES" >> setup.cfg; fi
python3 configure.py \
  --cuda-root="$cudaInclude" \
  --cuda-inc-dir="$cudaInclude/include" --cuda-inc-dir="$profilerInclude/include" \
  --cudadrv-lib-dir="$cudaStubs/lib/stubs" \
  --cudart-lib-dir="$cudaStubs/lib/stubs" \
  --no-cuda-enable-curand
"""


def pycuda(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """pycuda for python3Packages `ps`, against ``pkgs.cudaPackages`` (use ``cudaPackages_X_Y.pkgs``)."""
    from ...lib.fixpoint import lazy

    cuda = pkgs.cudaPackages
    cudart = cuda.cuda_cudart
    # OutputPaths (str paths that remember the package), read only when the derivation is: an output
    # path is a derivation's, and an unfree one is refused, which would make pycuda's name and meta
    # (free, MIT) unevaluable without allowUnfree.
    include, stubs = lazy(lambda: cudart.include), lazy(lambda: cudart.stubs)
    profiler = lazy(lambda: cuda.cuda_profiler_api.include)
    return ps.buildPythonPackage({
        "pname": "pycuda",
        "version": PYCUDA_VERSION,
        "format": "setuptools",
        "src": pkgs.fetchPypi(pname="pycuda", version=PYCUDA_VERSION, hash=PYCUDA_HASH),
        "build-system": lazy(lambda: [ps.setuptools, ps.wheel, ps.numpy]),  # made when built (lazy_list)
        "buildInputs": [include, stubs, profiler],
        "dependencies": lazy(lambda: [ps.numpy, ps.pytools, ps.platformdirs, ps.mako]),
        "cudaInclude": include,
        "cudaStubs": stubs,
        "profilerInclude": profiler,
        "enableParallelBuilding": True,
        "preBuild": CONFIGURE,
        # Nixpkgs' stdenv strips debug sections in fixup; the generic builder here does not yet.
        # The DWARF strings would keep cudart's and cuda_profiler_api's include outputs (and the
        # interpreter) in the run-time closure.
        "preFixup": 'find "$out/" -name "*.so" -type f -exec strip --strip-debug {} +',
        "autoAddDriverRunpath": True,
        "pythonImportsCheck": ["pycuda"],
        "passthru": {"cudaPackages": cuda},
        "meta": {
            "description": f"pycuda {PYCUDA_VERSION} (CUDA driver API for Python) from its sdist, "
            f"built against CUDA {cuda.cudaMajorMinorVersion}",
            "license": "MIT",
        },
    })
