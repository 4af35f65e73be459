"""opencv4: OpenCV 4.11.0 (with opencv_contrib) built from source with CMake, optionally with CUDA.

Follows Nixpkgs' pkgs/development/libraries/opencv/4.x.nix@01fb069ed21e61f09d3205e3f4949d8e65fbf4c4
(cited as 4.x.nix below):

* the options and their defaults: ``enableCuda ? config.cudaSupport``, ``enableCublas ?
  enableCuda``, ``enableCufft ? enableCuda``, ``enableCudnn ? false`` (its closure cost),
  ``enableContrib ? true``, ``enablePython ? false``, ``enableLto ? true``, ``enableUnfree ?
  false``, ``enableIpp ? false``, ``runAccuracyTests ? true`` (``BUILD_TESTS`` and a
  ``package_tests`` output), ``runPerformanceTests ? false``, ``enabledModules ? []``
  (``BUILD_LIST``; empty: OpenCV's default, every module);
* ``effectiveStdenv``: with CUDA the set's backendStdenv (here: the compiler nvcc was set up
  with, `stdenv.default_cc`), else the top level's;
* contrib copied into the source root in postUnpack and named by ``OPENCV_EXTRA_MODULES_PATH``;
  the ``CMakeLists.txt`` block adding standard search paths deleted in postPatch; the build
  info elided in postConfigure; ``opencv4.pc``'s doubled prefixes repaired in postInstall;
* CUDA: ``WITH_CUDA``/``WITH_CUBLAS``/``WITH_CUFFT``/``WITH_CUDNN``, ``CUDA_FAST_MATH``,
  ``CUDA_NVCC_FLAGS=--expt-relaxed-constexpr``, ``CUDA_ARCH_BIN`` = the set's
  ``flags.cmakeCudaArchitecturesString``, inputs cuda_cudart, cuda_cccl, libnpp (+ libcublas,
  libcufft, cudnn by option), cuda_nvcc native; OpenCVConfig.cmake's exact-CUDA-version
  requirement relaxed; outputs ``out`` and ``cxxdev`` (``cudaPropagateToOutput``).

Where this differs, and why (docs/opencv.md says the same):

* ``CUDA_ARCH_PTX``: 4.x.nix always passes the last capability; here PTX is emitted only when
  the set's ``cudaForwardCompat`` is on (``flags.cudaForwardCompat``), as the set's
  ``flags.gencode`` does, so ``pkgsForCudaArch.sm_89.opencv`` is SASS 8.9 only (the seeds'
  meaning of a per-architecture variant).
* CUDA is found through CMake's FindCUDAToolkit (OpenCV's ``ENABLE_CUDA_FIRST_CLASS_LANGUAGE``)
  instead of the deprecated FindCUDA (CMake policy CMP0146): FindCUDA guesses a single
  toolkit root and falls back to ``/usr/local/cuda``, which split outputs do not have and a
  host may (this machine has one). configure fails if ``/usr/local/cuda`` or ``/usr/lib`` CUDA
  libraries appear in CMakeCache.txt.
* Image codecs and other third-party libraries cudapkgs does not package come from OpenCV's
  own ``3rdparty/`` sources (`BUNDLED`); zlib is cudapkgs' ``zlib``.  Options whose library
  cudapkgs does not have (ffmpeg, GStreamer, VA, Eigen, BLAS, GTK, VTK, TBB, Tesseract, OVIS,
  gphoto2, dc1394, docs) default to off; turning one on is an evaluation error naming it.
  OpenMP and OpenCL are off (the host's libgomp / libOpenCL would enter the closure).  What no
  option names is never looked for on the host either (`HOST_ONLY`: HDF5 for contrib's hdf,
  glog/gflags/Ceres for sfm, OGRE for ovis, those modules off; `HOST_FEATURES_OFF`: AVIF, ccache),
  and configure fails if CMake's cache names a host library or header directory anyway
  (`POST_CONFIGURE`).
* Modules whose data files Nixpkgs fetches from GitHub (opencv_3rdparty, ADE) are off unless
  built from a list that excludes them: gapi (ADE), xfeatures2d, face, wechat_qrcode.  The
  sdist carries none of those files.
* cudacodec needs NVIDIA's Video Codec SDK (nvcuvid/nvencode), a manual download under
  NVIDIA's terms (Nixpkgs' ``nvidia-video-sdk`` is ``requireFile`` too): off
  (``WITH_NVCUVID``/``WITH_NVCUVENC`` off).  cudaoptflow is built without the NVIDIA Optical
  Flow SDK 2.0 headers (Nixpkgs' ``nvidia-optical-flow-sdk`` and cuda_opt_flow.patch):
  ``NVIDIA_OPTICAL_FLOW_2_0_HEADERS_PATH`` is not given.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ...errors import EvalError
from ...lib.fixpoint import AttrSet, lazy
from ..from_source import cmake_bool, cmake_feature
from .python_paths import python_paths
from .sources import VERSION, sources

__all__ = ["BUNDLED", "HOST_FEATURES_OFF", "HOST_ONLY", "host_library_dirs", "POST_CONFIGURE", "cmake_cuda_architectures", "CUDA_MODULES", "REDUCED_CPU", "REDUCED_CUDA", "UNPACKAGED", "opencv4", "check_cuda"]

# opencv_contrib's CUDA modules (opencv_contrib 4.11.0 modules/cuda*).
CUDA_MODULES = (
    "cudev", "cudaarithm", "cudafilters", "cudaimgproc", "cudawarping", "cudafeatures2d", "cudastereo",
    "cudaoptflow", "cudabgsegm", "cudaobjdetect", "cudalegacy",
)
# The module sets of the measured builds (docs/bench-build.md, docs/opencv.md).
REDUCED_CPU = ("core", "imgproc")
REDUCED_CUDA = ("core", "imgproc", "cudev", "cudaarithm", "cudafilters", "cudawarping")
# OpenCV's bundled 3rdparty sources used (BUILD_<X>=ON) because cudapkgs packages no such library.
BUNDLED = {
    "BUILD_JPEG": "libjpeg-turbo", "BUILD_PNG": "libpng", "BUILD_TIFF": "libtiff", "BUILD_WEBP": "libwebp",
    "BUILD_OPENJPEG": "openjpeg", "BUILD_OPENEXR": "openexr", "BUILD_PROTOBUF": "protobuf",
}
# Nixpkgs options whose library cudapkgs does not package: (option, Nixpkgs default, cmake flag).
UNPACKAGED = (
    ("enableFfmpeg", "ffmpeg", "WITH_FFMPEG"), ("enableGStreamer", "gst_all_1", "WITH_GSTREAMER"),
    ("enableVA", "libva", "WITH_VA"), ("enableEigen", "eigen", "WITH_EIGEN"), ("enableBlas", "blas", "WITH_LAPACK"),
    ("enableGtk2", "gtk2", "WITH_GTK_2_X"), ("enableGtk3", "gtk3", "WITH_GTK"), ("enableVtk", "vtk", "WITH_VTK"),
    ("enableTbb", "tbb", "WITH_TBB"), ("enableTesseract", "tesseract", "WITH_TESSERACT"), ("enableOvis", "ogre", None),
    ("enableGPhoto2", "libgphoto2", "WITH_GPHOTO2"), ("enableDC1394", "libdc1394", "WITH_1394"),
    ("enableDocs", "doxygen", "BUILD_DOCS"),
)
# Modules needing files Nixpkgs fetches from GitHub at configure time (4.x.nix: ade, vgg, boostdesc, face,
# wechat_qrcode); none is in the PyPI sdist.
NEEDS_DOWNLOAD = ("gapi", "xfeatures2d", "face", "wechat_qrcode")  # gapi: also WITH_ADE off

# Nixpkgs' postPatch: drop the block that adds /usr paths to FIND_LIBRARY's search (4.x.nix).
POST_PATCH = r"""sed -i '/Add these standard paths to the search paths for FIND_LIBRARY/,/^\s*$/{d}' CMakeLists.txt
"""
# With LTO (4.x.nix's default) and CUDA as a CMake language, OpenCV hands its C++ flags, -flto=auto among them,
# to nvcc's host compiler (`-Xcompiler=${CMAKE_CXX_FLAGS_CUDA}`, cmake/OpenCVUtils.cmake, after CUDA_NVCC_FLAGS:
# a -fno-lto there loses). Every .cu object's host code then carries nvcc's fatbin as top-level asm with the
# same local label, and GCC's LTO emits all top-level asm into one partition: "symbol `fatbinData' is already
# defined" linking libopencv_core (measured here: the whole sm_90 build, GCC 12.2, 2 cores; GCC 13.3 on 16
# cores linked). The CUDA objects' host code is compiled without LTO; C and C++ objects keep it.
CUDA_NO_LTO = ("substituteInPlace cmake/OpenCVDetectCUDALanguage.cmake --replace-fail "
               "'set(CMAKE_CXX_FLAGS_CUDA ${CMAKE_CXX_FLAGS})' "
               "'set(CMAKE_CXX_FLAGS_CUDA ${CMAKE_CXX_FLAGS})\n"
               "string(REGEX REPLACE \"-flto(=[a-z0-9]+)?\" \"\" CMAKE_CXX_FLAGS_CUDA \"${CMAKE_CXX_FLAGS_CUDA}\")'\n")
POST_UNPACK_CONTRIB = 'cp -r --no-preserve=mode "$contribSrc/modules" "$NIX_BUILD_TOP/source/opencv_contrib"\n'
# Libraries 4.x.nix links that cudapkgs packages no version of: their modules are off and CMake may not look
# for them on the host (option, Nixpkgs' input, CMake package, module). Nixpkgs' hdf5 feeds contrib's `hdf`;
# without it, CMake found the GPU machine's Ubuntu libhdf5_serial and linked libopencv_hdf to it (measured: the
# whole opencv4 on the lent H100, 2026-12-06, refused by the fixup's unresolved DT_NEEDED).
# The same for contrib's sfm (Nixpkgs gives glog; gflags and Ceres are looked for first, whatever the flags:
# sfm/CMakeLists.txt) and ovis (ogre: enableOvis), whose finds ran on every configure here (their
# `*_DIR-NOTFOUND` cache entries): a host that has them would have them found.
HOST_ONLY = (("hdf5", "HDF5", "hdf"), ("glog", "Glog", "sfm"), ("gflags", "Gflags", "sfm"),
             ("ceres-solver", "Ceres", "sfm"), ("ogre", "OGRE", "ovis"))
# Features OpenCV turns on by default whose library or tool neither Nixpkgs' 4.x.nix gives nor cudapkgs packages
# (in Nix's sandbox they are never found): libavif (OpenCV 4.11's WITH_AVIF, found by find_path/find_library)
# and ccache (ENABLE_CCACHE: a host compiler launcher writing outside the build).
HOST_FEATURES_OFF = ("WITH_AVIF", "ENABLE_CCACHE")


def host_library_dirs(system: str) -> list[str]:
    """`cudapkgs.builders.cmake.host_library_dirs`: every CMake build now ignores them; opencv4 names them in
    its own cmakeFlags as well (as it did first: its derivation, and so its output path, is unchanged)."""
    from ...builders.cmake import host_library_dirs as dirs

    return dirs(system)
# contrib modules whose libraries cudapkgs packages no version of, found by pkg-config only (no find_package to
# disable): off, so that a host's copy is never linked (freetype2 and harfbuzz for the freetype module).
HOST_ONLY_MODULES = ("freetype",)
# One CUDA, and nothing else from the host: a configure that found a host CUDA fails, as does one whose cache
# names a library or header directory of the host's (/usr, /usr/local, /lib*, /opt) found by find_library,
# find_path or find_package: each would be a build input Nix's sandbox does not have (checked on the configured
# cache, naming each entry). pkg-config's answers (INTERNAL entries) are not checked: OpenCV asks pkg-config for
# every optional library, used or not (this Debian machine's freetype2 for contrib's freetype module, with a
# BUILD_LIST that leaves the module out); a library they would link is refused by the fixup's DT_NEEDED check.
POST_CONFIGURE = r"""[ -e build/modules/core/version_string.inc ]
echo '"(build info elided)"' > build/modules/core/version_string.inc
if grep -nE '(/usr/local/cuda|/opt/cuda|/usr/lib/x86_64-linux-gnu/libcuda|/usr/lib64/libcudart)' build/CMakeCache.txt; then
  echo "opencv: CMake found a host CUDA (above); only the set's CUDA may be used" >&2
  exit 1
