"""OpenCV 4.11.0 against CUDA 13: the source changes its build needs, applied in postPatch.

Nixpkgs (4.x.nix@01fb069e) builds OpenCV 4.11.0 with its default CUDA 12 set only. Built here
against CUDA 13.0 (NVIDIA's wheels), it fails in three places, each an API that CUDA 13 removed
(measured: the reduced CUDA build on 2026-12-06, docs/opencv.md "CUDA 13"):

* NPP 13 has no ``nppGetStreamContext`` (modules/core/include/opencv2/core/private.cuda.hpp):
  the NppStreamContext is filled from the CUDA runtime instead, field by field as nppdefs.h
  documents each one ("From cudaGetDevice()", "From cudaGetDeviceProperties()", …);
* ``cudaDeviceProp`` lost ``clockRate``, ``memoryClockRate``, ``kernelExecTimeoutEnabled``,
  ``maxTexture1DLinear``, ``deviceOverlap`` and ``computeMode`` (CUDA 13.0 driver_types.h; each
  is a ``cudaDeviceAttr`` still): modules/core/src/cuda_info.cpp reads them through
  ``cudaDeviceGetAttribute``;
* CCCL 3 (CUDA 13's Thrust/CUB) needs C++17, and OpenCV's CUDA-language detection pins
  ``CMAKE_CUDA_STANDARD 14`` (cmake/OpenCVDetectCUDALanguage.cmake): 17.

With opencv_contrib (copied to ``opencv_contrib/`` under the source root by postUnpack), one more:

* CCCL 3 removed Thrust's C++98 function adaptors (``thrust::not1``, ``thrust::identity``, deprecated
  since CCCL 2.x): opencv_contrib's videostab/src/cuda/global_motion.cu passes
  ``thrust::not1(thrust::identity<uchar>())`` to ``thrust::remove_copy_if``, a predicate that is true
  for a zero mask byte: ``thrust::logical_not<uchar>()`` is the same predicate (measured: the whole
  opencv4 with contrib's CUDA modules failed there on the lent H100, 2026-12-06).

Each replacement must match (``substituteInPlace --replace-fail``), so an OpenCV version that
changed these lines fails its patch phase instead of building something else.  Modules outside
the reduced sets (cudaobjdetect, cudalegacy, cudacodec, …) were not built against CUDA 13 here.
"""

from __future__ import annotations

import shlex

__all__ = ["CONTRIB_REPLACEMENTS", "REPLACEMENTS", "post_patch"]

_ATTR_HELPER = """#ifdef HAVE_CUDA
static int cudapkgsDeviceAttribute(cudaDeviceAttr attribute, int device)
{
    int value = 0;
    cudaSafeCall( cudaDeviceGetAttribute(&value, attribute, device) );
    return value;
}
#endif

int cv::cuda::DeviceInfo::clockRate() const"""

