"""python3Packages.onnxruntime: ONNX Runtime from the ``onnxruntime-gpu`` wheel, rewired to the set's libraries.

Nixpkgs' python3Packages.onnxruntime (pkgs/development/python-modules/onnxruntime/default.nix@eea9fc6f)
installs the wheel its C++ ``onnxruntime`` build made, with autoPatchelfHook over libcublas,
libcurand, libcufft, cudnn, cuda_cudart and nccl when that build has CUDA, removes the
``flatbuffers``, ``protobuf`` and ``sympy`` requirements (``pythonRemoveDeps``: the Python
package does not need them to run a model) and propagates numpy and packaging.  Building ONNX
Runtime from source is out of reach on two cores (a deviation, as torch-bin), so cudapkgs takes
Microsoft's ``onnxruntime-gpu`` wheel from PyPI and rewires it like torch
(`cudapkgs.builders.rewired_wheel`).  What 1.31.1 (a CUDA 13.0 build:
``onnxruntime/capi/build_and_package_info.py`` says ``cuda_version = '13.0'``) needs (``readelf -d``,
``strings``, 2026-12-06):

* ``libonnxruntime_providers_cuda.so``: DT_NEEDED ``libcublasLt.so.13``, ``libcublas.so.13``,
  ``libcurand.so.10``, ``libcudart.so.13`` (the set's, through its RUNPATH) and ``libcuda.so.1``
  (the driver's directory); it dlopens cuDNN, cuFFT and NVRTC, so their lib directories are
  appended to the RUNPATH, as for JAX's plugin; cuDNN is the one the set's torch uses
  (`jax.set_library`), so a process with torch and ONNX Runtime loads one cuDNN;
* ``libonnxruntime_providers_tensorrt.so``: ``libnvinfer.so.10``, ``libnvonnxparser.so.10``, cuDNN,
  cuBLAS, cudart: linked to the set's ``tensorrt`` where it is available and of major 10; elsewhere
  those two are left unresolved and ``passthru.tensorrtProvider`` and the description say why.
  ``get_available_providers()`` still lists ``TensorrtExecutionProvider`` (it lists the providers
  compiled in, not those that load), so the tests do not count it: ``tests.cpu`` checks that its
  library fails to load naming ``libnvinfer.so.10`` (a host TensorRT found instead fails the test),
  and ``tests.cuda.gpu`` that a session asking for TensorRT then CUDA runs on CUDA (ONNX Runtime's
  Python layer retries with CUDA and CPU when a provider fails: ``InferenceSession.__init__`` in
  ``onnxruntime/capi/onnxruntime_inference_collection.py`` of 1.31.1).  Nixpkgs' own onnxruntime (pkgs/by-name/on/onnxruntime/package.nix@02688433)
  builds no TensorRT provider at all (no ``onnxruntime_USE_TENSORRT``), so it lists none;
* ``onnxruntime.preload_dlls()`` loads CUDA and cuDNN from ``nvidia/`` trees on ``sys.path`` and the
  system: made to return at once (every library comes through a RUNPATH).

CUDA 12 sets: 1.31.1 is a CUDA 13 build, so there it is broken, naming the CUDA 13 sets.
sha256 of each file: https://pypi.org/pypi/onnxruntime-gpu/json (2026-12-06); 1.31.1 requires
Python >= 3.11 (no cp310 wheel).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ORT_VERSION", "ORT_WHEELS", "onnxruntime"]

ORT_VERSION = "1.31.1"
ORT_CUDA = "13.0"
ORT_WHEELS = {tag: (f"onnxruntime_gpu-1.31.1-{tag}-{tag}-manylinux_2_28_x86_64.whl", digest) for tag, digest in {
    "cp311": "e26c475fe361b2015f45b4b824bd13f0bb20204e59b62814e6f0acd5f3d491a6",
    "cp312": "05d548956197b9d01f59b625de740e0d6be3593f874e241a12dc0362650ecdf7",
    "cp313": "f659529e07c21ec6b6179fd1bfaf82ffb7c3dc9c0916e18f6f313f9a690891be"}.items()}
# DT_NEEDED of the CUDA provider; dlopened by it
_NEEDED = ("libcublas", "libcurand", "cuda_cudart")
_DLOPENED = ("cudnn", "libcufft", "cuda_nvrtc")
_TENSORRT_NEEDED = ("libnvinfer.so.10", "libnvonnxparser.so.10")

_NO_PRELOAD = {"file": "onnxruntime/__init__.py", "replace": [[
    '    if platform.system() not in ["Windows", "Linux"]:\n        return\n',
    "    return  # cudapkgs: every CUDA library comes through a RUNPATH, never from nvidia/ on sys.path\n",
]]}

# get_available_providers() lists the providers compiled into the wheel (TensorRT, CUDA, CPU), not those that
# load: the TensorRT one counts only where it is linked (TENSORRT_LINKED, set per package); elsewhere its library
# must fail to load naming TensorRT's (not find a host libnvinfer), and the test says so.
CPU_TEST = """\
import ctypes, os, onnxruntime as ort
providers = ort.get_available_providers()
assert "CUDAExecutionProvider" in providers and "CPUExecutionProvider" in providers, providers
library = os.path.join(os.path.dirname(ort.__file__), "capi", "libonnxruntime_providers_tensorrt.so")
if TENSORRT_LINKED:
    tensorrt = "linked to the set's TensorRT"
