"""python3Packages.cupy: CuPy from the ``cupy-cuda13x`` wheel, rewired to the set's libraries.

Nixpkgs builds CuPy from its sdist (pkgs/development/python-modules/cupy/default.nix); two cores
cannot compile its ~60 Cython extensions against every set in reasonable time, so cudapkgs takes
the wheel CuPy publishes for CUDA 13 (a deviation, as torch-bin is).  What the wheel does and what
is changed (cupy-cuda13x 14.2.0: ``readelf -d``, its Python sources):

* it links the CUDA runtime statically (``libcudart_static``) and dlopens ``libcuda.so.1``: the
  driver directory is added to every RUNPATH (``autoAddDriverRunpath``);
* ``cupy_backends/cuda/libs/{cublas,curand,cusolver,cusparse,nccl,cutensor}`` have DT_NEEDED
  ``libcublas.so.13``, ``libcurand.so.10``, ``libcusolver.so.12``, ``libcusparse.so.12``,
  ``libnccl.so.2``, ``libcutensor.so.2``/``libcutensorMg.so.2``; ``cupy.cuda.cufft`` needs
  ``libcufft.so.12``; they become RUNPATHs of the set's directories (the fixup does it for
  DT_NEEDED); nvrtc is dlopened (``SoftLink``), so its lib directory is appended;
* before importing those modules CuPy asks NVIDIA's ``cuda-pathfinder`` (a Requires-Dist) to load
  each library from site-packages' ``nvidia/`` trees, conda, the system or ``CUDA_PATH``, and fails
  the import when it finds none: with every library on a RUNPATH those calls are made inert, and
  so is ``cupy._environment``'s preload of the same libraries (``_preload_library``).  One call is
  compiled (``cupy/cuda/cufft.pyx``: ``pathfinder.load_nvidia_dynamic_lib('cufft')`` for the
  library's handle, after the module's own DT_NEEDED loaded libcufft): ``cuda-pathfinder`` is
  packaged (`cuda_pathfinder`) with its site-packages and conda searches removed, so it answers
  the library already loaded from the set and never looks at an ``nvidia/`` tree on PYTHONPATH;
* ``cupy.cuda.get_cuda_path()`` answers the set's cuda_cudart ``include`` output's prefix (headers
  for NVRTC) instead of a search that ends at ``/usr/local/cuda``; nvcc comes from ``$NVCC`` or
  ``PATH`` (a shell with the set's cuda_nvcc), never a guess.

cuTENSOR: the set's ``libcutensor`` where a configured fetcher supplies it; elsewhere (NVIDIA's
wheels: cudapkgs does not fetch the cutensor wheel) ``libcutensor.so.2`` is left unresolved and
only ``cupyx.cutensor`` fails, with the loader's message naming the library.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["CUPY_VERSION", "CUPY_WHEELS", "PATHFINDER_LIBRARIES", "PATHFINDER_WHEEL", "cuda_pathfinder", "cupy"]

CUPY_VERSION = "14.2.0"
# cp311: pip download, 2026-12-01; the others: https://pypi.org/pypi/cupy-cuda13x/json (and -cuda12x), 2026-12-06
CUPY_WHEELS = {tag: (f"cupy_cuda13x-14.2.0-{tag}-{tag}-manylinux2014_x86_64.whl", digest) for tag, digest in {
    "cp310": "351e33aa4260dd89359b243cc8ce3ee76c08e4ed4d1bafaaaec2b882f42e59f8",
    "cp311": "f94843e54500a9c8c169135f79572bfaba946efe4f7178e834c227280c1b0c12",
    "cp312": "9aafadbe29db3d4285026044aafeb28f2a3de4bd0df70718ec6892b7d27a4ded",
    "cp313": "5b79a606f6639d9bed74ef7072f36756a95a804c86d7adb367b39307ac771600"}.items()}
CUPY12_WHEELS = {tag: (f"cupy_cuda12x-14.2.0-{tag}-{tag}-manylinux2014_x86_64.whl", digest) for tag, digest in {
    "cp310": "0d3205b1ac1093b6019530ba3b7f7080e2283820f452f0c543a3560d58e0b9bf",
    "cp311": "5fe2366cc5c61a7ee4a527ce1e8951cb89092d0fb0b5830623cf114d1942c585",
    "cp312": "f82141761f2c81905d49387464ae29438887956d99063381c93a1d5d1b7d32e8",
    "cp313": "efc1da23505e88d9834a3ddd3c00352c34e58e301f512d9dd593cc4bfbbdf7dc"}.items()}
# cuda-pathfinder 1.9.1 (cupy-cuda13x 14.2.0 requires cuda-pathfinder==1.*,>=1.3.4): pip download, 2026-12-01.
PATHFINDER_WHEEL = ("cuda_pathfinder-1.9.1-py3-none-any.whl",
                    "b743c132f90ad2d1e71d43fd28f31ebcde518f943e50fd44aca62b2a80d5230d")
# The set's libraries cuda-pathfinder finds first (its descriptor names, supported_nvidia_libs.py 1.9.1:
# cudart, nvrtc, nvJitLink, nvvm, cublas, cufft, curand, cusolver, cusparse, nccl): every library CuPy
# asks it for, and NVRTC's companions (nvJitLink for LTO, libnvvm).
PATHFINDER_LIBRARIES = ("cuda_cudart", "cuda_nvrtc", "libnvjitlink", "libnvvm", "libcublas", "libcufft", "libcurand",
                        "libcusolver", "libcusparse", "nccl")


def _early_search(lib_dirs: list[str]) -> dict[str, Any]:
    """cuda/pathfinder/_dynamic_libs/search_steps.py (1.9.1): its searches that run before "already
    loaded?" (site-packages' nvidia/ trees, $CONDA_PREFIX) become one search of the set's library
    directories `lib_dirs`, so that `load_nvidia_dynamic_lib` loads the set's library by its path, whatever
    a host CUDA puts in the loader's search (ld.so.cache, LD_LIBRARY_PATH) or CUDA_HOME/CUDA_PATH."""
    step = (
        f"_CUDAPKGS_LIB_DIRS: tuple[str, ...] = {tuple(lib_dirs)!r}\n\n\n"
        "def find_in_cudapkgs_set(ctx: SearchContext) -> FindResult | None:\n"
        '    """cudapkgs: the library from the set this package was built for, before any other search."""\n'
        "    for lib_dir in _CUDAPKGS_LIB_DIRS:\n"
        "        if os.path.isdir(lib_dir):\n"
        "            abs_path = ctx.platform.find_in_lib_dir(lib_dir, ctx.desc, [], [])\n"
        "            if abs_path is not None:\n"
        '                return FindResult(abs_path, "cudapkgs set")\n'
        "    return None\n\n\n"
        "EARLY_FIND_STEPS: tuple[FindStep, ...] = (find_in_cudapkgs_set,)  # cudapkgs: never nvidia/ on sys.path\n"
    )
    return {"file": "cuda/pathfinder/_dynamic_libs/search_steps.py", "replace": [[
        "EARLY_FIND_STEPS: tuple[FindStep, ...] = (find_in_site_packages, find_in_conda)\n", step]]}