fi
# A name with LIB (find_library's OpenBLAS_LIB as well as *_LIBRARY) or INCLUDE, or ending in _DIR; a host
# directory itself (find_path's /usr/include, no slash after it) as well as a path under one.
# (allowed: the host Python's own headers and libpython, python3Executable naming a host interpreter; and the C
# library's own archives and objects, librt, libm, libdl, libpthread …, alone in an entry: the host's C library
# is the stdenv's, as its compiler is — CUDAToolkit's find of librt for cudart_static, seen here)
host_found=$(grep -nE '^([A-Za-z0-9_]*(LIB|INCLUDE)[A-Za-z0-9_]*|[A-Za-z0-9_]+_DIR):(FILEPATH|PATH|STRING)=([^;]*;)*(/usr/(lib|lib32|libx32|lib64|local|include|share)|/lib|/lib32|/libx32|/lib64|/opt)(/|;|$)' build/CMakeCache.txt \
  | grep -vE '^[0-9]+:((PYTHON|Python)[0-9]*_|pkgcfg_lib_|CMAKE_INSTALL_)' \
  | grep -vE '^[0-9]+:[^=]*=((/usr)?/lib(64)?(/[a-z0-9_]+-linux-gnu)?/lib(c|m|dl|rt|pthread|util|resolv|mvec)\.(a|so(\.[0-9]+)*)(;|$))+$' || true)
