"""python3Packages.torch / torch-bin / triton at evaluation: which torch a set gets, and why a set cannot have one.

Nothing is built or downloaded: each check reads derivations and meta only (the wheels are pinned by
file name and sha256; the realisation of the CUDA 13.0 closure is tests/pkgs/test_torch_closure.py).
"""

from __future__ import annotations

import pytest

import cudapkgs
from cudapkgs.derivation import derivation_of
from cudapkgs.errors import UnavailablePackageError
from cudapkgs.lib.attrpath import parse_attrpath, resolve
from cudapkgs.pkgs.python_modules.cuda_fit import capability_fits, runtime_fits
from cudapkgs.pkgs.python_modules.torch import TORCH_BUILDS

# The default fetchers (NVIDIA's server, then its wheels); a test about wheels alone says so.
CONFIG = {"allowUnfree": True, "prebuiltWheels": ["nccl", "libnvshmem"]}
WHEELS_ONLY = {"fetchers": ["wheels"]}


def at(attr: str, **config):
    pkgs = cudapkgs.import_pkgs(config={**CONFIG, **config})
    return resolve(pkgs, parse_attrpath(attr))


def problems(package) -> str:
    return "\n".join(p["message"] for p in package.meta.problems.values())


@pytest.fixture(autouse=True)
def _manifests(manifests_dir):
    return manifests_dir


def test_the_seeds_example_has_a_working_torch_on_the_default_set():
    torch = at("pkgsCuda.python3Packages.torch")
    assert torch.version == "2.9.1" and not torch.meta.broken and torch.meta.available, problems(torch)
    assert torch.passthru.cudaPackages.cudaMajorMinorVersion == "12.9"
    assert torch.passthru.cudnn.version == "9.22.0.52"  # the set's own cuDNN serves a 9.10 build
    attrs = torch.drvAttrs
    assert attrs["wheel"]["file"] == "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert attrs["pythonRemoveDeps"] == ["nvidia-*"]  # 2.9.1 pins nvidia-*-cu12 only (2.14.1: cuda-toolkit too)
    cuda = at("cudaPackages_12_9")
    assert cuda.libcublas.lib in attrs["buildInputs"] and cuda.cudnn.lib in attrs["buildInputs"]
    assert f"{cuda.cuda_nvrtc.lib}/lib" in attrs["appendRunpaths"]  # Nixpkgs' extraRunpaths
    assert attrs["driverLibDir"] and attrs["autoAddDriverRunpath"]
    triton = at("pkgsCuda.python3Packages.triton")
    assert triton.version == "3.5.1" and triton.drvPath in {d.drv_path for d in torch.derivation.deps}


def test_cuda12_torch_from_wheels_alone_takes_ptxas_from_the_nvcc_wheel():
    # CUDA 12's nvcc wheel has no nvcc, so with NVIDIA's wheels as the only fetcher the set's cuda_nvcc is
    # unavailable, saying so; but the wheel has ptxas, which is all triton needs: cuda_nvcc_wheel.
    torch = at("pkgsCuda.python3Packages.torch", **WHEELS_ONLY)
    assert torch.version == "2.9.1" and torch.meta.available and not torch.meta.broken, problems(torch)
    cuda = at("cudaPackages_12_9", **WHEELS_ONLY)
    assert not cuda.cuda_nvcc.meta.available
    assert "nvcc is not in NVIDIA's CUDA 12 wheel" in problems(cuda.cuda_nvcc)
    wheel = cuda.cuda_nvcc_wheel
    assert wheel.meta.available and wheel.version == cuda.cuda_nvcc.version == "12.9.86"
    assert wheel.drvAttrs["nvidiaWheel"] == {"project": "nvidia-cuda-nvcc-cu12", "version": "12.9.86", "cudaMajor": 12}
    assert "bin/ptxas" in wheel.drvAttrs["wheelRequire"]
    triton = at("pkgsCuda.python3Packages.triton", **WHEELS_ONLY)
    links = triton.drvAttrs["wheelLinks"]
    assert links["triton/backends/nvidia/bin/ptxas"] == [wheel.out, "bin/ptxas"]
    assert wheel.drvPath in {d.drv_path for d in triton.derivation.deps}
    assert cuda.cuda_nvcc.name not in {d.name for d in triton.derivation.deps}
    # What compiles with nvcc still says why at evaluation (NCCL's source build).
    nccl = at("cudaPackages_12_9.nccl", **WHEELS_ONLY, prebuiltWheels=[])
    with pytest.raises(UnavailablePackageError, match="nvcc is not in NVIDIA's CUDA 12 wheel"):
        nccl.drvPath
    # torch is available (its libraries are); building it names who needs the nvcc no fetcher supplies
    torch = at("cudaPackages_12_9.pkgs.pkgsCuda.python3Packages.torch", **WHEELS_ONLY, prebuiltWheels=["libnvshmem"])
    with pytest.raises(UnavailablePackageError) as raised:
        torch.drvPath
    assert "nvcc is not in NVIDIA's CUDA 12 wheel" in str(raised.value)
    assert str(raised.value).endswith(f"(needed by {nccl.name}, needed by torch-2.9.1; prebuiltWheels = "
                                      "[\"nccl\"] takes NVIDIA's wheel of nccl instead of building it)"), str(raised.value)


