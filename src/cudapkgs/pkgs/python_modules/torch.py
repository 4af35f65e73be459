"""python3Packages.torch-bin (and torch with CUDA on): PyTorch's CUDA wheel rewired to the set's libraries.

Nixpkgs' ``python3Packages.torch`` is a source build (pkgs/development/python-modules/torch/source,
"builds in 2+h with 2 cores") and ``torch-bin`` the wheel (torch/bin/default.nix@abdab310:
autoPatchelfHook + autoAddDriverRunpath against the top-level cudaPackages' cuda_cudart,
cuda_cupti, cuda_nvrtc, cuda_nvtx, cudnn, cusparselt, libcublas, libcufft, libcufile,
libcurand, libcusolver, libcusparse and nccl; nvrtc's lib directory added to every ``.so``;
``dontStrip``; ``pythonImportsCheck = [ "torch" ]``; tests in ../tests).  cudapkgs has no
source build (a deviation: docs/ml-stack.md); with ``cudaSupport`` on, ``torch`` is
``torch-bin``.  The wheel (`cudapkgs.builders.rewired_wheel`):

* its ``nvidia-*``, ``cuda-toolkit`` and ``cuda-bindings`` requirements are removed (the set's
  libraries stand in; cuda-bindings, NVIDIA's Python bindings torch imports lazily for graph
  annotations and green contexts, is not packaged), ``triton`` is the set's triton;
* every ELF file's DT_RPATH (``$ORIGIN/../../nvidia/{cudnn,nvshmem,nccl,cusparselt,cu13}/lib``)
  becomes a RUNPATH of the set's library directories it needs, nvrtc's and the driver's;
* ``torch/__init__.py``'s preload of ``nvidia/*/lib`` trees found on ``sys.path`` is made inert,
  so a stray NVIDIA wheel on PYTHONPATH never loads a second CUDA.

Which torch a set gets (`TORCH_FOR_MAJOR`, checked by `cuda_fit`): the newest PyPI build for
the set's CUDA major whose libraries the set serves.  torch 2.14.1 (a CUDA 13.0 build) for the
CUDA 13 sets; torch 2.9.1 (the last CUDA 12.8 build on PyPI for CPython 3.11) for the CUDA 12
sets, which 12.6 cannot serve (its libraries are older than 12.8).  cuDNN: the set's ``cudnn``
when it is new enough, else its newest ``cudnn_X_Y`` that is (torch 2.14.1 was built with cuDNN
9.24 and refuses 9.22, the sets' ``cudnn``).  A set that cannot serve the wheel evaluates
``meta.broken`` naming the component and the version needed.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

from ...lib.records import FrozenRecord

__all__ = ["TORCH_BUILDS", "TORCH_FOR_MAJOR", "TorchBuild", "torch", "torch_bin", "torch_build_for"]


class TorchBuild(FrozenRecord):
    """One PyPI build of torch: its wheels, what it was built against, what it runs on."""

    __slots__ = ("version", "cuda", "wheels", "built_with", "cudnn", "triton", "capabilities", "substitutions",
                 "remove_deps")
    version: str
    cuda: str  #: torch.version.cuda
    wheels: dict[str, tuple[str, str]]  #: python tag -> (file, sha256)
    built_with: dict[str, str]  #: set attribute -> the version the wheel's Requires-Dist pins
    cudnn: str
    triton: str
    capabilities: tuple[str, ...]  #: capabilities with SASS for every kernel, no PTX
    substitutions: tuple[dict[str, Any], ...]
    #: Requires-Dist names the set stands in for (pythonRemoveDeps; each must match one of the wheel's)
    remove_deps: tuple[str, ...]

    def __init__(self, version: str, cuda: str, wheels: dict[str, tuple[str, str]], built_with: dict[str, str],
                 cudnn: str, triton: str, capabilities: tuple[str, ...], substitutions: tuple[dict[str, Any], ...] = (),
                 remove_deps: tuple[str, ...] = ("nvidia-*",)) -> None:
        self._init(version, cuda, wheels, built_with, cudnn, triton, capabilities, substitutions, remove_deps)


# _get_cuda_dep_paths (torch/__init__.py, 2.9.1 and 2.14.1) globs nvidia/<lib>/lib and nvidia/cu<N>/lib on
# every sys.path entry for _preload_cuda_deps: made to find nothing.  When libtorch_global_deps.so itself
# fails to load (a broken run path), its loader error is raised instead of a search of sys.path.
_INERT = {"file": "torch/__init__.py", "replace": [[
    "def _get_cuda_dep_paths(path: str, lib_folder: str, lib_name: str) -> list[str]:\n",
    "def _get_cuda_dep_paths(path: str, lib_folder: str, lib_name: str) -> list[str]:\n"
    "    return []  # cudapkgs: the set's libraries come through each library's RUNPATH, never from nvidia/ on sys.path\n",
]]}
_RAISE_2_14 = {"file": "torch/__init__.py", "replace": [[
    "        # As PyTorch is not purelib, but nvidia-*-cu12 is\n        _preload_cuda_deps(err)\n",
    "        # As PyTorch is not purelib, but nvidia-*-cu12 is\n        raise err  # cudapkgs: no nvidia/ tree to fall back on\n",
]]}
_RAISE_2_9 = {"file": "torch/__init__.py", "replace": [[
    "        for lib_folder, lib_name in cuda_libs.items():\n            _preload_cuda_deps(lib_folder, lib_name)\n",
    "        raise err  # cudapkgs: no nvidia/ tree to fall back on\n",
]]}

# cpp_extension._find_cuda_home's last guess is /usr/local/cuda (torch/utils/cpp_extension.py, both
# versions): a host CUDA would stand in for the set's when building extensions; CUDA_HOME or an nvcc
# on PATH (a shell with the set's cuda_nvcc) still name one.
_NO_HOST_CUDA = {"file": "torch/utils/cpp_extension.py", "replace": [[
    "                cuda_home = '/usr/local/cuda'\n",
    "                cuda_home = ''  # cudapkgs: no guess at a host CUDA\n",
]]}


def _nvrtc_by_path(nvrtc_lib_dir: str, major: str) -> dict[str, Any]:
    """torch/cuda/_utils.py (2.9.1 and 2.14.1): ``_get_nvrtc_library`` (NVRTC for ``torch.cuda._compile_kernel``
    and the jiterator) loads ``libnvrtc.so.<major>`` by name through ctypes, whose search is the system's
    (ld.so.cache: a host CUDA's NVRTC, or none at all); the set's NVRTC is tried first, by its path."""
    return {"file": "torch/cuda/_utils.py", "replace": [[
        '            f"libnvrtc.so.{major_version}",\n',
        f"            {nvrtc_lib_dir + '/libnvrtc.so.' + major!r},  # cudapkgs: the set's NVRTC, by its path\n"
        '            f"libnvrtc.so.{major_version}",\n',
    ]]}


def _wheels(pattern: str, digests: dict[str, str]) -> dict[str, tuple[str, str]]:
    """python tag -> (file, sha256): `pattern` with ``{tag}`` filled in for each tag of `digests`."""
    return {tag: (pattern.format(tag=tag), digest) for tag, digest in digests.items()}


# The wheels' sha256: cp311 as before (see each build); cp310, cp312 and cp313 from
# https://pypi.org/pypi/torch/json (2026-12-06), which gives the cp311 files the same digests.
_CU13_TOOLKIT = {  # torch 2.14.1: cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.3
    "libcublas": "13.1.1.3", "cuda_cudart": "13.0.96", "libcufft": "12.0.0.61", "libcufile": "1.15.1.6",
    "cuda_cupti": "13.0.85", "libcurand": "10.4.0.35", "libcusolver": "12.0.4.66", "libcusparse": "12.6.3.3",
    "libnvjitlink": "13.0.88", "cuda_nvrtc": "13.0.88", "cuda_nvtx": "13.0.85",
}
TORCH_BUILDS: dict[str, TorchBuild] = {
    # METADATA of torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl (the cuda-toolkit 13.0.3 extras' pins from
    # its own METADATA); capabilities: cuobjdump --list-elf libtorch_cuda.so (475 kernels each; sm_89, 90a,
    # 100a, 103, 120a, 121a carry 1-59 kernels only).
    "2.14.1": TorchBuild(
        version="2.14.1", cuda="13.0",
        wheels=_wheels("torch-2.14.1-{tag}-{tag}-manylinux_2_28_x86_64.whl", {
            "cp310": "1fee6b20869a90ccec05e35559a706338ac8aab40a9c4fb58f16667e93af36ae",
            "cp311": "305a61f61f35f128579f299c5bd33d475f6a01c6307336139632e30856c4854d",
            "cp312": "23011fe29a99b591eabb3a31a25080c62e2c2f0690a3c798744e5489dae50451",
            "cp313": "c8f71aabc67bcbfc9373dc131537a5968d04edce73e88add21354a7cd0a76985"}),
        built_with={**_CU13_TOOLKIT, "libcusparse_lt": "0.8.1", "nccl": "2.30.7", "libnvshmem": "3.4.5"},
        cudnn="9.24.0.43", triton="3.8.0",
        capabilities=("7.5", "8.0", "8.6", "9.0", "10.0", "12.0"),
        substitutions=(_INERT, _RAISE_2_14, _NO_HOST_CUDA),
        remove_deps=("nvidia-*", "cuda-toolkit", "cuda-bindings"),
    ),
    # METADATA of torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl (pip's installation report, sha256 there);
    # torch.version.cuda "12.8"; capabilities as above (397 kernels each).
    "2.9.1": TorchBuild(
        version="2.9.1", cuda="12.8",
        wheels=_wheels("torch-2.9.1-{tag}-{tag}-manylinux_2_28_x86_64.whl", {
            "cp310": "9fd35c68b3679378c11f5eb73220fdcb4e6f4592295277fbb657d31fd053237c",
            "cp311": "d033ff0ac3f5400df862a51bdde9bad83561f3739ea0046e68f5401ebfa67c1b",
            "cp312": "27331cd902fb4322252657f3902adf1c4f6acad9dcad81d8df3ae14c7c4f07c4",
            "cp313": "524de44cd13931208ba2c4bde9ec7741fd4ae6bfd06409a604fc32f6520c2bc9"}),
        built_with={
            "cuda_nvrtc": "12.8.93", "cuda_cudart": "12.8.90", "cuda_cupti": "12.8.90", "libcublas": "12.8.4.1",
            "libcufft": "11.3.3.83", "libcurand": "10.3.9.90", "libcusolver": "11.7.3.90", "libcusparse": "12.5.8.93",
            "libcusparse_lt": "0.7.1", "nccl": "2.27.5", "libnvshmem": "3.3.20", "cuda_nvtx": "12.8.90",
            "libnvjitlink": "12.8.93", "libcufile": "1.13.1.3",
        },
        cudnn="9.10.2.21", triton="3.5.1",
        capabilities=("7.0", "7.5", "8.0", "8.6", "9.0", "10.0", "12.0"),
        substitutions=(_INERT, _RAISE_2_9, _NO_HOST_CUDA),
        remove_deps=("nvidia-*",),  # its METADATA pins nvidia-*-cu12 only: no cuda-toolkit, no cuda-bindings
    ),
}
#: CUDA major of a set -> the torch it gets
TORCH_FOR_MAJOR = {"13": "2.14.1", "12": "2.9.1"}
# Python requirements of both wheels (Requires-Dist without markers or extras), as python3Packages names,
# and what torch-bin's dependencies add (torch/bin/default.nix@02e4aeed): numpy (tensor <-> ndarray),
# pyyaml and requests (torch.hub, ONNX export and the profiler import them).
_DEPENDENCIES = ("filelock", "typing-extensions", "setuptools", "sympy", "networkx", "jinja2", "fsspec", "numpy",
                 "pyyaml", "requests")
# Nixpkgs' torch-bin buildInputs (torch/bin/default.nix@02e4aeed), as attributes of this set: 13 CUDA inputs.
NIXPKGS_CUDA_INPUTS = ("cuda_nvtx", "cuda_cudart", "cuda_cupti", "cuda_nvrtc", "cudnn", "libcusparse_lt", "libcublas",
                       "libcufft", "libcufile", "libcurand", "libcusolver", "libcusparse", "nccl")
# What cudapkgs adds to them, and why: the wheels' own ELF files need these libraries (readelf -d,
# torch 2.9.1 and 2.14.1): libnvJitLink.so (libtorch_cuda.so links it, as libcusparse does) and
# libnvshmem_host.so.3 (libtorch_cuda.so links NVSHMEM for symmetric memory since torch 2.8); Nixpkgs'
# 2.9.0 pin leaves them to autoPatchelf's search of torch/lib, which the PyPI wheel does not ship them in.
EXTRA_CUDA_INPUTS = ("libnvjitlink", "libnvshmem")


def torch_build_for(cuda: Any) -> TorchBuild | None:
    """The torch build a CUDA set gets (by its CUDA major), or None when PyPI has none here."""
    version = TORCH_FOR_MAJOR.get(str(cuda.cudaMajorVersion))
    return TORCH_BUILDS[version] if version else None


def _cudnn_for(cuda: Any, build: TorchBuild) -> tuple[str, Any]:
    """(attribute, package) of the cuDNN torch uses: the set's cudnn if it serves `build`, else the
    newest cudnn_X_Y that does, else the set's cudnn (then broken, saying why)."""
    from .cuda_fit import newest_fitting, runtime_fits

    own = cuda.cudnn
    if runtime_fits(build.cudnn, str(own.version), minor_only=True):
        return "cudnn", own
    from ...errors import CudapkgsError

    members = []
    for name in cuda:
        if name.startswith("cudnn_") and name[6:].replace("_", "").isdigit():
            try:
                members.append((name, cuda[name]))
            except CudapkgsError:  # its manifest is not where manifestsDir points
                continue
    return newest_fitting(build.cudnn, members, minor_only=True) or ("cudnn", own)


def torch_bin(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """torch-bin for python3Packages `ps`, rewired to ``pkgs.cudaPackages``."""
    from ... import licenses
    from ...builders.rewired_wheel import rewired_wheel
    from ...errors import EvalError
    from ...builders.rewired_wheel import refuse_unavailable
    from ...lib.fixpoint import AttrSet, lazy
    from ...meta import assertion_stream, source_meta
    from .cuda_fit import _available, _unavailable, capability_fits, iter_fits
    from .triton import _lib_output

    cuda = pkgs.cudaPackages
    build = torch_build_for(cuda)
    shown = build or TORCH_BUILDS[TORCH_FOR_MAJOR["13"]]

    def wheel() -> dict[str, str]:
        tag = "cp" + str(ps.pythonVersion).replace(".", "")
        if build is None:
            raise EvalError(f"python3Packages.torch: no torch wheel for CUDA {cuda.cudaMajorMinorVersion} "
                            f"(packaged: {', '.join(f'{v} for CUDA {b.cuda}' for v, b in TORCH_BUILDS.items())})")
        if system != "x86_64-linux" or tag not in build.wheels:
            from ..python_interpreters import no_wheel

            raise no_wheel("torch", build.version, str(ps.pythonVersion), list(build.wheels), system)
        file, sha256 = build.wheels[tag]
        return {"file": file, "sha256": sha256}

    def cudnn() -> tuple[str, Any]:
        return _cudnn_for(cuda, shown)

    def libraries() -> list[Any]:
        from ...build_inputs import get_lib

        return [get_lib(cuda[name]) for name in shown.built_with] + [get_lib(cudnn()[1])]

    def assertions() -> Iterator[dict[str, Any]]:
        """torch-bin's brokenAssertions, in order, each evaluated when read (`meta.AssertionStream`)."""
        what = f"torch {shown.version}"
        yield {"message": f"PyPI has a torch wheel for CUDA {cuda.cudaMajorVersion} (packaged: "
                          + ", ".join(f"{v} for CUDA {b.cuda}" for v, b in TORCH_BUILDS.items()) + ")",
               "assertion": build is not None}
        yield from iter_fits(what, shown.built_with, cuda)
        attr, _package = cudnn()
        for assertion in iter_fits(what, {attr: shown.cudnn}, cuda, minor_only=[attr]):
            if attr == "cudnn" and not assertion["assertion"]:  # no cudnn_X_Y serves it either
                assertion = {**assertion, "message": assertion["message"] + f"; nor does any cudnn_X_Y of {cuda.attr_path}"}
            yield assertion
        requested = list(config.cudaCapabilities)
        yield from capability_fits(what, requested, shown.capabilities)
        triton = ps.triton
        yield {"message": f"python3Packages.triton is {shown.triton}, as {what} requires (it is {triton.version})",
               "assertion": str(triton.version) == shown.triton}
        yield {"message": _unavailable("python3Packages.triton", triton), "assertion": _available(triton)}

    def tests(final: Any) -> dict[str, Any]:
        from .torch_tests import torch_tests

        return torch_tests(ps, pkgs, config, system, final)

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "torch",
            "version": shown.version,
            "wheel": lazy(wheel),
            # made when the derivation is (builders.python.lazy_list): torch is listed by its own meta
            "dependencies": lazy(lambda: [ps[name] for name in _DEPENDENCIES] + [ps.triton]),
            "buildInputs": lazy(libraries),
            "pythonRemoveDeps": list(shown.remove_deps),
            "wheelSubstitutions": lazy(lambda: [dict(s) for s in shown.substitutions] + [_nvrtc_by_path(
                f"{_lib_output(cuda.cuda_nvrtc)}/lib", shown.cuda.split(".")[0])]),
            # Nixpkgs' extraRunpaths (NixOS/nixpkgs#296179): torch dlopens nvrtc; then the wheel's $ORIGIN.
            "appendRunpaths": lazy(lambda: [f"{_lib_output(cuda.cuda_nvrtc)}/lib", "$ORIGIN"]),
            "pythonImportsCheck": ["torch"],
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "cudnn": lazy(lambda: cudnn()[1]),
                "cudaVersion": shown.cuda,
                "cudaCapabilities": shown.capabilities,
                "brokenAssertions": assertion_stream(assertions),
                "tests": lazy(lambda: tests(final)),
            }, name="python3Packages.torch.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                # Nixpkgs' words (torch/bin/default.nix@02e4aeed); the build and the set are in longDescription
                "description": "PyTorch: Tensors and Dynamic neural networks in Python with strong GPU acceleration",
                "longDescription": f"PyTorch {shown.version} (CUDA {shown.cuda} build) from its wheel, on "
                                   f"{cuda.attr_path}'s libraries",
                "homepage": "https://pytorch.org/",
                "changelog": f"https://github.com/pytorch/pytorch/releases/tag/v{shown.version}",
                "license": [licenses.bsd3, licenses.issl, licenses.unfreeRedistributable],
                "sourceProvenance": ["binaryNativeCode"],
                # Nixpkgs: aarch64-darwin, aarch64-linux, x86_64-linux; only x86_64-linux wheels are pinned here
                # (and darwin has no CUDA), so the others would be a promise the evaluation cannot keep.
                "platforms": ["x86_64-linux"],
                "hydraPlatforms": [],  # Nixpkgs: "output size 3.2G on 1.11.0": no cache builds it
            })),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


