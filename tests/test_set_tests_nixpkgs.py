"""Issue 35: the rest of Nixpkgs' packages/tests (backend-stdenv, cmake, nvcc-backend, nvcc-data-outputs,
nvcc-fortify, nvcc-outputs, nvcc-roles, onnx-tensorrt, opencv-and-torch, public-headers, redist-outputs,
redist-runtime), the members beside them (setupCudaHook, nvidia_driver, writeGpuTestPython,
pkgsBuildHost, `_cuda.lib.selectManifests`) and testers run by `cudapkgs test`.
"""

from __future__ import annotations

import pytest

import cudapkgs
from cudapkgs.cuda.set_tests import cmake_suite, opencv_and_torch
from cudapkgs.errors import EvalError
from cudapkgs.lib.fixpoint import force
from cudapkgs.stdenv import mk_derivation
from cudapkgs.testers import collect_tests, is_tester, run_tests

# The 31 attributes of Nixpkgs' cudaPackages.tests (packages/tests/ at 1dbbce67 and the commits each
# module names): 37 files, less the helpers (nvcc-math.cu, libcudss-solve.cpp, nvshmem-device.cu) and
# with onnx-tensorrt's and cudnn-frontend's files one attribute each.
NIXPKGS_TESTS = {
    "backend-headers", "backend-stdenv", "cmake", "component-hook", "cuda-library-samples", "cudart-pkg-config",
    "cudatoolkit", "cudnn-frontend", "cutlass-cmake", "flags", "libcudss-cmake", "nvcc-backend", "nvcc-cmake",
    "nvcc-data-outputs", "nvcc-discovery", "nvcc-fortify", "nvcc-hook", "nvcc-outputs", "nvcc-roles", "nvcc-runtime",
    "nvshmem-cmake", "onnx-tensorrt", "opencv-and-torch", "pkg-config", "public-headers", "redist-outputs",
    "redist-runtime", "redist-variants", "redists-installed", "redists-unpacked", "scope",
}

# mkNamedTest's names in opencv-and-torch/package.nix@04178864 (openCVFirst × useOpenCVDefaultCuda × useTorchDefaultCuda)
OPENCV_AND_TORCH = {
    "test-opencv-with-default-cuda-then-torch-with-default-cuda", "test-opencv-with-default-cuda-then-torch",
    "test-opencv-then-torch-with-default-cuda", "test-opencv-then-torch",
    "test-torch-with-default-cuda-then-opencv-with-default-cuda", "test-torch-with-default-cuda-then-opencv",
    "test-torch-then-opencv-with-default-cuda", "test-torch-then-opencv",
}


def _pkgs(tmp_path, **config):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path / "store"), "prebuiltWheels": [],
                                       "cudaCapabilities": ["9.0"], **config}, system="x86_64-linux")


def test_the_set_has_all_of_nixpkgs_tests(manifests_dir, tmp_path):
    assert len(NIXPKGS_TESTS) == 31
    assert set(_pkgs(tmp_path).cudaPackages_13_0.tests) == NIXPKGS_TESTS