def test_with_nvidias_server_triton_keeps_nixpkgs_ptxas_from_cuda_nvcc():
    from cudapkgs.pkgs.python_modules.triton import nvcc_tools

    cuda = at("cudaPackages_12_9")
    triton = at("pkgsCuda.python3Packages.triton")
    tools = nvcc_tools(cuda)
    assert triton.drvAttrs["wheelLinks"]["triton/backends/nvidia/bin/ptxas"] == [tools.out, "bin/ptxas"]
    # cuda_nvcc's release, arranged as cuda_nvcc is, without the host compiler (so triton's path names none)
    nvcc, own = cuda.cuda_nvcc.derivation, tools.derivation
    assert own.data["src"] == nvcc.data["src"] and own.data["inputs"] == nvcc.data["inputs"]
    assert "hostCompiler" in nvcc.attrs and "hostCompiler" not in own.attrs
    assert {k: v for k, v in own.attrs.items()} == {k: v for k, v in nvcc.attrs.items() if k != "hostCompiler"}
    assert own.name == "cuda12.9-cuda_nvcc-tools-12.9.86" and nvcc_tools(cuda) is tools  # one package per nvcc


def test_the_nvcc_wheel_member_says_where_it_cannot_be():
    redist = at("cudaPackages_12_9.cuda_nvcc_wheel", fetchers=["redist"])
    assert not redist.meta.available and '"wheels" is not in the configured fetchers' in problems(redist)
    with pytest.raises(UnavailablePackageError, match="wheels"):
        redist.drvPath
    cuda13 = at("cudaPackages_13_0.cuda_nvcc_wheel", **WHEELS_ONLY)
    assert not cuda13.meta.available and "use cudaPackages_13_0.cuda_nvcc" in problems(cuda13)


def test_triton_without_any_ptxas_names_both_members(monkeypatch):
    from types import SimpleNamespace

    from cudapkgs.lib.fixpoint import AttrSet
    from cudapkgs.pkgs.python_modules import triton
    from cudapkgs.pkgs.python_modules.triton import ptxas_package, ptxas_unavailable

    monkeypatch.setattr(triton, "nvcc_tools", lambda cuda: SimpleNamespace(name=f"tools of {cuda.cuda_nvcc.name}"))

    def member(name, available, why):
        return SimpleNamespace(name=name, meta=AttrSet({"available": available,
                                                        "problems": {} if available else {"x": {"message": why}}}))

    class Set(dict):
        attr_path = "cudaPackages_12_9"
        __getattr__ = dict.__getitem__

    nvcc, wheel = member("nvcc", False, "no nvcc here"), member("wheel", False, "no wheels here")
    neither = Set(cuda_nvcc=nvcc, cuda_nvcc_wheel=wheel)
    assert ptxas_package(neither) is nvcc  # its derivation refuses with its own reasons
    text = ptxas_unavailable(neither)
    assert "cudaPackages_12_9.cuda_nvcc is available (it is not: no nvcc here)" in text
    assert "cudaPackages_12_9.cuda_nvcc_wheel is available (it is not: no wheels here)" in text
    assert ptxas_package(Set(cuda_nvcc=nvcc, cuda_nvcc_wheel=member("w", True, ""))).name == "w"
    assert ptxas_package(Set(cuda_nvcc=member("n", True, ""), cuda_nvcc_wheel=wheel)).name == "tools of n"