if [ -n "$host_found" ]; then
  echo "$host_found" >&2
  echo "opencv: CMake found host libraries or headers (above); the build may use only its inputs' (the store's)" >&2
  exit 1
fi
"""
# cv2 is silently left out when CMake finds the interpreter but not its headers or libpython
# (measured: pyenv's 3.11.7 here, "Python 3: Libraries: NO", python3 "Unavailable"): fail then, at
# configure, reading the summary OpenCV writes before the build info is elided.
PYTHON_CHECK = r"""if ! grep -q 'To be built:.*python3' build/modules/core/version_string.inc; then
  grep -A6 'Python 3:' build/modules/core/version_string.inc >&2 || true
  echo "opencv: enablePython, but OpenCV will not build cv2: CMake did not find this Python's headers or libpython (python3Executable names the interpreter)" >&2
  exit 1
fi
"""
POST_INSTALL = r"""sed -i "s|{exec_prefix}/$out|{exec_prefix}|;s|{prefix}/$out|{prefix}|" "$out/lib/pkgconfig/opencv4.pc"
mkdir -p "$cxxdev/nix-support"
"""
RELAX_CUDA_VERSION = r"""cfg="$out/lib/cmake/opencv4/OpenCVConfig.cmake"
# 4.x.nix: a consumer need not use the exact CUDA version OpenCV was built with. With FindCUDAToolkit
# (OpenCVConfig-CUDALanguage.cmake.in) the same two lines read find_package(CUDAToolkit ...) and
# message(FATAL_ERROR "OpenCV library ...); both spellings are relaxed, and one of them must be there.
grep -q 'EXACT REQUIRED' "$cfg"
sed -i -e 's/find_host_package(CUDA \${OpenCV_CUDA_VERSION} EXACT REQUIRED)/find_host_package(CUDA REQUIRED)/' \
       -e 's/find_package(CUDAToolkit \${OpenCV_CUDA_VERSION} EXACT REQUIRED)/find_package(CUDAToolkit REQUIRED)/' \
       -e 's/message(FATAL_ERROR "OpenCV static library was compiled with CUDA/message("OpenCV static library was compiled with CUDA/' \
       -e 's/message(FATAL_ERROR "OpenCV library was compiled with CUDA/message("OpenCV library was compiled with CUDA/' "$cfg"