# cuda/pathfinder/_dynamic_libs/load_dl_linux.py (1.9.1): NVRTC's builtins are preloaded from a sibling
# named by the version in the loaded file's name; NVIDIA's wheels (the set's nvrtc) have only
# libnvrtc.so.13, so it warned "Cannot determine the NVRTC version" on every load.  The set's libnvrtc
# loads its builtins beside it itself, as a conda one does: no preload.
_NO_BUILTINS_PRELOAD = {"file": "cuda/pathfinder/_dynamic_libs/load_dl_linux.py", "replace": [[
    '    if found_via == "conda":\n        return\n',
    '    if found_via in ("conda", "cudapkgs set"):  # cudapkgs: NVRTC loads the builtins beside it\n        return\n',
]]}
# The libraries of DT_NEEDED (and nvrtc, dlopened).
CUPY_LIBRARIES = ("libcublas", "libcurand", "libcusolver", "libcusparse", "libcufft", "nccl", "cuda_nvrtc")


def _substitutions(cuda_root: str) -> list[dict[str, Any]]:
    note = "# cudapkgs: the set's library comes through this module's RUNPATH"
    return [
        {"file": "cupy_backends/cuda/libs/__init__.py", "replace": [
            ["    from cuda import pathfinder as _pathfinder\n", "    _pathfinder = None  " + note + "s\n"],
            ["            _pathfinder.load_nvidia_dynamic_lib(pathfinder_name)\n", "            pass  " + note + "\n"],
        ]},
        {"file": "cupy/cuda/__init__.py", "replace": [[
            '            from cuda import pathfinder\n            try:\n                pathfinder.load_nvidia_dynamic_lib("cufft")\n',
            "            try:\n                pass  " + note + "\n",
        ]]},
        {"file": "cupy/_environment.py", "replace": [
            ["    from cuda.pathfinder import (\n        load_nvidia_dynamic_lib, DynamicLibNotFoundError)\n"
             "    try:\n        nvrtc = load_nvidia_dynamic_lib('nvrtc')\n",
             f"    return {cuda_root!r}  # cudapkgs: the set's CUDA headers, no search\n"
             "    try:\n        nvrtc = None\n"],
            ["    from cuda.pathfinder import find_nvidia_binary_utility\n    nvcc_path = find_nvidia_binary_utility('nvcc')\n",
             "    nvcc_path = shutil.which('nvcc')  # cudapkgs: $NVCC or PATH, no search of site-packages\n"],
            ["    _log(f'Preloading triggered for library: {lib}')\n",
             "    return  # cudapkgs: no preload; every library comes through a RUNPATH\n"],
        ]},
    ]