def test_cuda12_torch_without_a_ptxas_is_broken_saying_why(monkeypatch):
    # Neither cuda_nvcc (no fetcher with nvcc) nor cuda_nvcc_wheel (Jetson: NVIDIA publishes no wheels).
    from cudapkgs.cuda import nvcc_wheel

    monkeypatch.setattr(nvcc_wheel, "_WHEEL_SYSTEMS", ())
    torch = at("pkgsCuda.python3Packages.torch", **WHEELS_ONLY)
    assert torch.meta.broken
    text = problems(torch)
    assert "python3Packages.triton is available (it is not:" in text and "has a ptxas" in text
    assert "nvcc is not in NVIDIA's CUDA 12 wheel" in text and "NVIDIA publishes no wheels for linux-x86_64" in text


def test_cuda13_sets_get_torch_2_14_with_a_cudnn_new_enough():
    torch = at("cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch")
    assert torch.version == "2.14.1" and not torch.meta.broken, problems(torch)
    # The sets' cudnn is 9.22 (as the seeds fix it); torch 2.14.1 was built with 9.24 and refuses an
    # older minor, so it takes the set's newest cudnn_X_Y that serves it.
    assert torch.passthru.cudnn.version == "9.27.0.42"
    assert at("cudaPackages_13_0").cudnn_9_27.lib in torch.drvAttrs["buildInputs"]
    assert at("cudaPackages_13_0").cudnn.lib not in torch.drvAttrs["buildInputs"]
    for set_name in ("cudaPackages_13_2", "cudaPackages_13_4"):
        newer = at(f"{set_name}.pkgs.pkgsCuda.python3Packages.torch")
        assert newer.version == "2.14.1" and not newer.meta.broken, problems(newer)


def test_a_set_whose_libraries_are_too_old_is_broken_naming_component_and_version():
    torch = at("cudaPackages_12_6.pkgs.pkgsCuda.python3Packages.torch")
    assert torch.meta.broken
    text = problems(torch)
    assert "cudaPackages_12_6.libcublas is 12.x at least 12.8.4.1" in text and "(the set has 12.6.4.1)" in text
    with pytest.raises(UnavailablePackageError, match="libcublas is 12.x at least 12.8.4.1"):
        derivation_of(torch, "cudaPackages_12_6.pkgs.pkgsCuda.python3Packages.torch")  # `cudapkgs build`/`shell`


def test_the_compatibility_rules():
    # cuDNN as torch/backends/cudnn/__init__.py checks it: the same major, a minor at least the build's.
    assert not runtime_fits("9.24.0.43", "9.22.0.52", minor_only=True)
    assert runtime_fits("9.24.0.43", "9.24.0.1", minor_only=True) and runtime_fits("9.24.0.43", "9.27.0.42", minor_only=True)
    assert not runtime_fits("9.24.0.43", "10.0.0", minor_only=True)
    # Other libraries by soname major: at least the version built against (NCCL's "-1" revision ignored).
    assert runtime_fits("12.8.4.1", "12.9.1.4") and not runtime_fits("12.8.4.1", "12.6.4.1")
    assert runtime_fits("2.27.5", "2.30.7-1") and runtime_fits("0.8.1", "0.10.0.12") and not runtime_fits("12.8.90", "13.0.96")


def test_without_a_new_enough_cudnn_torch_says_which_cudnn_it_needs(tmp_path, manifests_dir):
    import shutil

    manifests = tmp_path / "manifests"
    shutil.copytree(manifests_dir, manifests)
    (manifests / "cudnn" / "redistrib_9.27.0.json").unlink()
    torch = at("cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch", manifestsDir=str(manifests))
    assert torch.meta.broken
    text = problems(torch)
    assert "cudaPackages_13_0.cudnn is 9.24 or a newer 9.x, as torch 2.14.1 was built against cudnn 9.24.0.43" in text
    assert "(the set has 9.22.0.52); nor does any cudnn_X_Y of cudaPackages_13_0" in text


def test_a_capability_the_wheel_lacks_is_broken_naming_the_ones_it_has():
    old = at("pkgsForCudaArch.sm_61.python3Packages.torch")
    assert old.meta.broken
    assert ("torch 2.9.1 has machine code for CUDA capability 6.1 (it has 7.0, 7.5, 8.0, 8.6, 9.0, 10.0, 12.0 "
            "and no PTX)") in problems(old)
    for capability in ("sm_90", "sm_89", "sm_90a", "sm_120"):  # 8.9 runs 8.6's code (same major)
        torch = at(f"pkgsForCudaArch.{capability}.python3Packages.torch")
        assert not torch.meta.broken, (capability, problems(torch))
    assert not at("pkgsForCudaArch.sm_90.cudaPackages_13_0.pkgs.python3Packages.torch").meta.broken
    assert capability_fits("x", ["11.0"], ("10.0", "12.0"))[0]["assertion"] is False  # Thor: no sm_11x code