def test_backend_stdenv_keeps_the_override_interface(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    stdenv = cuda.backendStdenv
    if cuda.backendCC is None:
        pytest.skip("no host compiler nvcc 13.0 accepts")
    assert stdenv.hasCC and stdenv.cc.drvPath == cuda.backendCC.drvPath
    no_cc = stdenv.override(cc=None)
    assert no_cc.hasCC is False and no_cc.cc is None
    assert list(no_cc.cudaCapabilities) == ["9.0"]
    assert no_cc.override(cc=cuda.backendCC).cc.drvPath == cuda.backendCC.drvPath
    assert cuda.tests["backend-stdenv"].drvPath.endswith("-cuda13.0-tests-backend-stdenv.drv")


def test_backend_stdenv_fails_evaluation_for_a_compiler_nvcc_refuses(manifests_dir, tmp_path, monkeypatch):
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    if cuda.backendCC is None:
        pytest.skip("no host compiler nvcc 13.0 accepts")
    kind = cuda.backendCC.hostCompiler["kind"]
    from cudapkgs import db

    real = db.nvcc_compatibilities()
    narrowed = {**real, "13.0": {**real["13.0"], kind: {"minMajorVersion": "90", "maxMajorVersion": "91"}}}
    monkeypatch.setattr(db, "nvcc_compatibilities", lambda: narrowed)
    with pytest.raises(EvalError, match=rf"tests\.backend-stdenv: backendCC is {kind} \d+, nvcc 13\.0 accepts {kind} 90 to 91"):
        _pkgs(tmp_path).cudaPackages_13_0.tests["backend-stdenv"].drvPath


def test_backend_stdenv_builds_with_the_backend_compiler(manifests_dir, tmp_path):
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    cuda = _pkgs(tmp_path).cudaPackages_13_0
    if cuda.backendCC is None:
        pytest.skip("no host compiler nvcc 13.0 accepts")
    test = cuda.tests["backend-stdenv"]
    with Store.open(test.derivation.store_dir) as store:
        realise(store, [test.derivation])
    out = test.derivation.outputs["out"]
    info = cuda.backendCC.hostCompiler
    assert (tmp_path / "store" / out.split("/")[-1] / "log").read_text().strip() == \
        f"backendStdenv.cc: {info['kind']} {info['major']}"


def test_cmake_suite_is_nixpkgs_list_and_says_why_it_cannot_build(manifests_dir, tmp_path, monkeypatch):
    pkgs = _pkgs(tmp_path)
    tests = pkgs.cudaPackages_13_0.tests["cmake"]
    assert len(tests["Cuda"]) == 19 and len(tests["CudaOnly"]) == 28
    toolkit = tests["CudaOnly"]["Toolkit"].meta
    assert toolkit["available"] is False and "marked broken in Nixpkgs" in toolkit["problems"]["broken"]["message"]
    assert cmake_suite.SUITES["CudaOnly"]["PDB"] == "broken"
    complex_ = tests["Cuda"]["Complex"]
    if str(pkgs.cmake.version) in cmake_suite.SOURCES:  # the host's cmake has a pinned source: a real test
        assert complex_.meta.get("available", True) is not False
        attrs = complex_.derivation.attrs
        assert attrs["testSuiteName"] == "Cuda" and attrs["testName"] == "Complex"
        assert attrs["cmakeSource"].endswith(f"cmake_{pkgs.cmake.version}.orig.tar.gz")
    if str(pkgs.cmake.version) == "3.25.1":
        unity = tests["CudaOnly"]["Unity"].meta["problems"]["broken"]["message"]
        assert unity == "CMake 3.25.1's source has no Tests/CudaOnly/Unity (a newer CMake's test)"
        # built here: CMake 3.25's own arch choice predates CUDA 13; two need Nixpkgs' cmake patch
        arch = tests["CudaOnly"]["Architecture"].meta["problems"]["broken"]["message"]
        assert "sm_52, which nvcc 13 no longer supports" in arch
        assert "c5d81a24" in tests["CudaOnly"]["ExportPTX"].meta["problems"]["broken"]["message"]
        assert pkgs.cudaPackages_12_9.tests["cmake"]["CudaOnly"]["Architecture"].meta.get("available", True)
    monkeypatch.setattr(cmake_suite, "SOURCES", {})
    unpinned = _pkgs(tmp_path, cudaCapabilities=["8.0"]).cudaPackages_13_0.tests["cmake"]["Cuda"]["Complex"].meta
    assert unpinned["available"] is False
    assert "no pinned source of the host's cmake" in unpinned["problems"]["broken"]["message"]


def test_onnx_tensorrt_are_unavailable_programs_saying_why(manifests_dir, tmp_path):
    tests = _pkgs(tmp_path).cudaPackages_13_0.tests["onnx-tensorrt"]
    assert set(tests) == {"short", "long"}
    for which in ("short", "long"):
        meta = tests[which].meta
        assert meta["available"] is False and meta["mainProgram"] == f"cuda13.0-tests-onnx-tensorrt-{which}"
        assert "onnx-tensorrt package" in meta["problems"]["broken"]["message"]


def test_opencv_and_torch_has_nixpkgs_names_and_waits_for_opencv4(manifests_dir, tmp_path):
    assert {opencv_and_torch.test_name(*c) for c in __import__("itertools").product((True, False), repeat=3)} \
        == OPENCV_AND_TORCH
    pkgs = _pkgs(tmp_path, prebuiltWheels=["nccl", "libnvshmem"])  # torch needs NVSHMEM: NVIDIA's wheel
    tests = pkgs.cudaPackages_13_0.tests["opencv-and-torch"]
    assert set(tests) == OPENCV_AND_TORCH
    if "opencv4" in pkgs.python3Packages:  # issue 33 landed: the tests are writeGpuTestPython testers
        tester = tests["test-torch-then-opencv"]
        assert tester.meta["mainProgram"] == "torch-then-opencv4" and "gpuCheck" in tester.passthru
        assert force(tester.passthru["gpuCheck"]).derivation.attrs["requiredSystemFeatures"] == ["cuda"]
        # against this set (13.0) or the top level's default set: different libraries, different programs
        assert tester.drvPath != tests["test-torch-then-opencv-with-default-cuda"].drvPath
        # a library unavailable here makes the tester broken with its reason (torch without NVSHMEM)
        without = _pkgs(tmp_path).cudaPackages_13_0.tests["opencv-and-torch"]["test-torch-then-opencv"].meta
        assert without["available"] is False and "libnvshmem is available" in without["problems"]["broken"]["message"]
    else:
        meta = tests["test-opencv-then-torch"].meta
        assert meta["available"] is False and "python3Packages.opencv4" in meta["problems"]["broken"]["message"]


def test_nvcc_roles_splits_two_releases(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    assert cuda.pkgsBuildHost.cuda_nvcc.drvPath == cuda.cuda_nvcc.drvPath
    assert cuda.pkgsHostTarget.cudaMajorMinorVersion == "13.0"
    drv = cuda.tests["nvcc-roles"].derivation
    assert drv.attrs["hostMajor"] == "13" and drv.attrs["buildMajor"] == "12"
    assert "cuda12.9-cuda_nvcc" in drv.attrs["nvccForBuild"]
    assert drv.attrs["hostCudartVersion"] == "13000" and drv.attrs["buildCudartVersion"] == "12090"
    wheels = _pkgs(tmp_path, fetchers=["wheels"])
    paired = wheels.cudaPackages_13_0.tests["nvcc-roles"]  # NVIDIA's wheels: another CUDA 13 release builds
    assert paired.meta.get("available", True) is not False
    assert paired.derivation.attrs["buildCudartVersion"] not in ("13000", "12090")
    assert paired.derivation.attrs["buildMajor"] == "13"
    cuda12 = wheels.cudaPackages_12_9.tests["nvcc-roles"].meta
    assert cuda12["available"] is False and "CUDA 12's nvcc has no wheel" in cuda12["problems"]["broken"]["message"]


def test_public_headers_is_gathered_at_set_level(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    headers = cuda.tests["public-headers"]
    assert {"libcusparse_lt", "libcutensor", "libcublasmp"} <= set(headers)
    assert headers["libcutensor"].drvPath == cuda.libcutensor.passthru["tests"]["headers"].drvPath


def test_redist_outputs_checks_each_dev_to_out_edge(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    tests = collect_tests(cuda.tests["redist-outputs"])
    assert set(tests) == {"stubs", "propagation"}
    attrs = tests["propagation"].derivation.attrs
    assert f"{cuda.cuda_cudart.dev}={cuda.cuda_cudart.out}" in attrs["edges"].split()
    assert f"{cuda.cuda_cudart.out}={cuda.cuda_cudart.dev}" in attrs["nonEdges"].split()


def test_nvcc_names_its_own_sets_cudart_for_its_profile(manifests_dir, tmp_path):
    # cuda_nvcc/package.nix@7787668e: the profile names the set's cudart (include, stubs, lib) by store
    # path, so nvcc's derivation has them as inputs (here with the static libraries too).
    pkgs = _pkgs(tmp_path)
    for name in ("cudaPackages_13_0", "cudaPackages_12_9"):
        cuda = pkgs[name]
        inputs = cuda.cuda_nvcc.inputs
        for output in ("include", "stubs", "lib", "static"):
            assert inputs[f"cuda_cudart.{output}"] == cuda.cuda_cudart[output], (name, output)
        assert cuda.cuda_cudart.derivation in cuda.cuda_nvcc.derivation.deps
    test = pkgs.cudaPackages_13_0.tests["nvcc-data-outputs"]
    assert test.meta.get("available", True) is True  # no longer broken
    assert test.derivation.attrs["nvcc"] == pkgs.cudaPackages_13_0.cuda_nvcc.out
    attrs = test.derivation.attrs
    assert attrs["nativeBuildInputs"] == [pkgs.cudaPackages_13_0.cuda_nvcc.out] and attrs["buildInputs"] == []


def test_nvcc_data_outputs_from_wheels_says_why_cuda_12_cannot(manifests_dir, tmp_path):
    meta = _pkgs(tmp_path, fetchers=["wheels"]).cudaPackages_12_9.tests["nvcc-data-outputs"].meta
    assert meta["available"] is False and "CUDA 12's nvcc has no wheel" in meta["problems"]["broken"]["message"]


def test_nvidia_driver_is_always_broken_with_nixpkgs_message(manifests_dir, tmp_path):
    driver = _pkgs(tmp_path).cudaPackages_12_9.nvidia_driver  # buildRedist of the manifest's entry, as Nixpkgs'
    assert driver.version == "575.57.08" and driver.meta["broken"] is True and driver.meta["available"] is False
    assert driver.meta["problems"]["broken"]["message"].endswith("- use drivers from linuxPackages")


def test_setup_cuda_hook_is_a_member(manifests_dir, tmp_path):
    hook = _pkgs(tmp_path).cudaPackages_13_0.setupCudaHook
    assert hook.name == "setup-cuda-hook" and hook.hookName == "setupCudaHook"


def test_select_manifests(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path)
    selected = pkgs._cuda.lib.selectManifests({"cuda": "13.0.3", "cudnn": pkgs.cudaPackages_13_0.manifestVersions["cudnn"]})
    assert set(selected) == {"cuda", "cudnn"}
    assert selected["cuda"] is pkgs.cudaPackages_13_0.manifests["cuda"]
    with pytest.raises(cudapkgs.CudapkgsError, match="9.9.9"):
        pkgs._cuda.lib.selectManifests({"cuda": "9.9.9"})["cuda"]


def test_write_gpu_test_python_makes_a_tester_and_its_gpu_check(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    tester = cuda.writeGpuTestPython({"name": "probe", "libraries": []})("print('ok')")
    assert tester.name == "tester-probe" and tester.meta["mainProgram"] == "probe"
    check = force(tester.passthru["gpuCheck"])
    assert check.derivation.attrs["requiredSystemFeatures"] == ["cuda"]
    assert tester.drvPath in {d.drv_path for d in check.derivation.deps}
    cpu = cuda.writeGpuTestPython({"feature": None, "libraries": []}, "print(1)")
    assert cpu.name == "tester-cpu" and force(cpu.passthru["gpuCheck"]).derivation.attrs["requiredSystemFeatures"] == []
    with pytest.raises(EvalError, match="libraries must be a list"):
        cuda.writeGpuTestPython({"libraries": "torch"}, "import torch")
    with pytest.raises(EvalError, match="the program must be a string"):
        cuda.writeGpuTestPython({}, 42)


def test_write_gpu_test_python_refuses_libraries_of_another_python_release(manifests_dir, tmp_path):
    # writeGpuTestPython.nix@04e8a174: assertMsg (isFunction libraries || all python3Packages.hasPythonModule
    # libraries) "writeGpuTestPython was passed `libraries` from the wrong python release"
    pkgs = _pkgs(tmp_path, fetchers=["wheels"])
    cuda, ps312 = pkgs.cudaPackages_13_0, pkgs.python312Packages
    assert pkgs.python3Packages.pythonVersion != "3.12"
    with pytest.raises(EvalError, match="from the wrong python release: .*3.12"):
        cuda.writeGpuTestPython({"libraries": [ps312.numpy]}, "import numpy")
    with pytest.raises(EvalError, match="from the wrong python release"):
        cuda.writeGpuTestPython({"libraries": [ps312.numpy.derivation]}, "import numpy")
    # overridden to that release's set (Nixpkgs' .override {python3Packages = …;}): its interpreter
    tester = cuda.writeGpuTestPython.override({"python3Packages": ps312})({"libraries": [ps312.numpy]}, "import numpy")
    env = next(d for d in tester.derivation.deps if "python3-env" in d.name)
    assert env.attrs["pythonVersion"] == "3.12"
    # the default release's packages, and a function of the set, as before
    cuda.writeGpuTestPython({"libraries": [pkgs.python3Packages.numpy]}, "import numpy")
    cuda.writeGpuTestPython({"libraries": lambda ps: [ps.numpy]}, "import numpy")
    with pytest.raises(EvalError, match="unknown argument"):
        cuda.writeGpuTestPython.override({"python": ps312.python})


def _program(pkgs, name, script, features):
    """A package whose bin/<name> runs `script`, as a tester needing `features`."""
    return mk_derivation(pkgs.config, {
        "name": f"tester-{name}", "stdenvCc": None, "driverLibDir": None, "script": script, "program": name,
        "dontUnpack": True, "dontConfigure": True, "dontBuild": True, "dontFixup": True,
        "installPhase": 'mkdir -p "$out/bin"\nprintf \'#!/bin/sh\\n%s\\n\' "$script" > "$out/bin/$program"\n'
                        'chmod +x "$out/bin/$program"\n',
        "passthru": {"requiredSystemFeatures": features},
        "meta": {"mainProgram": name},
    }, system="x86_64-linux", name=f"testers.{name}")


def test_cudapkgs_test_runs_testers_where_their_features_are(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path)
    good = _program(pkgs, "good", "echo checked the device", ["cuda"])
    bad = _program(pkgs, "bad", "echo no device >&2; exit 3", ["cuda"])
    subject = mk_derivation(pkgs.config, {
        "name": "subject", "stdenvCc": None, "driverLibDir": None, "dontUnpack": True, "dontConfigure": True,
        "dontBuild": True, "dontFixup": True, "installPhase": 'mkdir -p "$out"\n',
        "passthru": {"testers": {"good": good, "bad": bad}},
    }, system="x86_64-linux", name="subject")
    pkgs = pkgs.extend(lambda final, prev: {"subject": subject})
    tests = collect_tests(subject)
    assert set(tests) == {"testers.good", "testers.bad"} and all(is_tester(tests, k) for k in tests)

    without = {r.test: r for r in run_tests(pkgs, ["subject"], offered=frozenset())}
    assert {r.result for r in without.values()} == {"skipped"}
    assert "a tester: its program runs on a machine offering cuda" in without["subject.tests.testers.good"].detail

    with_gpu = {r.test: r for r in run_tests(pkgs, ["subject"], offered=frozenset({"cuda"}))}
    assert with_gpu["subject.tests.testers.good"].result == "passed"
    assert with_gpu["subject.tests.testers.good"].detail.startswith("checked the device")
    failed = with_gpu["subject.tests.testers.bad"]
    assert failed.result == "failed" and "exited with status 3" in failed.detail and "no device" in failed.detail
    log = failed.detail.rpartition("(log: ")[2].rstrip(")")  # kept beside the store's build logs
    assert log.startswith(str(tmp_path / "store" / ".logs")) and log.endswith(".run.log")
    assert "no device" in open(log).read()


def test_auto_patchelf_hook_is_a_package_builders_can_list(manifests_dir, tmp_path):
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    pkgs = _pkgs(tmp_path)
    hook = pkgs.autoPatchelfHook
    assert hook.name == "auto-patchelf-hook"
    user = mk_derivation(pkgs.config, {
        "name": "lists-the-hook", "nativeBuildInputs": [hook], "dontUnpack": True, "dontConfigure": True,
        "dontBuild": True, "installPhase": 'mkdir -p "$out"\n',
    }, system="x86_64-linux", name="lists-the-hook")
    with Store.open(user.derivation.store_dir) as store:
        realise(store, [user.derivation])
    support = tmp_path / "store" / hook.outPath.split("/")[-1] / "nix-support" / "cudapkgs-setup-hook"
    assert support.read_text().split() == ["autoPatchelfHook"]


def test_auto_add_cuda_compat_runpath_on_a_jetson_evaluation(manifests_dir, tmp_path):
    # autoAddCudaCompatRunpath/package.nix@1dbbce67 on an Orin (8.7, aarch64-linux, CUDA 12.6: linux-aarch64):
    # enabled, and a package listing it depends on cuda_compat through it; off on x86_64 (no cuda_compat)
    orin = cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path / "store"),
                                        "cudaCapabilities": ["8.7"]}, system="aarch64-linux")
    cuda = orin.cudaPackages_12_6
    hook = cuda.autoAddCudaCompatRunpath
    assert cuda.backendStdenv.hostRedistSystem == "linux-aarch64" and hook.passthru["enableHook"] is True
    assert hook.derivation.attrs["cudaCompat"] == cuda.cuda_compat.outPath
    user = mk_derivation(orin.config, {
        "name": "jetson-app", "nativeBuildInputs": [hook], "stdenvCc": None, "dontUnpack": True,
        "dontConfigure": True, "dontBuild": True, "installPhase": 'mkdir -p "$out"\n',
    }, system="aarch64-linux", name="jetson-app")
    closure, todo = set(), [user.derivation]
    while todo:
        drv = todo.pop()
        for dep in drv.deps:
            if dep.drv_path not in closure:
                closure.add(dep.drv_path)
                todo.append(dep)
    assert cuda.cuda_compat.drvPath in closure
    x86 = _pkgs(tmp_path).cudaPackages_12_6.autoAddCudaCompatRunpath
    assert x86.passthru["enableHook"] is False and x86.derivation.attrs.get("cudaCompat") is None


def test_an_attribute_set_of_tests_and_write_gpu_test_python_testers(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path)
    tests = collect_tests(pkgs.cudaPackages_13_0.tests["onnx-tensorrt"])
    assert set(tests) == {"short", "long"}
    probe = pkgs.cudaPackages_13_0.writeGpuTestPython({"name": "probe", "libraries": []}, "print('ok')")
    subject = mk_derivation(pkgs.config, {
        "name": "subject", "stdenvCc": None, "dontUnpack": True, "dontConfigure": True, "dontBuild": True,
        "installPhase": 'mkdir -p "$out"\n', "passthru": {"tests": {"probe": probe}},
    }, system="x86_64-linux", name="subject")
    pkgs = pkgs.extend(lambda final, prev: {"subject": subject})
    assert is_tester(collect_tests(subject), "probe")  # a writeGpuTestPython program is run, not only built
    (result,) = run_tests(pkgs, ["subject"], offered=frozenset())
    assert result.result == "skipped" and result.detail.startswith("a tester: its program runs on a machine offering cuda")


def test_the_fidelity_members_table_is_drawn_from_the_set(manifests_dir, monkeypatch, tmp_path):
    import importlib.util
    from pathlib import Path

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    tool = Path(__file__).resolve().parents[1] / "tools" / "fidelity_members.py"
    spec = importlib.util.spec_from_file_location("fidelity_members", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = {name: (kind, state) for name, kind, state in module.rows("cudaPackages_13_0")}
    assert rows["nvidia_driver"] == ("redistributable", "broken: use drivers from linuxPackages")
    assert rows["setupCudaHook"][0] == "hook" and rows["libcublas"] == ("redistributable", "available")
    assert rows["cuda_compat"][1].startswith("unsupported: ")