! grep -q 'EXACT REQUIRED' "$cfg"
"""


def _set_name(cudaPackages: Any) -> str:
    return "cudaPackages_" + str(cudaPackages.cudaMajorMinorVersion).replace(".", "_")


def check_cuda(cudaPackages: Any, *, enableCudnn: bool, what: str = "opencv4", config: Any = None) -> None:
    """Evaluation-time checks of a CUDA build of `what` against `cudaPackages`, before any build.

    Raises `EvalError` naming the option and the set: capabilities the set's nvcc cannot build or
    Jetson capabilities on a non-aarch64 host (the set's backendStdenv assertions, Nixpkgs'
    cuda-modules/packages/backendStdenv.nix), or ``enableCudnn`` where the set has no available
    cuDNN (no ``cudnn`` member, or its ``meta.available`` false for this platform and config). With
    `config`, a cuDNN unavailable only because its license is not allowed is said so, with the setting
    that allows it (`licenses.check_unfree_allowed`'s message); a Jetson capability on another host names
    ``--system aarch64-linux``.
    """
    from ...errors import CudapkgsError

    set_name = _set_name(cudaPackages)
    try:
        stdenv = cudaPackages.backendStdenv
        caps = list(stdenv.cudaCapabilities)
    except CudapkgsError as error:
        first = str(error).strip().splitlines()
        from ...db import cuda_capability_to_info

        info = cuda_capability_to_info()
        requested = list(getattr(config, "cudaCapabilities", None) or []) if config is not None else []
        jetson = [c for c in requested if c in info and info[c]["isJetson"]]
        raise EvalError(
            f"{what} (enableCuda): config cudaCapabilities cannot be built by {set_name} "
            f"(CUDA {cudaPackages.cudaMajorMinorVersion}): " + " ".join(line.strip() for line in first)
            + (f" ({', '.join(jetson)}: Jetson, evaluate for --system aarch64-linux)" if jetson else "")
            + f"; choose capabilities `cudapkgs capabilities --cuda {cudaPackages.cudaMajorMinorVersion}` marks"
            " supported, or another set (cudaPackages_X_Y.pkgs)"
        ) from None
    if not caps:
        raise EvalError(f"{what} (enableCuda): config cudaCapabilities is empty for {set_name}; name at least one")
    if enableCudnn:
        cudnn = cudaPackages.get("cudnn") if hasattr(cudaPackages, "get") else None
        reason = ""
        if cudnn is None:
            reason = "has no cudnn"
        else:
            try:
                if not cudnn.meta.get("available", True):
                    reason = "has a cudnn that is not available here (meta.available is false: platform, license or broken)"
                    if config is not None:
                        from ...errors import UnfreeLicenseError
                        from ...licenses import check_unfree_allowed

                        try:
                            check_unfree_allowed(config, cudnn, name=cudnn.name)
                        except UnfreeLicenseError as unfree:
                            reason = f"has a cudnn this configuration's unfree settings do not allow ({unfree})"
            except CudapkgsError as error:
                reason = f"has a cudnn that does not evaluate ({error})"
        if reason:
            raise EvalError(f"{what}: enableCudnn = true, but {set_name} {reason}; "
                            f"use enableCudnn = false or a set with cuDNN (`cudapkgs list {set_name}`)")


def cmake_cuda_architectures(flags: Any) -> str:
    """CMAKE_CUDA_ARCHITECTURES for OpenCV from a set's `flags`: ``<cap>-real`` for each capability,
    and ``<last>-virtual`` (PTX) only with ``cudaForwardCompat``: ``["8.6", "9.0"]`` → ``"86-real;90-real"``,
    with forward compatibility ``"86-real;90-real;90-virtual"``."""
    caps = [c.replace(".", "") for c in flags.cudaCapabilities]
    return ";".join([f"{c}-real" for c in caps] + ([f"{caps[-1]}-virtual"] if flags.cudaForwardCompat and caps else []))


def _unpackaged_options(options: dict[str, bool], what: str) -> None:
    for option, library, _ in UNPACKAGED:
        if options.get(option):
            raise EvalError(f"{what}: {option} = true needs {library}, which cudapkgs does not package; "
                            f"leave {option} off (the default here)")


def opencv4(
    config: Any,
    cudaPackages: Any,
    cmake: Any,
    ninja: Any,
    zlib: Any,
    python3Packages: Any = None,
    system: str | None = None,
    enableJPEG: bool = True,
    enablePNG: bool = True,
    enableTIFF: bool = True,
    enableWebP: bool = True,
    enableEXR: bool = True,
    enableJPEG2000: bool = True,
    enableContrib: bool = True,
    enableCuda: bool | None = None,
    enableCublas: bool | None = None,
    enableCudnn: bool = False,
    enableCufft: bool | None = None,
    enableLto: bool = True,
    enableUnfree: bool = False,
    enableIpp: bool = False,
    enablePython: bool = False,
    pythonPackages: Any = None,
    runAccuracyTests: bool = True,
    runPerformanceTests: bool = False,
    enabledModules: Any = (),
    enableFfmpeg: bool = False,
    enableGStreamer: bool = False,
    enableVA: bool = False,
    enableEigen: bool = False,
    enableBlas: bool = False,
    enableGtk2: bool = False,
    enableGtk3: bool = False,
    enableVtk: bool = False,
    enableTbb: bool = False,
    enableTesseract: bool = False,
    enableOvis: bool = False,
    enableGPhoto2: bool = False,
    enableDC1394: bool = False,
    enableDocs: bool = False,
) -> Any:
    """OpenCV of a package tree (callPackage'd at the top level as ``opencv4``; `override` takes the options).

    Options and defaults as 4.x.nix (module docstring), except those of `UNPACKAGED`, off here.
    ``enabledModules``: module names for ``BUILD_LIST`` (e.g. `REDUCED_CUDA`); empty: every module
    except `NEEDS_DOWNLOAD` and cudacodec.  Raises `EvalError` (at the call, before any build) for
    an option needing an unpackaged library, ``enableCudnn``/``enableCublas``/``enableCufft`` without
    ``enableCuda``, or a CUDA build the set cannot make (`check_cuda`).
    """
    from ...stdenv import mk_derivation

    what = "opencv4" + (" (python3Packages)" if enablePython else "")
    cuda = config.cudaSupport if enableCuda is None else bool(enableCuda)
    cublas = cuda if enableCublas is None else bool(enableCublas)
    cufft = cuda if enableCufft is None else bool(enableCufft)
    _unpackaged_options({o: v for o, v in locals().items() if o.startswith("enable")}, what)
    for option, value in (("enableCublas", cublas), ("enableCufft", cufft), ("enableCudnn", enableCudnn)):
        if value and not cuda:
            raise EvalError(f"{what}: {option} = true needs enableCuda (config cudaSupport); turn it on or {option} off")
    if cuda:
        check_cuda(cudaPackages, enableCudnn=enableCudnn, what=what, config=config)
    modules = list(enabledModules)
    if enablePython and pythonPackages is None:
        pythonPackages = python3Packages
    if enablePython and modules and "python3" not in modules:
        modules.append("python3")
    build_contrib = enableContrib or enableTesseract or enableOvis
    srcs = sources(config, system)

    def cmake_flags() -> list[str]:
        flags = [
            cmake_bool("OPENCV_GENERATE_PKGCONFIG", True),
            cmake_bool("WITH_OPENMP", False),
            cmake_bool("WITH_OPENCL", False),
            cmake_bool("WITH_PROTOBUF", True),
            cmake_bool("PROTOBUF_UPDATE_FILES", False),
            cmake_bool("OPENCV_ENABLE_NONFREE", enableUnfree),
            cmake_bool("BUILD_TESTS", runAccuracyTests),
            cmake_bool("BUILD_PERF_TESTS", runPerformanceTests),
            cmake_bool("CMAKE_SKIP_BUILD_RPATH", True),
            # Not in 4.x.nix: OpenCV's install RPATH is "${CMAKE_INSTALL_PREFIX}/${OPENCV_LIB_INSTALL_PATH}",
            # and the cmake builder gives CMAKE_INSTALL_LIBDIR as an absolute "$out/lib" (Nixpkgs' hook gives
            # "lib"): the install would write "$out/$out/lib", and fails where the linked RUNPATH is shorter
            # (measured: "file RPATH_CHANGE could not write new RPATH" with cv2, CPU). The fixup sets every
            # RUNPATH instead (the outputs' own libraries first, then the inputs', hooks/auto_patchelf.py).
            cmake_bool("CMAKE_SKIP_INSTALL_RPATH", True),
            cmake_bool("OPENCV_ENABLE_PKG_CONFIG", True),
            cmake_bool("WITH_IPP", enableIpp),
            cmake_bool("WITH_TIFF", enableTIFF),
            cmake_bool("WITH_WEBP", enableWebP),
            cmake_bool("WITH_JPEG", enableJPEG),
            cmake_bool("WITH_PNG", enablePNG),
            cmake_bool("WITH_OPENEXR", enableEXR),
            cmake_bool("WITH_OPENJPEG", enableJPEG2000),
            cmake_bool("WITH_JASPER", False),
            # G-API's ADE comes from GitHub at configure time (4.x.nix fetches it by hash): without it
            # OpenCV would try the download (measured: it does, even for a BUILD_LIST without gapi).
            cmake_bool("WITH_ADE", False),
            cmake_bool("WITH_ZLIB_NG", False),
            cmake_bool("BUILD_ZLIB", False),
            *(cmake_bool(flag, True) for flag in BUNDLED),
            *(cmake_bool(flag, False) for _, _, flag in UNPACKAGED if flag),
            *(cmake_bool(f"CMAKE_DISABLE_FIND_PACKAGE_{package}", True) for _, package, _ in HOST_ONLY),
            *(cmake_bool(f"BUILD_opencv_{module}", False) for module in dict.fromkeys(m for _, _, m in HOST_ONLY)),
            *(cmake_bool(flag, False) for flag in HOST_FEATURES_OFF),
            cmake_feature("CMAKE_IGNORE_PATH", ";".join(host_library_dirs(system))),
            *(cmake_bool(f"BUILD_opencv_{module}", False) for module in HOST_ONLY_MODULES),
            cmake_bool("WITH_CUDA", cuda),
            cmake_bool("WITH_CUBLAS", cublas),
            cmake_bool("WITH_CUDNN", enableCudnn),
            cmake_bool("WITH_CUFFT", cufft),
            cmake_bool("WITH_NVCUVID", False),
            cmake_bool("WITH_NVCUVENC", False),
            cmake_bool("ENABLE_LTO", enableLto),
            cmake_bool("ENABLE_THIN_LTO", False),  # clang only; the host compiler is gcc
            cmake_bool("BUILD_JAVA", False),
            cmake_bool("BUILD_opencv_python2", False),
            cmake_bool("BUILD_opencv_python3", enablePython),
        ]
        if cuda:
            f = cudaPackages.flags
            flags += [
                cmake_bool("ENABLE_CUDA_FIRST_CLASS_LANGUAGE", True),
                cmake_bool("CUDA_FAST_MATH", True),
                cmake_feature("CUDA_NVCC_FLAGS", "--expt-relaxed-constexpr"),
                cmake_feature("CUDA_ARCH_BIN", f.cmakeCudaArchitecturesString),
                cmake_feature("CUDA_ARCH_PTX", list(f.cudaCapabilities)[-1] if f.cudaForwardCompat else ""),
                cmake_bool("BUILD_opencv_cudacodec", False),
                # One CUDA runtime in a process: CMake's CUDA language links cudart statically by default
                # (CMAKE_CUDA_RUNTIME_LIBRARY), which gave libopencv_core its own copy of the runtime beside
                # torch's libcudart.so (measured on the H100: 3280 cudart symbols, no libcudart NEEDED).
                cmake_feature("CMAKE_CUDA_RUNTIME_LIBRARY", "Shared"),
                cmake_bool("CUDA_USE_STATIC_CUDA_RUNTIME", False),
            ]
        if not modules:
            flags += [cmake_bool(f"BUILD_opencv_{m}", False) for m in NEEDS_DOWNLOAD]
        if enablePython:
            py = pythonPackages
            version = str(py.pythonVersion)
            flags += [
                cmake_feature("OPENCV_PYTHON3_INSTALL_PATH", f"lib/python{version}/site-packages"),
                cmake_feature("PYTHON3_EXECUTABLE", f"{py.python.outPath}/bin/python3"),
                cmake_feature("PYTHON_DEFAULT_EXECUTABLE", f"{py.python.outPath}/bin/python3"),
                cmake_feature("PYTHON3_NUMPY_INCLUDE_DIRS",
                              f"{py.numpy.outPath}/lib/python{version}/site-packages/numpy/_core/include"),
            ]
        if modules:
            flags.append(cmake_feature("BUILD_LIST", ",".join(modules)))
        return flags

    def post_patch() -> str:
        from ..substitute import SUBSTITUTE_IN_PLACE

        substitutions = CUDA_NO_LTO if cuda and enableLto else ""
        # CUDA 13 removed APIs OpenCV 4.11.0 calls (cuda13.py); Nixpkgs' 4.11.0 is built with CUDA 12 only.
        if cuda and int(str(cudaPackages.cudaMajorVersion)) >= 13:
            from .cuda13 import post_patch as cuda13_post_patch

            substitutions += cuda13_post_patch(contrib=build_contrib)
        return POST_PATCH + (SUBSTITUTE_IN_PLACE + substitutions if substitutions else "")

    def attrs(final: AttrSet) -> dict[str, Any]:
        cp = cudaPackages
        native = [cmake, ninja] + ([cp.cuda_nvcc] if cuda else [])
        build_inputs: list[Any] = [zlib]
        if cuda:
            build_inputs += [cp.cuda_cudart, cp.cuda_cccl, cp.libnpp]
            build_inputs += [cp.libcublas] if cublas else []
            build_inputs += [cp.cudnn] if enableCudnn else []
            build_inputs += [cp.libcufft] if cufft else []
        propagated: list[Any] = []
        if enablePython:
            native.append(pythonPackages.python)
            build_inputs.append(pythonPackages.numpy)
            propagated.append(pythonPackages.numpy)
        outputs = ["out", "cxxdev"] + (["package_tests"] if runAccuracyTests or runPerformanceTests else [])
        pre_install = ""
        if runAccuracyTests or runPerformanceTests:
            pre_install = 'mkdir -p "$package_tests"\ncp -R "$NIX_BUILD_TOP/source/samples" "$package_tests/"\n'
            pre_install += 'mv build/bin/*test* "$package_tests/" 2>/dev/null || true\n' if runAccuracyTests else ""
            pre_install += 'mv build/bin/*perf* "$package_tests/" 2>/dev/null || true\n' if runPerformanceTests else ""
        post_install = POST_INSTALL + (RELAX_CUDA_VERSION if cuda else "")
        if not cuda:  # 4.x.nix: cxxdev propagates out when CUDA is off (NixOS/nixpkgs#276691)
            post_install += 'echo "$out" >> "$cxxdev/nix-support/propagated-build-inputs"\n'
        else:  # cudaPropagateToOutput = "cxxdev": the CUDA inputs reach a C++ consumer through cxxdev
            post_install += 'printf "%s\\n" "${cudaPropagated[@]}" "$out" >> "$cxxdev/nix-support/propagated-build-inputs"\n'
        result: dict[str, Any] = {
            "pname": "opencv",
            "version": VERSION,
            "src": srcs["opencv"],
            "__structuredAttrs": True,
            "strictDeps": True,
            "outputs": outputs,
            "nativeBuildInputs": native,
            "buildInputs": build_inputs,
            "propagatedBuildInputs": propagated,
            "cmakeFlags": lazy(cmake_flags),
            "postPatch": lazy(post_patch),
            "postConfigure": (PYTHON_CHECK if enablePython else "") + POST_CONFIGURE,
            "preInstall": pre_install,
            "postInstall": post_install,
            "enableParallelBuilding": True,
            "passthru": AttrSet({
                "cudaSupport": cuda,
                "cudaPackages": cudaPackages,
                "enabledModules": tuple(modules),
                "contribSrc": srcs["opencv_contrib"] if build_contrib else None,
                "pythonModule": pythonPackages.python if enablePython else None,
            }, name="opencv4.passthru"),
            "meta": {
                "description": "Open Computer Vision Library with more than 500 algorithms"
                + (f" (CUDA {cudaPackages.cudaMajorMinorVersion})" if cuda else ""),
                "homepage": "https://opencv.org/",
                "license": "unfree" if enableUnfree else "bsd3",
                "platforms": ["x86_64-linux", "aarch64-linux"],
            },
        }
        # CMake 4 refuses cmake_minimum_required(VERSION < 3.5), and OpenCV 4.11's script-mode helpers
        # (cmake/OpenCVGenPkgconfig.cmake: `cmake -P` at build time, which reads no cache) still say 2.8:
        # the environment variable CMake 4.0 added is the one knob that reaches them (measured: the GPU
        # machine's CMake 4.4.3 failed the build at "Generate opencv4.pc").
        result["env"] = {"CMAKE_POLICY_VERSION_MINIMUM": "3.5"}
        if enablePython:  # where the host interpreter keeps Python.h and libpython (python_paths.py)
            result["preConfigure"] = python_paths
            # lazy: a listing reads meta and outputs, and must not compute the interpreter's store path
            result["pythonExecutable"] = lazy(lambda: f"{pythonPackages.python.outPath}/bin/python3")
        if build_contrib:
            result["contribSrc"] = srcs["opencv_contrib"]
            result["postUnpack"] = POST_UNPACK_CONTRIB
            result["cmakeFlags"] = lazy(lambda: cmake_flags() + [
                # A relative PATH given with -D is made absolute against cmake's working directory,
                # the source root, where postUnpack put contrib's modules (4.x.nix: $NIX_BUILD_TOP/source).
                "-DOPENCV_EXTRA_MODULES_PATH:PATH=opencv_contrib"])
        if cuda:
            result["cudaPropagated"] = lazy(lambda: [p.outPath for p in (cp.cuda_cudart, cp.cuda_cccl, cp.libnpp)] + (
                [cp.libcublas.outPath] if cublas else []) + ([cp.libcufft.outPath] if cufft else []) + (
                [cp.cudnn.outPath] if enableCudnn else []))
            # The cmake builder passes the set's CMAKE_CUDA_ARCHITECTURES ("89": SASS *and* PTX to CMake),
            # which OpenCV prefers to CUDA_ARCH_BIN/PTX (cmake/OpenCVDetectCUDAUtils.cmake,
            # ocv_check_for_cmake_cuda_architectures): name each kind, so that PTX follows cudaForwardCompat.
            result["cmakeCudaArchitectures"] = cmake_cuda_architectures(cp.flags)
            result["autoAddDriverRunpath"] = True
            # nvcc's store path ends up in CMake files and, since CUDA 12.8, fatbinaries (nccl.nix's reason).
            result["removeReferencesTo"] = [cp.cuda_nvcc]
            result["disallowedReferences"] = [cp.cuda_nvcc]
        return result

    return mk_derivation(config, attrs, system=system, name=what)