def test_torch_needs_every_library_it_links_available():
    torch = at("cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch", prebuiltWheels=[])
    assert torch.meta.broken
    assert "cudaPackages_13_0.libnvshmem is available (it is not:" in problems(torch)
    assert "mpi is available" in problems(torch)  # the from-source NVSHMEM's own reason


def test_torch_without_unfree_allowed_says_the_licenses_are_why_it_is_broken():
    torch = at("cudaPackages_12_9.pkgs.pkgsCuda.python3Packages.torch", allowUnfree=False, **WHEELS_ONLY)
    assert torch.meta.broken
    text = problems(torch)  # it said "cudaPackages_12_9.cuda_nvrtc is available", nothing more
    assert ("cudaPackages_12_9.cuda_nvrtc is available (it is not: its license is unfree (CUDA EULA): "
            "allowUnfree = true or allowUnfreePredicate = \"cuda\" allows it)") in text
    assert "cudaPackages_12_9.cudnn is available" in text and "cuDNN EULA" in text
    assert not at("cudaPackages_12_9.pkgs.pkgsCuda.python3Packages.torch", **WHEELS_ONLY).meta.broken


def test_a_library_built_from_source_that_cannot_be_says_which_wheel_would_do():
    torch = at("cudaPackages_12_9.pkgs.pkgsCuda.python3Packages.torch", **WHEELS_ONLY, prebuiltWheels=["nccl"])
    assert torch.meta.broken
    text = problems(torch)  # NVSHMEM's source build needs MPI & co.; NVIDIA's wheel does not
    assert "cudaPackages_12_9.libnvshmem is available (it is not: " in text
    assert "ucx is available; prebuiltWheels = [\"libnvshmem\"] takes NVIDIA's wheel of libnvshmem instead" in text
    assert "nccl\"]" not in text  # the wheel of NCCL is taken already: no hint for it


def test_torch_without_cuda_support_says_so():
    torch = at("python3Packages.torch")
    assert torch.meta.broken and "pkgsCuda.python3Packages.torch" in problems(torch)
    assert at("pkgsCuda.python3Packages.torch").drvPath == at("pkgsCuda.python3Packages.torch-bin").drvPath


def test_the_preload_and_host_cuda_guesses_are_made_inert():
    for version, build in TORCH_BUILDS.items():
        files = {s["file"] for s in build.substitutions}
        assert files == {"torch/__init__.py", "torch/utils/cpp_extension.py"}, version
        init = [r for s in build.substitutions if s["file"] == "torch/__init__.py" for r in s["replace"]]
        assert any("return []" in new for _old, new in init) and any("raise err" in new for _old, new in init)


def test_triton_uses_the_sets_tools():
    cuda = at("cudaPackages_13_0", **WHEELS_ONLY)
    triton = at("cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.triton", **WHEELS_ONLY)
    links = triton.drvAttrs["wheelLinks"]
    from cudapkgs.pkgs.python_modules.triton import nvcc_tools

    tools = nvcc_tools(cuda)  # cuda_nvcc without the host compiler
    assert links["triton/backends/nvidia/bin/ptxas"] == [tools.out, "bin/ptxas"]
    assert links["triton/backends/nvidia/bin/ptxas-blackwell"] == [tools.out, "bin/ptxas"]
    assert links["triton/backends/nvidia/lib/cupti"] == [cuda.cuda_cupti.lib, "lib"]
    assert "triton/backends/nvidia/bin/cuobjdump" not in links  # no CUDA 13.0 wheel of it: unavailable, left out
    assert "triton/backends/nvidia/bin/cuobjdump" in triton.drvAttrs["wheelRemove"]  # never the bundled one
    assert tools.drvPath in {d.drv_path for d in triton.derivation.deps}  # the links' targets are inputs
    assert cuda.cuda_nvcc.drvPath not in {d.drv_path for d in triton.derivation.closure()}
    redist = at("cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.triton", fetchers=["redist", "wheels"])
    assert "triton/backends/nvidia/bin/cuobjdump" in redist.drvAttrs["wheelLinks"]
    newer = at("cudaPackages_13_2.pkgs.pkgsCuda.python3Packages.triton", **WHEELS_ONLY)
    assert newer.drvAttrs["wheelLinks"]["triton/backends/nvidia/bin/nvdisasm"][1] == "bin/nvdisasm"
    driver = [r for s in triton.drvAttrs["wheelSubstitutions"] for r in s["replace"]][0][1]
    assert "/run/opengl-driver/lib" in driver and "libcuda.so.1" in driver