else:
    try:
        ctypes.CDLL(library)
    except OSError as error:
        assert "libnvinfer.so.10" in str(error) or "libnvonnxparser.so.10" in str(error), error
        tensorrt = "not usable (" + str(error).split(":")[0] + " is not linked)"
    else:
        raise AssertionError(library + " loaded, though the package links no TensorRT")
print(f"PASS: onnxruntime {ort.__version__}: CUDA and CPU providers listed; TensorRT provider {tensorrt}")
"""
# torch (the set's) exports the model, and ONNX Runtime must give torch's result. torch.onnx.export imports the
# `onnx` package (its TorchScript exporter serializes through it: "Module onnx is not installed!" otherwise, seen
# on the lent H100 on 2026-12-06, where this test first ran), so the test has onnx beside torch.
GPU_TEST = """\
import io, numpy, torch, onnxruntime as ort
model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
x = torch.randn(4, 16)
buffer = io.BytesIO()
torch.onnx.export(model, (x,), buffer, input_names=["x"], output_names=["y"], dynamo=False)
# fp32 against torch's fp32 on the CPU: the CUDA provider's TF32 (on by default, Ampere and newer) is turned off,
# or its GEMMs are 1e-3 apart (seen on the lent H100, 2026-12-06)
session = ort.InferenceSession(buffer.getvalue(), providers=[("CUDAExecutionProvider", {"use_tf32": "0"})])
assert session.get_providers()[0] == "CUDAExecutionProvider", session.get_providers()
(got,) = session.run(None, {"x": x.numpy()})
numpy.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
if not TENSORRT_LINKED:  # its library does not load: the session falls back to CUDA (never a host TensorRT)
    fallback = ort.InferenceSession(buffer.getvalue(), providers=["TensorrtExecutionProvider", "CUDAExecutionProvider"])
    assert "TensorrtExecutionProvider" not in fallback.get_providers(), fallback.get_providers()
