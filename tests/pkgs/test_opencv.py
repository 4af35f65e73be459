"""opencv4 / opencv / python3Packages.opencv4 at evaluation: options, cmake flags, the seeds' paths, bad input.

Expected values are Nixpkgs' where the package follows it
(pkgs/development/libraries/opencv/4.x.nix@01fb069ed21e61f09d3205e3f4949d8e65fbf4c4: version 4.11.0,
fetchFromGitHub opencv/opencv and opencv/opencv_contrib tag 4.11.0 with the hashes below, outputs
out + cxxdev (+ package_tests with runAccuracyTests), the WITH_CUDA/WITH_CUBLAS/WITH_CUFFT/WITH_CUDNN
options, CUDA_ARCH_BIN from the set's capabilities) and docs/opencv.md's where it differs (PTX only
with cudaForwardCompat; FindCUDAToolkit). Nothing here builds; the reduced builds are measured in
docs/bench-build.md and run only with CUDAPKGS_TEST_OPENCV=1 (tests/pkgs/test_opencv_build.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.errors import CudapkgsError, EvalError
from cudapkgs.leakage import check_leakage

NIXPKGS_SRC = "sha256-oiU4CwoMfuUbpDtujJVTShMCzc5GsnIaprC4DzkSzEM="
NIXPKGS_CONTRIB = "sha256-YNd96qFJ8SHBgDEEsoNps888myGZdELbbuYCae9pW3M="


def _pkgs(tmp_path, system="x86_64-linux", **config):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path / "store"), **config},
                                system=system)


def _flags(pkg) -> dict[str, str]:
    out = {}
    for flag in pkg.cmakeFlags:
        name, _, value = flag.removeprefix("-D").partition("=")
        out[name.split(":")[0]] = value
    return out


def _names(items) -> list[str]:
    return [getattr(i, "name", str(i)) for i in items]


def test_seed_sm_89_is_sass_89_only(manifests_dir, tmp_path):
    # The seeds' pkgsForCudaArch.sm_89.opencv: cudaSupport on, one real architecture, no PTX.
    opencv = _pkgs(tmp_path).pkgsForCudaArch.sm_89.opencv
    flags = _flags(opencv)
    assert flags["WITH_CUDA"] == "TRUE" and flags["WITH_CUBLAS"] == "TRUE" and flags["WITH_CUFFT"] == "TRUE"
    assert flags["WITH_CUDNN"] == "FALSE"  # enableCudnn ? false
    assert flags["CUDA_ARCH_BIN"] == "89"
    assert flags["CUDA_ARCH_PTX"] == ""
    # what OpenCV reads first (before CUDA_ARCH_BIN/PTX): SASS only
    assert opencv.cmakeCudaArchitectures == "89-real"
    assert flags["ENABLE_CUDA_FIRST_CLASS_LANGUAGE"] == "TRUE"
    assert flags["BUILD_opencv_cudacodec"] == "FALSE"  # needs the Video Codec SDK (manual download)
    native = _names(opencv.nativeBuildInputs)
    assert any(n.endswith("cuda_nvcc-" + opencv.passthru.cudaPackages.cuda_nvcc.version) for n in native)
    inputs = _names(opencv.buildInputs)
    for member in ("cuda_cudart", "cuda_cccl", "libnpp", "libcublas", "libcufft"):
        assert any(f"-{member}-" in n for n in inputs), (member, inputs)
    assert not any("-cudnn-" in n for n in inputs)
    assert opencv.outputs == ["out", "cxxdev", "package_tests"]  # runAccuracyTests ? true
    assert opencv["__structuredAttrs"] is True and opencv.strictDeps is True
    assert opencv.name == "opencv-4.11.0"


def test_forward_compat_adds_ptx_of_the_last_capability(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path, cudaSupport=True, cudaCapabilities=["8.6", "9.0"], cudaForwardCompat=True)
    flags = _flags(pkgs.cudaPackages_13_0.pkgs.opencv)
    assert flags["CUDA_ARCH_BIN"] == "86;90"
    assert flags["CUDA_ARCH_PTX"] == "9.0"
    assert pkgs.cudaPackages_13_0.pkgs.opencv.cmakeCudaArchitectures == "86-real;90-real;90-virtual"


def test_a_variant_of_a_versioned_pkgs_keeps_its_set_and_takes_its_capabilities(manifests_dir, tmp_path):
    # cudaPackages_13_0.pkgs.pkgsForCudaArch.sm_90: CUDA 13.0 (the .pkgs) for 9.0 only (the variant);
    # the variant's config reaches the set's flags (it had the default capabilities' flags before).
    opencv = _pkgs(tmp_path).cudaPackages_13_0.pkgs.pkgsForCudaArch.sm_90.opencv
    assert opencv.passthru.cudaPackages.cudaMajorMinorVersion == "13.0"
    assert _flags(opencv)["CUDA_ARCH_BIN"] == "90" and opencv.cmakeCudaArchitectures == "90-real"


def test_without_cuda_support_a_cpu_build(manifests_dir, tmp_path):
    opencv = _pkgs(tmp_path).opencv
    flags = _flags(opencv)
    assert flags["WITH_CUDA"] == "FALSE" and flags["WITH_CUBLAS"] == "FALSE" and flags["WITH_CUFFT"] == "FALSE"
    assert "CUDA_ARCH_BIN" not in flags
    assert not any("cuda" in n for n in _names(opencv.nativeBuildInputs) + _names(opencv.buildInputs))
    assert _names(opencv.buildInputs) == ["zlib-1.3.1"]  # zlib is cudapkgs'; codecs are OpenCV's bundled ones
    assert flags["BUILD_ZLIB"] == "FALSE" and flags["BUILD_PNG"] == "TRUE" and flags["BUILD_JPEG"] == "TRUE"
    assert "removeReferencesTo" not in opencv


def test_opencv_is_opencv4_and_sources_are_nixpkgs(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path)
    assert pkgs.opencv.drvPath == pkgs.opencv4.drvPath
    assert pkgs.opencv.src.outputHash == NIXPKGS_SRC
    assert pkgs.opencv.contribSrc.outputHash == NIXPKGS_CONTRIB
    # The same store path as Nixpkgs' fetchFromGitHub of that tag (whichever place serves the tree).
    github = pkgs.fetchFromGitHub(owner="opencv", repo="opencv", tag="4.11.0", hash=NIXPKGS_SRC)
    assert pkgs.opencv.src.outPath == github.outPath
    contrib = pkgs.fetchFromGitHub(owner="opencv", repo="opencv_contrib", tag="4.11.0", hash=NIXPKGS_CONTRIB)
    assert pkgs.opencv.contribSrc.outPath == contrib.outPath
    assert "-DOPENCV_EXTRA_MODULES_PATH:PATH=opencv_contrib" in pkgs.opencv.cmakeFlags


def test_cudaPackages_12_8_pkgs_opencv_uses_12_8_only(manifests_dir, tmp_path):
    # The seeds' cudaPackages_12_8.pkgs.opencv with cudaSupport: 12.8's nvcc and libraries, nothing of 12.9.
    pkgs = _pkgs(tmp_path, cudaSupport=True)
    opencv = pkgs.cudaPackages_12_8.pkgs.opencv
    assert opencv.passthru.cudaPackages.cudaMajorMinorVersion == "12.8"
    cuda_names = [n for n in _names(opencv.nativeBuildInputs) + _names(opencv.buildInputs) if n.startswith("cuda1")]
    assert cuda_names and all(n.startswith("cuda12.8-") for n in cuda_names), cuda_names
    report = check_leakage(pkgs, ["cudaPackages_12_8", "pkgs", "opencv"])
    assert report.visited > 5 and report.leaks == (), report.to_json()
    # Every derivation below it (its build closure): CUDA ones are 12.8's, none is 12.9's (the default set).
    seen, stack = {}, [opencv.derivation]
    while stack:
        d = stack.pop()
        if d.drv_path not in seen:
            seen[d.drv_path] = d.data["name"]
            stack.extend(d.deps)
    cuda_drvs = [n for n in seen.values() if n.startswith("cuda1")]
    assert cuda_drvs and all(n.startswith("cuda12.8-") for n in cuda_drvs), cuda_drvs
    # The default set's opencv is another derivation (another nvcc).
    assert pkgs.opencv.drvPath != opencv.drvPath


def test_pkgsCuda_opencv_is_the_default_set(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path)
    opencv = pkgs.pkgsCuda.opencv
    assert opencv.passthru.cudaSupport is True
    assert opencv.passthru.cudaPackages.cudaMajorMinorVersion == pkgs.cudaPackages.cudaMajorMinorVersion
    flags = _flags(opencv)
    assert flags["CUDA_ARCH_BIN"] == pkgs.pkgsCuda.cudaPackages.flags.cmakeCudaArchitecturesString


def test_python3Packages_opencv4_builds_the_bindings(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path)
    cv = pkgs.python3Packages.opencv4
    flags = _flags(cv)
    version = pkgs.python3Packages.pythonVersion
    assert flags["BUILD_opencv_python3"] == "TRUE" and flags["BUILD_opencv_python2"] == "FALSE"
    assert flags["OPENCV_PYTHON3_INSTALL_PATH"] == f"lib/python{version}/site-packages"
    assert _names(cv.propagatedBuildInputs) == [pkgs.python3Packages.numpy.name]
    assert pkgs.opencv4.cmakeFlags != cv.cmakeFlags and _flags(pkgs.opencv4)["BUILD_opencv_python3"] == "FALSE"
    # a module list gains python3 so that cv2 is built
    reduced = cv.override(enabledModules=["core", "imgproc"])
    assert _flags(reduced)["BUILD_LIST"] == "core,imgproc,python3"


def test_override_toggles_features(manifests_dir, tmp_path):
    opencv = _pkgs(tmp_path).pkgsForCudaArch.sm_90.opencv
    lean = opencv.override(enableCufft=False, enableCublas=False, runAccuracyTests=False,
                           enabledModules=["core", "imgproc", "cudev", "cudaarithm"])
    flags = _flags(lean)
    assert flags["WITH_CUFFT"] == "FALSE" and flags["WITH_CUBLAS"] == "FALSE" and flags["BUILD_TESTS"] == "FALSE"
    assert flags["BUILD_LIST"] == "core,imgproc,cudev,cudaarithm"
    assert "BUILD_opencv_gapi" not in flags  # only the full list switches off modules needing downloads
    assert not any("-libcufft-" in n or "-libcublas-" in n for n in _names(lean.buildInputs))
    assert lean.outputs == ["out", "cxxdev"]
    cpu = opencv.override(enableCuda=False)
    assert _flags(cpu)["WITH_CUDA"] == "FALSE" and "CUDA_ARCH_BIN" not in _flags(cpu)


def test_capability_the_set_cannot_build_is_an_evaluation_error(manifests_dir, tmp_path):
    # 10.0 (Blackwell) is newer than CUDA 12.6 supports (capability table: minCudaMajorMinorVersion 12.8).
    pkgs = _pkgs(tmp_path, cudaSupport=True, cudaCapabilities=["10.0"])
    with pytest.raises(EvalError) as info:
        pkgs.cudaPackages_12_6.pkgs.opencv
    message = str(info.value)
    assert "cudaCapabilities" in message and "cudaPackages_12_6" in message and "too new" in message


def test_jetson_capability_on_x86_64_is_an_evaluation_error(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path, cudaSupport=True, cudaCapabilities=["8.7"])
    with pytest.raises(EvalError) as info:
        pkgs.cudaPackages_12_8.pkgs.opencv
    message = str(info.value)
    assert "cudaCapabilities" in message and "cudaPackages_12_8" in message and "aarch64-linux" in message
    assert "8.7: Jetson, evaluate for --system aarch64-linux" in message  # what to do


def test_enable_cudnn_without_a_usable_cudnn_is_an_evaluation_error(manifests_dir, tmp_path):
    # An unfree predicate accepting everything but cuDNN leaves the set's cudnn unavailable.
    pkgs = cudapkgs.import_pkgs(config={"allowUnfreePredicate": lambda pkg: pkg.get("pname") != "cudnn",
                                        "storeDir": str(tmp_path / "store"), "cudaSupport": True},
                                system="x86_64-linux")
    assert pkgs.cudaPackages_12_8.cudnn.meta["available"] is False
    opencv = pkgs.cudaPackages_12_8.pkgs.opencv  # without cuDNN: fine
    assert _flags(opencv)["WITH_CUDNN"] == "FALSE"
    with pytest.raises(EvalError) as info:
        opencv.override(enableCudnn=True)
    message = str(info.value)
    assert "enableCudnn" in message and "cudaPackages_12_8" in message and "unfree" in message
    assert "allowUnfree=true" in message  # the cause (cuDNN's license) and the setting that allows it


def test_enable_cudnn_with_cudnn_adds_it(manifests_dir, tmp_path):
    opencv = _pkgs(tmp_path).pkgsForCudaArch.sm_90.opencv.override(enableCudnn=True)
    assert _flags(opencv)["WITH_CUDNN"] == "TRUE"
    assert any("-cudnn-" in n for n in _names(opencv.buildInputs))


@pytest.mark.parametrize("option", ["enableFfmpeg", "enableGStreamer", "enableVA", "enableGtk3", "enableTbb"])
def test_options_needing_unpackaged_libraries_are_refused(manifests_dir, tmp_path, option):
    with pytest.raises(EvalError) as info:
        _pkgs(tmp_path).opencv.override(**{option: True})
    assert option in str(info.value) and "does not package" in str(info.value)


def test_cuda_options_without_cuda_are_refused(manifests_dir, tmp_path):
    with pytest.raises(EvalError, match="enableCudnn = true needs enableCuda"):
        _pkgs(tmp_path).opencv.override(enableCudnn=True)


def test_search_finds_opencv(manifests_dir, tmp_path, capsys):
    from cudapkgs.cli import main

    code = main(["search", "--set", "allowUnfree=true", "--set", f"storeDir={tmp_path / 'store'}", "opencv"])
    out = capsys.readouterr().out
    assert code in (0, None)
    assert "opencv4" in out and "python3Packages.opencv4" in out, out


def test_host_cuda_check_is_in_the_configure(manifests_dir, tmp_path):
    # One CUDA: a configure that found /usr/local/cuda fails (this machine has one; NVIDIA's installer's path).
    opencv = _pkgs(tmp_path).pkgsForCudaArch.sm_90.opencv
    assert "/usr/local/cuda" in opencv.postConfigure and "exit 1" in opencv.postConfigure
    assert opencv.disallowedReferences == [opencv.passthru.cudaPackages.cuda_nvcc]


@pytest.mark.parametrize("cache, refused", [
    # what the GPU machine's configure of the whole opencv4 cached (Ubuntu's libhdf5 and its libcurl)
    ("HDF5_C_LIBRARY_hdf5:FILEPATH=/usr/lib/x86_64-linux-gnu/hdf5/serial/libhdf5.so\n", "HDF5_C_LIBRARY_hdf5"),
    ("HDF5_C_LIBRARIES:STRING=/s/abc-zlib/lib/libz.so;/usr/lib/x86_64-linux-gnu/libcurl.so\n", "HDF5_C_LIBRARIES"),
    ("FREETYPE_INCLUDE_PATH:PATH=/usr/include/freetype2\n", "FREETYPE_INCLUDE_PATH"),
    ("Ceres_DIR:PATH=/usr/local/lib/cmake/Ceres\n", "Ceres_DIR"),
    # find_path's answer is the directory itself, no slash after it; find_library's names need not say LIBRARY
    # (OpenCV's OpenBLAS_LIB); a CMake package's config under /usr/share, a library under /usr/lib32
    ("ZLIB_INCLUDE_DIR:PATH=/usr/include\n", "ZLIB_INCLUDE_DIR"),
    ("Foo_LIBRARY_DIRS:STRING=/s/abc-foo/lib;/usr/lib\n", "Foo_LIBRARY_DIRS"),
    ("OpenBLAS_LIB:FILEPATH=/usr/lib/x86_64-linux-gnu/libopenblas.so\n", "OpenBLAS_LIB"),
    ("Eigen3_DIR:PATH=/usr/share/eigen3/cmake\n", "Eigen3_DIR"),
    ("Foo_LIBRARY:FILEPATH=/usr/lib32/libfoo.so\n", "Foo_LIBRARY"),
    # the store's zlib, host tools, a package not found, and the host Python python3Executable names: allowed
    ("ZLIB_LIBRARY_RELEASE:FILEPATH=/s/abc-zlib/lib/libz.so\nCMAKE_AR:FILEPATH=/usr/bin/ar\n"
     "HDF5_DIR:PATH=HDF5_DIR-NOTFOUND\nPYTHON3_LIBRARY:FILEPATH=/usr/lib/x86_64-linux-gnu/libpython3.11.so\n"
     "PYTHON3_INCLUDE_PATH:PATH=/usr/include/python3.11\n"
     # the C library's own archives, alone in an entry (FindCUDAToolkit's librt for cudart_static)
     "CUDAToolkit_rt_LIBRARY:FILEPATH=/usr/lib/x86_64-linux-gnu/librt.a\nX_LIBRARIES:STRING=/lib64/libm.so.6;/lib64/libdl.so\n"
     # relative install directories, a name that only begins like a host one, pkg-config's find_library answers
     "OPENCV_LIB_INSTALL_PATH:STRING=lib\nFoo_INCLUDE_DIR:PATH=/libfoo/include\n"
     "pkgcfg_lib_FREETYPE_freetype:FILEPATH=/usr/lib/x86_64-linux-gnu/libfreetype.so\n"
     # GNUInstallDirs' install destinations are not inputs (a real configure of the whole opencv4 caches this)
     "CMAKE_INSTALL_OLDINCLUDEDIR:PATH=/usr/include\n",
     None),
    # … but not with another host library in the same entry
    ("HDF5_LIBRARIES:STRING=/usr/lib/x86_64-linux-gnu/libhdf5.so;/usr/lib/x86_64-linux-gnu/libm.so\n", "HDF5_LIBRARIES"),
    # pkg-config's answers for optional libraries OpenCV probes whether or not a module uses them (this Debian
    # machine's freetype2, with a BUILD_LIST without the freetype module): not refused at configure
    ("FREETYPE_INCLUDE_DIRS:INTERNAL=/usr/include/freetype2\nFREETYPE_LIBRARY_DIRS:INTERNAL=/usr/lib/x86_64-linux-gnu\n",
     None),
])
def test_a_configure_that_found_host_libraries_fails_naming_them(tmp_path, cache, refused):
    import subprocess

    from cudapkgs.pkgs.opencv.package import POST_CONFIGURE

    (tmp_path / "build/modules/core").mkdir(parents=True)
    (tmp_path / "build/modules/core/version_string.inc").write_text("info")
    (tmp_path / "build/CMakeCache.txt").write_text(cache)
    run = subprocess.run(["bash", "-euc", POST_CONFIGURE], cwd=tmp_path, capture_output=True, text=True)
    if refused is None:
        assert run.returncode == 0, run.stderr
    else:
        assert run.returncode == 1 and refused in run.stderr and "host libraries" in run.stderr


def test_hdf5_is_never_looked_for_and_the_hdf_module_is_off(manifests_dir, tmp_path):
    # cudapkgs packages no HDF5 (Nixpkgs' 4.x.nix takes hdf5): contrib's hdf module is off, and CMake may not
    # find a host HDF5 (it did on the GPU machine, linking libopencv_hdf to Ubuntu's libhdf5_serial)
    flags = _flags(_pkgs(tmp_path, cudaSupport=True).cudaPackages_13_0.pkgs.opencv4)
    assert flags["CMAKE_DISABLE_FIND_PACKAGE_HDF5"] == "TRUE" and flags["BUILD_opencv_hdf"] == "FALSE"
    assert flags["BUILD_opencv_freetype"] == "FALSE"  # freetype2/harfbuzz: pkg-config only, no package here


def test_no_library_cudapkgs_lacks_is_looked_for_on_the_host(manifests_dir, tmp_path):
    # Every find the whole opencv4's configure ran without a result here (the `*-NOTFOUND` entries of its
    # CMakeCache.txt: AVIF, Ceres, gflags, glog, OGRE, Tesseract/leptonica, ccache) would find a host's copy
    # on another machine: none may run, and the modules needing them are off
    flags = _flags(_pkgs(tmp_path, cudaSupport=True).cudaPackages_13_0.pkgs.opencv4)
    for package in ("Glog", "Gflags", "Ceres", "OGRE"):
        assert flags[f"CMAKE_DISABLE_FIND_PACKAGE_{package}"] == "TRUE", package
    assert flags["BUILD_opencv_sfm"] == "FALSE" and flags["BUILD_opencv_ovis"] == "FALSE"
    for feature in ("WITH_AVIF", "ENABLE_CCACHE", "WITH_TESSERACT"):
        assert flags[feature] == "FALSE", feature
    assert sum(f.startswith("-DBUILD_opencv_sfm") for f in
               _pkgs(tmp_path, cudaSupport=True).cudaPackages_13_0.pkgs.opencv4.cmakeFlags) == 1


def test_cmake_may_not_search_the_hosts_library_and_header_directories(manifests_dir, tmp_path):
    # On the lent H100, FindCUDAToolkit found /usr/lib/libnvidia-ml.so and /usr/lib/x86_64-linux-gnu/libOpenCL.so
    # for its optional targets (the configure check refused them): those directories are ignored by every find,
    # as they do not exist in Nix's sandbox; the host's bin directories are not (its tools: gcc, cmake, ninja)
    flags = _flags(_pkgs(tmp_path, cudaSupport=True).cudaPackages_13_0.pkgs.opencv4)
    ignored = flags["CMAKE_IGNORE_PATH"].split(";")
    for directory in ("/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/include", "/usr/local/lib", "/lib64",
                      "/usr/local/include", "/lib/x86_64-linux-gnu"):
        assert directory in ignored, directory
    assert not [d for d in ignored if d.endswith("bin")]
    arm = _flags(_pkgs(tmp_path, system="aarch64-linux").opencv4)["CMAKE_IGNORE_PATH"].split(";")
    assert "/usr/lib/aarch64-linux-gnu" in arm and "/usr/lib/x86_64-linux-gnu" not in arm


def test_cuda_objects_host_code_is_not_lto_compiled(manifests_dir, tmp_path):
    # GCC 12's LTO put every .cu object's top-level fatbin asm (label `fatbinData`) in one partition and the link
    # of libopencv_core failed (the whole sm_90 build here): with LTO on, OpenCV's C++ flags reach nvcc's host
    # compiler without -flto; C/C++ objects keep it
    import subprocess

    from cudapkgs.pkgs.substitute import SUBSTITUTE_IN_PLACE

    pkgs = _pkgs(tmp_path, cudaSupport=True).cudaPackages_13_0.pkgs
    assert _flags(pkgs.opencv4)["ENABLE_LTO"] == "TRUE"
    patch = pkgs.opencv4.postPatch
    assert "CMAKE_CXX_FLAGS_CUDA" in patch
    assert "CMAKE_CXX_FLAGS_CUDA" not in pkgs.opencv4.override(enableLto=False).postPatch
    assert "CMAKE_CXX_FLAGS_CUDA" not in _pkgs(tmp_path).opencv4.postPatch  # no CUDA
    # the substitution, on OpenCV 4.11.0's line, then CMake itself on the result
    from cudapkgs.pkgs.opencv.package import CUDA_NO_LTO

    (tmp_path / "cmake").mkdir()
    (tmp_path / "cmake/OpenCVDetectCUDALanguage.cmake").write_text(
        'set(CMAKE_CXX_FLAGS "-fsigned-char -flto=auto -O3")\n  set(CMAKE_CXX_FLAGS_CUDA ${CMAKE_CXX_FLAGS})\n'
        'message("${CMAKE_CXX_FLAGS_CUDA}")\n')
    subprocess.run(["bash", "-euc", SUBSTITUTE_IN_PLACE + CUDA_NO_LTO], cwd=tmp_path, check=True)
    patched = (tmp_path / "cmake/OpenCVDetectCUDALanguage.cmake").read_text()
    assert 'string(REGEX REPLACE "-flto(=[a-z0-9]+)?" "" CMAKE_CXX_FLAGS_CUDA' in patched


def test_cuda_no_lto_filter_leaves_the_other_flags(tmp_path):
    # CMake itself runs the patched lines: -flto=auto gone, every other flag kept
    import shutil
    import subprocess

    from cudapkgs.pkgs.opencv.package import CUDA_NO_LTO
    from cudapkgs.pkgs.substitute import SUBSTITUTE_IN_PLACE

    if not shutil.which("cmake"):
        pytest.skip("needs cmake on PATH")
    (tmp_path / "cmake").mkdir()
    (tmp_path / "cmake/OpenCVDetectCUDALanguage.cmake").write_text(
        'set(CMAKE_CXX_FLAGS "-fsigned-char -flto=auto -O3")\n  set(CMAKE_CXX_FLAGS_CUDA ${CMAKE_CXX_FLAGS})\n'
        'message("${CMAKE_CXX_FLAGS_CUDA}")\n')
    subprocess.run(["bash", "-euc", SUBSTITUTE_IN_PLACE + CUDA_NO_LTO], cwd=tmp_path, check=True)
    out = subprocess.run(["cmake", "-P", "cmake/OpenCVDetectCUDALanguage.cmake"], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stderr
    assert "-flto" not in out and "-fsigned-char" in out and "-O3" in out


def test_cuda_13_sets_patch_the_apis_cuda_13_removed(manifests_dir, tmp_path):
    # OpenCV 4.11.0 calls nppGetStreamContext and cudaDeviceProp fields that CUDA 13 removed (pkgs/opencv/cuda13.py).
    pkgs = _pkgs(tmp_path)
    with13 = pkgs.cudaPackages_13_0.pkgs.pkgsForCudaArch.sm_90.opencv.postPatch
    with12 = pkgs.cudaPackages_12_8.pkgs.pkgsForCudaArch.sm_90.opencv.postPatch
    assert "nppGetStreamContext(&nppStreamContext)" in with13 and "cudaDevAttrComputeMode" in with13
    assert "set(CMAKE_CUDA_STANDARD 17)" in with13
    assert "nppGetStreamContext" not in with12 and "CMAKE_CUDA_STANDARD" not in with12
    assert "Add these standard paths" in with12 and "Add these standard paths" in with13  # 4.x.nix's postPatch


def test_cuda_13_replacements_apply_to_a_file_holding_the_old_lines(tmp_path):
    # The bash that postPatch runs, on a file made of the lines OpenCV 4.11.0 has (each must match).
    import subprocess

    from cudapkgs.pkgs.opencv.cuda13 import REPLACEMENTS, post_patch
    from cudapkgs.pkgs.substitute import SUBSTITUTE_IN_PLACE

    for path, old, _new in REPLACEMENTS:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8") as f:
            f.write(old + "\n")
    subprocess.run(["bash", "-euc", SUBSTITUTE_IN_PLACE + post_patch()], cwd=tmp_path, check=True)
    info = (tmp_path / "modules/core/src/cuda_info.cpp").read_text()
    assert "->clockRate" not in info and "->computeMode" not in info and "prop.deviceOverlap" not in info
    assert info.count("static int cudapkgsDeviceAttribute") == 1
    hpp = (tmp_path / "modules/core/include/opencv2/core/private.cuda.hpp").read_text()
    assert "nppGetStreamContext" not in hpp and "nCudaDevAttrComputeCapabilityMinor" in hpp
    # Run again on the patched tree: an old line is gone, so --replace-fail fails (no silent no-op).
    again = subprocess.run(["bash", "-euc", SUBSTITUTE_IN_PLACE + post_patch()], cwd=tmp_path,
                           capture_output=True, text=True)
    assert again.returncode != 0 and "was not found" in again.stderr


def test_cuda_13_contrib_replacement_applies_only_with_contrib(tmp_path):
    # opencv_contrib's videostab used Thrust's removed not1/identity (the whole opencv4 failed there on the H100);
    # the postPatch of a build with contrib rewrites it, one without contrib (no such file) does not touch it.
    import subprocess

    from cudapkgs.pkgs.opencv.cuda13 import CONTRIB_REPLACEMENTS, REPLACEMENTS, post_patch
    from cudapkgs.pkgs.substitute import SUBSTITUTE_IN_PLACE

    for path, old, _new in REPLACEMENTS + CONTRIB_REPLACEMENTS:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8") as f:
            f.write(old + "\n")
    assert "videostab" not in post_patch() and "videostab" in post_patch(contrib=True)
    subprocess.run(["bash", "-euc", SUBSTITUTE_IN_PLACE + post_patch(contrib=True)], cwd=tmp_path, check=True)
    motion = (tmp_path / "opencv_contrib/videostab/src/cuda/global_motion.cu").read_text()
    assert "thrust::not1" not in motion and "thrust::identity" not in motion
    assert "thrust::logical_not<uchar>()" in motion
    pkgs = cudapkgs.import_pkgs({"allowUnfree": True, "cudaSupport": True, "fetchers": ["wheels"]})
    with_contrib = pkgs.cudaPackages_13_0.pkgs.opencv4.derivation.attrs["postPatch"]
    without = pkgs.cudaPackages_13_0.pkgs.opencv4.override(enableContrib=False).derivation.attrs["postPatch"]
    assert "videostab/src/cuda/global_motion.cu" in with_contrib and "videostab" not in without


@pytest.mark.parametrize("template", [
    # OpenCV 4.11.0 cmake/templates/OpenCVConfig-CUDALanguage.cmake.in (FindCUDAToolkit, used here) …
    '    find_package(CUDAToolkit ${OpenCV_CUDA_VERSION} EXACT REQUIRED)\n'
    '      message(FATAL_ERROR "OpenCV library was compiled with CUDA ${OpenCV_CUDA_VERSION} support.")\n',
    # … and OpenCVConfig-CUDA.cmake.in (FindCUDA, what 4.x.nix relaxes)
    '  find_host_package(CUDA ${OpenCV_CUDA_VERSION} EXACT REQUIRED)\n'
    '    message(FATAL_ERROR "OpenCV static library was compiled with CUDA ${OpenCV_CUDA_VERSION} support.")\n',
])
def test_installed_config_does_not_demand_the_exact_cuda_version(tmp_path, template):
    import subprocess

    from cudapkgs.pkgs.opencv.package import RELAX_CUDA_VERSION

    cfg = tmp_path / "lib/cmake/opencv4/OpenCVConfig.cmake"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(template)
    subprocess.run(["bash", "-euc", RELAX_CUDA_VERSION], env={"out": str(tmp_path), "PATH": "/usr/bin:/bin"}, check=True)
    text = cfg.read_text()
    assert "EXACT" not in text and "FATAL_ERROR" not in text and "REQUIRED)" in text
    cfg.write_text("project(x)\n")  # a config without the lines: the relaxation fails rather than pass silently
    assert subprocess.run(["bash", "-euc", RELAX_CUDA_VERSION], env={"out": str(tmp_path), "PATH": "/usr/bin:/bin"}).returncode != 0


def test_python_bindings_fail_at_configure_when_cv2_would_be_left_out(manifests_dir, tmp_path):
    # OpenCV drops cv2 silently when CMake finds no headers/libpython for the interpreter (measured with
    # pyenv's 3.11.7: "Libraries: NO"); the package fails its configure then.
    import subprocess

    from cudapkgs.pkgs.opencv.package import PYTHON_CHECK

    pkgs = _pkgs(tmp_path)
    assert PYTHON_CHECK in pkgs.python3Packages.opencv4.postConfigure
    assert PYTHON_CHECK not in pkgs.opencv4.postConfigure
    inc = tmp_path / "build/modules/core/version_string.inc"
    inc.parent.mkdir(parents=True)
    inc.write_text('"    To be built:                 core imgproc python3\\n"\n')
    assert subprocess.run(["bash", "-euc", PYTHON_CHECK], cwd=tmp_path).returncode == 0
    inc.write_text('"    To be built:                 core imgproc\\n"\n"  Python 3:\\n"\n"    Libraries:  NO\\n"\n')
    done = subprocess.run(["bash", "-euc", PYTHON_CHECK], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "will not build cv2" in done.stderr


def test_python_bindings_tell_opencv_where_the_interpreters_headers_and_libpython_are(manifests_dir, tmp_path):
    # FindPythonLibs looks in the inputs' and the system's prefixes, not where a pyenv/uv CPython keeps
    # libpython ("Libraries: NO" with pyenv's 3.12.1, measured offline 2026-12-06): a preConfigure step asks the
    # interpreter and sets PYTHON3_INCLUDE_DIR/PYTHON3_LIBRARY, which OpenCVDetectPython.cmake reads.
    import io
    import sys
    import sysconfig

    from cudapkgs.pkgs.opencv.python_paths import python_paths

    pkgs = _pkgs(tmp_path)
    cv = pkgs.python3Packages.opencv4
    assert cv.derivation.attrs["preConfigure"]["python"] == "cudapkgs.pkgs.opencv.python_paths:python_paths"
    assert cv.derivation.attrs["pythonExecutable"] == f"{pkgs.python3Packages.python.outPath}/bin/python3"
    assert "preConfigure" not in pkgs.opencv4.derivation.attrs and "pythonExecutable" not in pkgs.opencv4.derivation.attrs
    # run against this test's own interpreter
    env: dict[str, str] = {"PATH": "/usr/bin:/bin"}
    log = io.StringIO()
    python_paths({"pythonExecutable": sys.executable}, env, tmp_path, {}, log)
    assert env["PYTHON3_INCLUDE_DIR"] == sysconfig.get_paths()["include"]
    assert os.path.isfile(os.path.join(env["PYTHON3_INCLUDE_DIR"], "Python.h"))
    if "PYTHON3_LIBRARY" in env:
        assert os.path.isfile(env["PYTHON3_LIBRARY"]) and "libpython" in os.path.basename(env["PYTHON3_LIBRARY"])
    assert "PYTHON3_INCLUDE_DIR=" in log.getvalue()


def _fake_python(path, body: str):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body, message", [
    ("exit 3\n", "exit status 3"),
    ("echo one line\n", "did not say"),
    ("yes aaaa | head -c 20000\n", "did not say"),  # more than 8 KiB: not read further
    ("echo /nonexistent/include; echo\n", "no Python.h"),
    ("mkdir -p inc; touch inc/Python.h; echo inc; echo\n", "relative path"),  # before: inc/ of cudapkgs' cwd
])
def test_python_paths_refuses_an_interpreter_that_does_not_answer_as_a_cpython(tmp_path, body, message):
    from cudapkgs.pkgs.opencv.python_paths import python_paths

    exe = _fake_python(tmp_path / "python3", body)
    env = {"PATH": "/usr/bin:/bin"}
    with pytest.raises(CudapkgsError, match=message):
        python_paths({"pythonExecutable": exe}, env, tmp_path, {}, io_log())
    assert "PYTHON3_INCLUDE_DIR" not in env
    with pytest.raises(CudapkgsError, match="not an absolute path"):
        python_paths({"pythonExecutable": "python3"}, env, tmp_path, {}, io_log())


def test_python_paths_stops_waiting_for_an_interpreter_that_does_not_answer(tmp_path, monkeypatch):
    """Before, the answer was read with a plain read() of the pipe, which waits for its end: an interpreter
    that answered only after 30 s (a sitecustomize waiting on a network mount, a grandchild holding the
    pipe) was waited for, whatever the 60 s limit said (it applied only after). It now runs in an empty
    private directory of its own (not the source tree), and it and what it started are killed at the limit."""
    from cudapkgs.pkgs.opencv import python_paths as module

    monkeypatch.setattr(module, "_TIMEOUT", 0.5)
    include = tmp_path / "include"
    include.mkdir()
    (include / "Python.h").write_text("")
    marks = tmp_path / "marks"
    exe = _fake_python(tmp_path / "python3", f'pwd > {marks}.cwd\nsleep 30 &\n'
                                             f'sleep 30; echo {include}; echo\n')
    env = {"PATH": "/usr/bin:/bin"}
    with pytest.raises(CudapkgsError, match=r"did not say where its headers are within 0.5 s"):
        module.python_paths({"pythonExecutable": exe}, env, tmp_path, {}, io_log())
    assert "PYTHON3_INCLUDE_DIR" not in env
    cwd = Path(f"{marks}.cwd").read_text().strip()
    assert cwd != str(tmp_path) and os.path.basename(cwd).startswith("cudapkgs-cwd-") and not os.path.exists(cwd)


def io_log():
    import io

    return io.StringIO()


def test_cuda_runtime_shared_and_cmake4_policy(manifests_dir, tmp_path):
    # Measured on the H100 (docs/opencv.md, GPU proof): CMake's CUDA language linked cudart statically
    # into libopencv_core (a second runtime beside torch's libcudart.so), and the GPU machine's CMake 4.4
    # refused OpenCV's `cmake -P` helpers (cmake_minimum_required < 3.5) at "Generate opencv4.pc".
    opencv = _pkgs(tmp_path).pkgsForCudaArch.sm_90.opencv
    flags = _flags(opencv)
    assert flags["CMAKE_CUDA_RUNTIME_LIBRARY"] == "Shared"
    assert flags["CUDA_USE_STATIC_CUDA_RUNTIME"] == "FALSE"
    assert opencv.env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    cpu = opencv.override(enableCuda=False)
    assert "CMAKE_CUDA_RUNTIME_LIBRARY" not in _flags(cpu)
    assert cpu.env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"  # the helpers run without CUDA too