def test_search_finds_torch_and_a_missing_package_suggests_close_names():
    from cudapkgs.errors import AttributeMissingError
    from cudapkgs.inventory import search

    pkgs = cudapkgs.import_pkgs(config=CONFIG)
    names = [row["name"] for row in search(["torch"], pkgs=pkgs)]
    assert "python3Packages.torch" in names and "python3Packages.torch-bin" in names
    with pytest.raises(AttributeMissingError, match='did you mean "torch"'):
        resolve(pkgs, parse_attrpath("pkgsCuda.python3Packages.pytorch"))


def test_a_project_locks_the_torch_of_its_set(tmp_path, monkeypatch):
    import json

    from cudapkgs.cli import main
    from cudapkgs.top_level import clear_cache

    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    root = tmp_path / "proj"
    root.mkdir()
    (root / "cudapkgs.toml").write_text('set = "cudaPackages_13_0"\npackages = ["python3Packages.torch"]\n'
                                        "[config]\nallowUnfree = true\ncudaSupport = true\n"
                                        'prebuiltWheels = ["nccl", "libnvshmem"]\n')
    monkeypatch.chdir(root)
    assert main(["allow", str(root)]) == 0
    assert main(["lock"]) == 0
    lock = json.loads((root / "cudapkgs.lock").read_text())
    assert lock["packages"]["python3Packages.torch"]["name"] == "torch-2.14.1"
    names = {entry["name"] for entry in lock["derivations"].values()}
    assert {"cuda13.0-cudnn-9.27.0.42", "triton-3.8.0", "cuda13.0-nccl-2.30.7-1"} <= names


def test_with_the_cuda_predicate_torch_and_triton_say_their_own_license_and_the_key_that_allows_it():
    """allowUnfreePredicate = "cuda" covers NVIDIA's licenses, not torch's (issl) nor triton's: the
    refusal names the package's own license first (check-meta's order) and the key that does allow it;
    triton said only "triton-3.5.1 is not available", torch seventeen broken inputs."""
    from cudapkgs.errors import UnfreeLicenseError

    for attr, license_name in (("pkgsCuda.python3Packages.torch", "issl"), ("pkgsCuda.python3Packages.triton", "unfreeRedistributable")):
        package = at(attr, allowUnfree=False, allowUnfreePredicate="cuda")
        with pytest.raises(UnfreeLicenseError) as caught:
            derivation_of(package, attr)
        text = str(caught.value)
        assert license_name in text and "--set allowUnfree=true" in text, text
        assert "allowUnfreePredicate=cuda covers NVIDIA's CUDA licenses only" in text and "broken" not in text, text
    # an input refused only for an NVIDIA license still names the predicate as a way
    torch = at("pkgsCuda.python3Packages.torch", allowUnfree=False, allowUnfreePredicate="cuda")
    triton_line = [line for line in problems(torch).splitlines() if "python3Packages.triton is available" in line]
    assert triton_line and 'allowUnfree = true allows it (allowUnfreePredicate = "cuda" covers' in triton_line[0]


def test_the_cpu_stand_in_refuses_its_out_path_with_the_reason():
    """python3Packages.torch without cudaSupport is broken: its outPath gave a store path (Nixpkgs'
    check-meta makes outPath and drvPath throw); meta and version still read."""
    torch = at("python3Packages.torch")
    assert torch.meta.broken and torch.version
    with pytest.raises(UnavailablePackageError, match="pkgsCuda.python3Packages.torch"):
        torch.outPath