print(f"PASS: onnxruntime {ort.__version__}: {session.get_providers()[0]} equals torch's result")
"""


def onnxruntime(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.onnxruntime for `ps`, rewired to ``pkgs.cudaPackages`` (a CUDA 13 set)."""
    from ... import licenses
    from ...build_inputs import get_lib
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy
    from ...meta import source_meta
    from .companions import companion_test, pick_wheel, sets_with
    from .cuda_fit import _available
    from .jax import set_library
    from .triton import _lib_output

    cuda = pkgs.cudaPackages

    def tensorrt() -> tuple[Any | None, str]:
        """(the set's tensorrt when the provider can link it, else None; why, in words)."""
        package = cuda.get("tensorrt") if hasattr(cuda, "get") else (cuda["tensorrt"] if "tensorrt" in cuda else None)
        if package is None:
            return None, f"{cuda.attr_path} has no tensorrt"
        if str(package.version).split(".")[0] != "10":
            return None, f"the provider needs TensorRT 10 (libnvinfer.so.10); {cuda.attr_path}.tensorrt is {package.version}"
        if not _available(package):
            return None, f"{cuda.attr_path}.tensorrt {package.version} is not available here (no configured fetcher has it)"
        return package, f"linked to {cuda.attr_path}.tensorrt {package.version}"

    def libraries() -> list[Any]:
        found = [get_lib(cuda[name]) for name in _NEEDED]
        trt = tensorrt()[0]
        return found + [get_lib(set_library(cuda, "cudnn"))] + ([get_lib(trt)] if trt is not None else [])

    def assertions() -> list[dict[str, Any]]:
        ok = str(cuda.cudaMajorVersion) == ORT_CUDA.split(".")[0]
        message = f"onnxruntime-gpu {ORT_VERSION} is a CUDA {ORT_CUDA} build; {cuda.attr_path} is CUDA " \
                  f"{cuda.cudaMajorMinorVersion}"
        if not ok:
            names = sets_with(pkgs, lambda s: str(s.cudaMajorVersion) == ORT_CUDA.split(".")[0])
            message += f" (sets that have it: {', '.join(names)}; use one's .pkgs)"
        return [{"message": message, "assertion": ok}]

    def tests(final: Any) -> dict[str, Any]:
        linked = str(tensorrt()[0] is not None)
        return {"cpu": companion_test(ps, pkgs, system, final, "providers",
                                      CPU_TEST.replace("TENSORRT_LINKED", linked), cuda=False),
                "cuda": {"gpu": companion_test(ps, pkgs, system, final, "inferenceSession",
                                               GPU_TEST.replace("TENSORRT_LINKED", linked), cuda=True,
                                               extra=[ps["torch-bin"].derivation, ps.onnx.derivation])}}

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "onnxruntime", "version": ORT_VERSION,
            "wheel": lazy(lambda: pick_wheel("onnxruntime", ORT_VERSION, ORT_WHEELS, str(ps.pythonVersion), system)),
            "dependencies": lazy(lambda: [ps.numpy, ps.packaging]),
            "pythonRemoveDeps": ["flatbuffers", "protobuf"],  # as Nixpkgs (sympy is only an extra's here)
            "buildInputs": lazy(libraries),
            "wheelSubstitutions": [dict(_NO_PRELOAD)],
            "appendRunpaths": lazy(lambda: [*(f"{_lib_output(set_library(cuda, n))}/lib" for n in _DLOPENED), "$ORIGIN"]),
            "autoPatchelfIgnoreMissingDeps": lazy(lambda: [] if tensorrt()[0] is not None else list(_TENSORRT_NEEDED)),
            "pythonImportsCheck": ["onnxruntime"],
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "tensorrtProvider": lazy(lambda: tensorrt()[1]),
                "brokenAssertions": lazy(assertions),
                "tests": lazy(lambda: tests(final)),
            }, name="python3Packages.onnxruntime.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": f"ONNX Runtime {ORT_VERSION} from the onnxruntime-gpu wheel (a CUDA {ORT_CUDA} build) "
                               f"on a CUDA {ORT_CUDA.split('.')[0]} set's libraries",
                "longDescription": f"on {cuda.attr_path}'s libraries; TensorRT provider: {tensorrt()[1]}",
                "homepage": "https://onnxruntime.ai/",
                "changelog": f"https://github.com/microsoft/onnxruntime/releases/tag/v{ORT_VERSION}",
                "license": [licenses.mit],
                "sourceProvenance": ["binaryNativeCode"],
                "platforms": ["x86_64-linux"],
            })),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)
