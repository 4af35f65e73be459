"""Package file (`cudapkgs build -f bench/device/opencv_packages.py ATTR`) of the measured OpenCV builds.

The reduced module sets of docs/opencv.md: `opencv_cpu_reduced` (core, imgproc),
`opencv_cuda_reduced` (core, imgproc, cudev, cudaarithm, cudafilters, cudawarping: the
set's capabilities, e.g. ``pkgsForCudaArch.sm_90`` of ``cudaPackages_13_0.pkgs``), and
`opencv_gpu_proof` (the Python bindings of what bench/device/check_opencv.py calls:
that CUDA set plus cudaimgproc for cvtColor).  All three without the accuracy tests and
without LTO (the measured build is the library, not its tests; LTO's link step is
measured apart, docs/bench-build.md).
"""

REDUCED_CPU = ["core", "imgproc"]
REDUCED_CUDA = ["core", "imgproc", "cudev", "cudaarithm", "cudafilters", "cudawarping"]
GPU_PROOF = REDUCED_CUDA + ["cudaimgproc"]


def opencv_cpu_reduced(opencv4):
    """OpenCV's core and imgproc, no CUDA (whatever config.cudaSupport says)."""
    return opencv4.override(enableCuda=False, enabledModules=REDUCED_CPU, runAccuracyTests=False, enableLto=False)


def opencv_cuda_reduced(opencv4):
    """The reduced CUDA module set for the package tree's CUDA set and capabilities."""
    return opencv4.override(enableCuda=True, enabledModules=REDUCED_CUDA, runAccuracyTests=False, enableLto=False)


def opencv_gpu_proof(opencv4, python3Packages):
    """cv2 with the modules of the GPU proof (python3Packages.opencv4 reduced to them)."""
    return opencv4.override(enableCuda=True, enabledModules=GPU_PROOF, runAccuracyTests=False, enableLto=False,
                            enablePython=True, pythonPackages=python3Packages)


def opencv_cpu_python(opencv4, python3Packages):
    """cv2 of the reduced CPU build (core, imgproc), for the import check without CUDA."""
    return opencv4.override(enableCuda=False, enabledModules=REDUCED_CPU, runAccuracyTests=False, enableLto=False,
                            enablePython=True, pythonPackages=python3Packages)