def test_torch_bin_inputs_and_metadata_are_nixpkgs(manifests_dir):
    # torch/bin/default.nix@02e4aeed: 13 CUDA inputs, pyyaml and requests among the Python dependencies,
    # Nixpkgs' description, hydraPlatforms [] (3.2 GB); cudapkgs adds libnvjitlink and libnvshmem (the
    # PyPI wheels link them) and pins x86_64-linux wheels only.
    from cudapkgs.lib.fixpoint import force
    from cudapkgs.pkgs.python_modules.torch import EXTRA_CUDA_INPUTS, NIXPKGS_CUDA_INPUTS

    assert len(NIXPKGS_CUDA_INPUTS) == 13
    for build in TORCH_BUILDS.values():
        assert set(build.built_with) | {"cudnn"} == set(NIXPKGS_CUDA_INPUTS) | set(EXTRA_CUDA_INPUTS)
    pkgs = cudapkgs.import_pkgs(config={**CONFIG, "cudaSupport": True})
    torch = pkgs.python3Packages["torch-bin"]
    names = {force(d).pname for d in torch.dependencies}
    assert {"pyyaml", "requests", "numpy", "filelock", "jinja2", "networkx", "setuptools", "sympy",
            "typing-extensions", "triton"} <= names
    assert torch.meta["description"] == "PyTorch: Tensors and Dynamic neural networks in Python with strong GPU acceleration"
    assert torch.meta["hydraPlatforms"] == [] and torch.meta["platforms"] == ["x86_64-linux"]
    requests = pkgs.python3Packages.requests
    assert {d.pname for d in requests.propagatedBuildInputs} == {"charset-normalizer", "idna", "urllib3", "certifi"}
    assert pkgs.python3Packages.pyyaml.pythonImportsCheck == ["yaml"]


def test_rocm_torch_says_what_it_would_need(manifests_dir):
    # pkgsRocm (rocmSupport on, cudaSupport off): torch/source/default.nix@00d0ced3 builds against rocmPackages
    rocm = cudapkgs.import_pkgs(config=CONFIG).pkgsRocm.python3Packages.torch
    message = problems(rocm)
    assert rocm.meta.available is False
    assert "rocmSupport is on, and no ROCm build of torch is packaged" in message
    assert "rocmPackages (rocm-core, clr, rccl, miopen" in message and "pkgsCuda.python3Packages.torch" in message
    with pytest.raises(UnavailablePackageError, match="rocmSupport is on"):
        rocm.outPath
    both = at("python3Packages.torch", cudaSupport=True, rocmSupport=True)
    assert "CUDA and ROCm are not both on (they are mutually exclusive)" in problems(both)


def test_torch_testers_are_write_gpu_test_python_programs(manifests_dir):
    # torch/tests/default.nix@2ff66c69: tester-compileCpu (no feature), tester-cudaAvailable and
    # tester-compileCuda (feature cuda) are writeGpuTestPython programs with their .gpuCheck
    from cudapkgs.lib.fixpoint import force
    from cudapkgs.testers import collect_tests, is_tester, tester_features

    torch = at("python3Packages.torch", cudaSupport=True)
    tests = collect_tests(torch)
    for key, feature, program in (("tester-compileCpu", [], "torch-compile-cpu"),
                                  ("tester-cudaAvailable", ["cuda"], "cudaAvailable"),
                                  ("tester-compileCuda", ["cuda"], "torch-compile-cuda")):
        tester = tests[key]
        assert is_tester(tests, key) and tester_features(tester) == feature
        assert tester.meta["mainProgram"] == program
        check = force(tester.passthru["gpuCheck"]).derivation
        assert check.attrs["requiredSystemFeatures"] == feature
        assert tester.drvPath in {d.drv_path for d in check.deps}
    assert not is_tester(tests, "compileCpu")  # the builds stay as they were


def test_the_testers_of_another_interpreters_torch_run_with_that_interpreter(manifests_dir):
    # found on the GPU (2026-12-07): python312Packages.torch's tester-cudaAvailable ran the default
    # python3 (3.11) with the 3.12 torch's site-packages, so `import torch` could never work there
    from cudapkgs.testers import collect_tests

    ps = at("cudaPackages_13_0.pkgs.pkgsCuda.python312Packages", **WHEELS_ONLY)
    tester = collect_tests(ps.torch)["tester-cudaAvailable"]
    env = next(d for d in tester.derivation.deps if "python3-env" in d.name)
    assert env.attrs["pythonVersion"] == "3.12" and env.name.endswith("3.12.1"), env.name
    default = collect_tests(at("cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch", **WHEELS_ONLY))["tester-cudaAvailable"]
    assert default.drvPath != tester.drvPath
