"""Package file (`cudapkgs build -f bench/device/opencv_packages.py ATTR`) of the measured OpenCV builds.

The reduced module sets of docs/opencv.md: `opencv_cpu_reduced` (core, imgproc),
`opencv_cuda_reduced` (core, imgproc, cudev, cudaarithm, cudafilters, cudawarping: the
set's capabilities, e.g. ``pkgsForCudaArch.sm_90`` of ``cudaPackages_13_0.pkgs``), and
`opencv_gpu_proof` (the Python bindings of what bench/device/check_opencv.py calls:
that CUDA set plus cudaimgproc for cvtColor; no cuFFT, whose 214 MB wheel the GPU
machine would need carried for nothing).  All without the accuracy tests, without LTO and
without image codecs (the measured build is the library, not its tests or codecs).
"""

REDUCED_CPU = ["core", "imgproc"]
REDUCED_CUDA = ["core", "imgproc", "cudev", "cudaarithm", "cudafilters", "cudawarping"]
GPU_PROOF = REDUCED_CUDA + ["cudaimgproc"]
# No image codecs: OpenCV builds its bundled 3rdparty codec libraries whenever WITH_<codec> is on, also
# for a BUILD_LIST without imgcodecs (measured: libjpeg-turbo was compiled for core,imgproc).
NO_CODECS = {"enableJPEG": False, "enablePNG": False, "enableTIFF": False, "enableWebP": False, "enableEXR": False,
             "enableJPEG2000": False}
LEAN = {"runAccuracyTests": False, "enableLto": False, **NO_CODECS}


def opencv_cpu_reduced(opencv4):
    """OpenCV's core and imgproc, no CUDA (whatever config.cudaSupport says)."""
    return opencv4.override(enableCuda=False, enabledModules=REDUCED_CPU, **LEAN)


def opencv_cuda_reduced(opencv4, python3Packages):
    """The reduced CUDA module set for the package tree's CUDA set and capabilities, with cv2 (the
    python3 module: the import check of `cv2.cuda` here needs it, and one build on two cores is
    what this machine affords)."""
    return opencv4.override(enableCuda=True, enabledModules=REDUCED_CUDA, **LEAN, enablePython=True,
                            pythonPackages=python3Packages)


def opencv_cuda_reduced_env(python3Packages, opencv_cuda_reduced):
    """A Python with the reduced CUDA cv2 and numpy."""
    return python3Packages.withPackages([opencv_cuda_reduced])


def opencv_gpu_proof(opencv4, python3Packages):
    """cv2 with the modules of the GPU proof (python3Packages.opencv4 reduced to them)."""
    return opencv4.override(enableCuda=True, enabledModules=GPU_PROOF, **LEAN, enableCufft=False,
                            enablePython=True, pythonPackages=python3Packages)


def opencv_cpu_python(opencv4, python3Packages):
    """cv2 of the reduced CPU build (core, imgproc), for the import check without CUDA."""
    return opencv4.override(enableCuda=False, enabledModules=REDUCED_CPU, **LEAN,
                            enablePython=True, pythonPackages=python3Packages)


def opencv_gpu_env(python3Packages, opencv_gpu_proof):
    """A Python whose bin/python3 has the GPU-proof cv2 and numpy (for check_opencv.py under env -i)."""
    return python3Packages.withPackages([opencv_gpu_proof])


def opencv_cpu_env(python3Packages, opencv_cpu_python):
    """A Python with the reduced CPU cv2 and numpy."""
    return python3Packages.withPackages([opencv_cpu_python])


def opencv_torch_env(python3Packages, opencv_cuda_reduced):
    """One Python with the reduced CUDA cv2 and the set's torch (Nixpkgs' tests.opencv-and-torch pairing):
    both must map one libcudart, the set's."""
    return python3Packages.withPackages([opencv_cuda_reduced, python3Packages.torch])


def opencv_gpu_torch_env(python3Packages, opencv_gpu_proof):
    """The GPU-proof cv2 (cudart shared) and the set's torch in one Python: one libcudart, the set's."""
    return python3Packages.withPackages([opencv_gpu_proof, python3Packages.torch])


def opencv_cpu_torch_env(python3Packages, opencv_cpu_python):
    """The reduced CPU cv2 and the set's torch in one Python (where no CUDA cv2 is built)."""
    return python3Packages.withPackages([opencv_cpu_python, python3Packages.torch])


def opencv_gpu_proof_no_cublas(opencv4, python3Packages):
    """The GPU proof's modules without cuBLAS (no gemm check): 11 pieces to carry instead of 19."""
    return opencv4.override(enableCuda=True, enabledModules=GPU_PROOF, **LEAN, enableCufft=False, enableCublas=False,
                            enablePython=True, pythonPackages=python3Packages)


def opencv_gpu_env_no_cublas(python3Packages, opencv_gpu_proof_no_cublas):
    """A Python with `opencv_gpu_proof_no_cublas`."""
    return python3Packages.withPackages([opencv_gpu_proof_no_cublas])


def opencv4_torch_env(python3Packages):
    """The set's `opencv4` with CUDA (as `cudaPackages.tests.opencv-and-torch` builds it: every default module,
    contrib's CUDA modules) and the set's torch in one Python, for check_opencv_torch.py's one-libcudart check."""
    return python3Packages.withPackages([python3Packages.opencv4.override(enableCuda=True), python3Packages.torch])


def opencv4_cuda(python3Packages):
    """The set's `python3Packages.opencv4` with CUDA, as `cudaPackages.tests.opencv-and-torch` builds it."""
    return python3Packages.opencv4.override(enableCuda=True)