# torch/source/default.nix@00d0ced332d7b0d37844ace4493b577dd0930f88: with rocmSupport, Nixpkgs builds torch
# from source against a join of rocmPackages (its rocmtoolkit_joined, abridged here), magma-hip and
# rocmPackages.triton; CUDA and ROCm together are one of its brokenConditions.
ROCM_NEEDS = ("rocm-core", "clr", "rccl", "miopen", "aotriton", "composable_kernel", "rocrand", "rocblas",
              "rocsparse", "hipsparse", "rocfft", "rocsolver", "hipfft", "hiprand", "hipsolver", "hipblas",
              "hipblaslt", "rocm-comgr", "rocm-device-libs", "rocm-runtime")


def _why_not(config: Any) -> str:
    """Why python3Packages.torch is broken under this configuration (cudaSupport off)."""
    if config.rocmSupport:
        return ("rocmSupport is on, and no ROCm build of torch is packaged: Nixpkgs builds it from source "
                f"against rocmPackages ({', '.join(ROCM_NEEDS[:6])}, … {len(ROCM_NEEDS)} in all), magma-hip and "
                "rocmPackages.triton (torch/source/default.nix); cudapkgs has no ROCm package set and no source "
                "build of torch (2+ hours on two cores). For NVIDIA GPUs use pkgsCuda.python3Packages.torch")
    return ("cudaSupport is on (python3Packages.torch is PyTorch's CUDA wheel, torch-bin; cudapkgs "
            "packages no CPU build: use pkgsCuda.python3Packages.torch or set cudaSupport = true)")