# (file, old, new): every old must occur in the file.
REPLACEMENTS: tuple[tuple[str, str, str], ...] = (
    ("modules/core/include/opencv2/core/private.cuda.hpp",
     "nppSafeCall(nppGetStreamContext(&nppStreamContext));",
     "int cudapkgsDevice = 0;\n"
     "            cudaSafeCall(cudaGetDevice(&cudapkgsDevice));\n"
     "            nppStreamContext.nCudaDeviceId = cudapkgsDevice;\n"
     "            cudaSafeCall(cudaDeviceGetAttribute(&nppStreamContext.nMultiProcessorCount, cudaDevAttrMultiProcessorCount, cudapkgsDevice));\n"
     "            cudaSafeCall(cudaDeviceGetAttribute(&nppStreamContext.nMaxThreadsPerMultiProcessor, cudaDevAttrMaxThreadsPerMultiProcessor, cudapkgsDevice));\n"
     "            cudaSafeCall(cudaDeviceGetAttribute(&nppStreamContext.nMaxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock, cudapkgsDevice));\n"
     "            int cudapkgsSharedMemory = 0;\n"
     "            cudaSafeCall(cudaDeviceGetAttribute(&cudapkgsSharedMemory, cudaDevAttrMaxSharedMemoryPerBlock, cudapkgsDevice));\n"
     "            nppStreamContext.nSharedMemPerBlock = (size_t)cudapkgsSharedMemory;\n"
     "            cudaSafeCall(cudaDeviceGetAttribute(&nppStreamContext.nCudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMajor, cudapkgsDevice));\n"
     "            cudaSafeCall(cudaDeviceGetAttribute(&nppStreamContext.nCudaDevAttrComputeCapabilityMinor, cudaDevAttrComputeCapabilityMinor, cudapkgsDevice));"),
    ("modules/core/src/cuda_info.cpp", "int cv::cuda::DeviceInfo::clockRate() const", _ATTR_HELPER),
    ("modules/core/src/cuda_info.cpp", "return deviceProps().get(device_id_)->clockRate;",
     "return cudapkgsDeviceAttribute(cudaDevAttrClockRate, device_id_);"),
    ("modules/core/src/cuda_info.cpp", "return deviceProps().get(device_id_)->kernelExecTimeoutEnabled != 0;",
     "return cudapkgsDeviceAttribute(cudaDevAttrKernelExecTimeout, device_id_) != 0;"),
    ("modules/core/src/cuda_info.cpp", "return tbl[deviceProps().get(device_id_)->computeMode];",
     "return tbl[cudapkgsDeviceAttribute(cudaDevAttrComputeMode, device_id_)];"),
    ("modules/core/src/cuda_info.cpp", "return deviceProps().get(device_id_)->maxTexture1DLinear;",
     "return cudapkgsDeviceAttribute(cudaDevAttrMaxTexture1DLinearWidth, device_id_);"),
    ("modules/core/src/cuda_info.cpp", "return deviceProps().get(device_id_)->memoryClockRate;",
     "return cudapkgsDeviceAttribute(cudaDevAttrMemoryClockRate, device_id_);"),
    ("modules/core/src/cuda_info.cpp", "prop.clockRate * 1e-6f", "cudapkgsDeviceAttribute(cudaDevAttrClockRate, dev) * 1e-6f"),
    ("modules/core/src/cuda_info.cpp", "(prop.deviceOverlap ? \"Yes\" : \"No\")",
     "(cudapkgsDeviceAttribute(cudaDevAttrGpuOverlap, dev) ? \"Yes\" : \"No\")"),
    ("modules/core/src/cuda_info.cpp", "prop.kernelExecTimeoutEnabled ? \"Yes\" : \"No\"",
     "cudapkgsDeviceAttribute(cudaDevAttrKernelExecTimeout, dev) ? \"Yes\" : \"No\""),
    ("modules/core/src/cuda_info.cpp", "computeMode[prop.computeMode]",
     "computeMode[cudapkgsDeviceAttribute(cudaDevAttrComputeMode, dev)]"),
    ("cmake/OpenCVDetectCUDALanguage.cmake", "set(CMAKE_CUDA_STANDARD 14)", "set(CMAKE_CUDA_STANDARD 17)"),
)


# (file under the source root, old, new) for opencv_contrib 4.11.0's sources, applied only when contrib is copied in
CONTRIB_REPLACEMENTS = (
    ("opencv_contrib/videostab/src/cuda/global_motion.cu", "thrust::not1(thrust::identity<uchar>())",
     "thrust::logical_not<uchar>()"),
)


def post_patch(contrib: bool = False) -> str:
    """Bash: one ``substituteInPlace FILE --replace-fail OLD NEW`` per file (needs SUBSTITUTE_IN_PLACE defined);
    with `contrib`, CONTRIB_REPLACEMENTS too (their files exist only when opencv_contrib was copied in)."""
    by_file: dict[str, list[tuple[str, str]]] = {}
    for path, old, new in REPLACEMENTS + (CONTRIB_REPLACEMENTS if contrib else ()):
        by_file.setdefault(path, []).append((old, new))
    lines = []
    for path, pairs in by_file.items():
        words = [shlex.quote(path)] + [w for old, new in pairs for w in ("--replace-fail", shlex.quote(old), shlex.quote(new))]
        lines.append("substituteInPlace " + " ".join(words))
    return "\n".join(lines) + "\n"