def cupy(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.cupy for `ps`, rewired to ``pkgs.cudaPackages`` (a CUDA 13 set)."""
    from ... import licenses
    from ...build_inputs import get_lib
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy
    from ...meta import source_meta
    from .jax import cuda13_assertions
    from .triton import _lib_output

    cuda = pkgs.cudaPackages
    # cupy-cuda12x on CUDA 12 sets (the same 14.2.0 sources, linked to the CUDA 12 sonames), cupy-cuda13x else
    major = "12" if str(cuda.cudaMajorVersion) == "12" else "13"
    wheels = CUPY12_WHEELS if major == "12" else CUPY_WHEELS

    def wheel() -> dict[str, str]:
        from .companions import pick_wheel

        return pick_wheel("cupy", CUPY_VERSION, wheels, str(ps.pythonVersion), system)

    def cutensor() -> Any | None:
        package = cuda.libcutensor
        return package if package is not None and package.meta.available else None

    def libraries() -> list[Any]:
        found = [get_lib(cuda[name]) for name in CUPY_LIBRARIES]
        return found + ([get_lib(cutensor())] if cutensor() is not None else [])

    def include_root() -> str:
        package = cuda.cuda_cudart
        return str(package["include" if "include" in package.outputs else package.outputs[0]])

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "cupy", "version": CUPY_VERSION,
            "wheel": lazy(wheel),
            "dependencies": lazy(lambda: [ps.numpy, ps["cuda-pathfinder"]]),
            "buildInputs": lazy(lambda: [*libraries(), cuda.cuda_cudart]),
            "wheelSubstitutions": lazy(lambda: _substitutions(include_root())),
            "appendRunpaths": lazy(lambda: [f"{_lib_output(cuda.cuda_nvrtc)}/lib", "$ORIGIN"]),
            "autoPatchelfIgnoreMissingDeps": lazy(lambda: [] if cutensor() is not None
                                                  else ["libcutensor.so.2", "libcutensorMg.so.2"]),
            "pythonImportsCheck": ["cupy"],
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "brokenAssertions": lazy(lambda: cuda13_assertions(cuda, f"cupy-cuda{major}x {CUPY_VERSION}",
                                                                   major=major)[:1]),
                "tests": lazy(lambda: _tests(ps, pkgs, system, final)),
            }, name="python3Packages.cupy.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": f"CuPy {CUPY_VERSION}: NumPy and SciPy for the GPU, the cupy-cudaNNx wheel of the set's "
                               "CUDA major on its libraries",
                "longDescription": f"cupy-cuda{major}x {CUPY_VERSION} on {cuda.attr_path}'s libraries",
                "homepage": "https://cupy.dev/",
                "license": [licenses.mit],
                "sourceProvenance": ["binaryNativeCode"],
                "platforms": ["x86_64-linux"],
            })),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


def cuda_pathfinder(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.cuda-pathfinder: NVIDIA's library finder (pure Python) that finds ``pkgs.cudaPackages``'
    libraries first (`_early_search`): its searches of site-packages' ``nvidia/`` trees and of
    ``$CONDA_PREFIX`` are replaced by the set's library directories of `PATHFINDER_LIBRARIES` (those a
    configured fetcher supplies), so ``load_nvidia_dynamic_lib("nvrtc")`` loads the set's NVRTC on a
    machine without a system CUDA (it failed: "Failure finding libnvrtc.so.13") and on one with a host
    CUDA (it took /usr/local/cuda-13.0's from the loader's cache). A library outside that list falls back
    to upstream's order: already loaded, the system's loader, ``CUDA_PATH``."""
    from ... import licenses
    from ...build_inputs import get_lib
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import lazy
    from ...meta import source_meta
    from .triton import _lib_output

    file, sha256 = PATHFINDER_WHEEL
    cuda = pkgs.cudaPackages

    def libraries() -> list[Any]:
        found = []
        for name in PATHFINDER_LIBRARIES:
            package = cuda[name] if name in cuda else None
            if package is not None and package.meta.available:
                found.append(package)
        return found

    def lib_dirs() -> list[str]:
        dirs = []
        for package in libraries():
            root = str(_lib_output(package))
            dirs += [f"{root}/lib", f"{root}/lib64"] if package.pname == "libnvvm" else [f"{root}/lib"]
        return dirs

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "cuda-pathfinder", "version": "1.9.1",
            "wheel": {"file": file, "sha256": sha256},
            "buildInputs": lazy(lambda: [get_lib(p) for p in libraries()]),
            "wheelSubstitutions": lazy(lambda: [_early_search(lib_dirs()), dict(_NO_BUILTINS_PRELOAD)]),
            "pythonImportsCheck": ["cuda.pathfinder"],
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "NVIDIA's cuda-pathfinder 1.9.1, finding the set's libraries first (never "
                               "nvidia/ trees on sys.path)",
                "longDescription": f"finds {cuda.attr_path}'s libraries",
                "homepage": "https://github.com/NVIDIA/cuda-python",
                "license": [licenses.asl20],
                "sourceProvenance": ["fromSource"],
                "platforms": ["x86_64-linux"],
            })),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