def torch(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.torch: torch-bin with cudaSupport on (and rocmSupport off); else a package saying why
    it is broken (with rocmSupport: what a ROCm build would need; both on: Nixpkgs' "CUDA and ROCm are
    mutually exclusive")."""
    if config.cudaSupport and not config.rocmSupport:
        return ps["torch-bin"]
    from ...builders.rewired_wheel import refuse_unavailable
    from ...lib.fixpoint import AttrSet, lazy
    from ...meta import source_meta
    from ...stdenv import mk_derivation

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "torch", "version": str(ps["torch-bin"].version), "stdenvCc": None,  # what pkgsCuda would give
            # outPath and drvPath refuse, with the reason, as Nixpkgs' check-meta makes them throw
            "src": lazy(lambda: refuse_unavailable(config, final)), "dontUnpack": True,
            "passthru": AttrSet({"brokenAssertions": [
                {"message": "CUDA and ROCm are not both on (they are mutually exclusive)",
                 "assertion": not (config.cudaSupport and config.rocmSupport)},
                {"message": _why_not(config), "assertion": config.cudaSupport},
            ]}, name="python3Packages.torch.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "PyTorch (CUDA builds only: see pkgsCuda.python3Packages.torch)",
                "platforms": ["x86_64-linux"]})),
        }

    return mk_derivation(config, attrs, system=system, name="python3Packages.torch")