# tests (passthru.tests): without a GPU, the import and the CUDA runtime's version (cudaRuntimeGetVersion needs
# no driver); on a GPU (``requiredSystemFeatures = ["cuda"]``) an elementwise kernel (NVRTC) and a cuBLAS matmul.
CPU_TEST = """\
import cupy
version = cupy.cuda.runtime.runtimeGetVersion()
assert version >= 12000, version
print(f"PASS: cupy {cupy.__version__}: CUDA runtime version {version}")
"""
GPU_TEST = """\
import cupy
square = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * x", "square")
x = cupy.arange(1024, dtype=cupy.float32)
assert bool((square(x) == x * x).all())
a = cupy.random.rand(256, 256, dtype=cupy.float32)
assert cupy.allclose(a @ a.T, (a @ a.T).T, atol=1e-3)
print(f"PASS: cupy {cupy.__version__}: kernel and cuBLAS matmul on {cupy.cuda.runtime.getDeviceCount()} device(s)")
"""


def _tests(ps: Any, pkgs: Any, system: str, package: Any) -> dict[str, Any]:
    from .companions import companion_test

    return {"cpu": companion_test(ps, pkgs, system, package, "runtimeVersion", CPU_TEST, cuda=False),
            "cuda": {"gpu": companion_test(ps, pkgs, system, package, "kernelAndMatmul", GPU_TEST, cuda=True)}}
