"""python3Packages.jax, jaxlib, jax-cuda13-pjrt, jax-cuda13-plugin and cupy at evaluation: pins, the set's
libraries they are rewired to (the same cuDNN as torch), the run paths their dlopens need, and why a
CUDA 12 set cannot have them. Nothing is built or downloaded here."""

from __future__ import annotations

import pytest

import cudapkgs
from cudapkgs.lib.attrpath import parse_attrpath, resolve
from cudapkgs.pkgs.python_modules import jax as jax_module
from cudapkgs.pkgs.python_modules.cupy import CUPY_LIBRARIES

WHEELS = {"allowUnfree": True, "fetchers": ["wheels"], "prebuiltWheels": ["nccl", "libnvshmem"]}
CU13 = "cudaPackages_13_0.pkgs.pkgsCuda.python3Packages"


def at(attr: str, **config):
    pkgs = cudapkgs.import_pkgs(config={**WHEELS, **config})
    return resolve(pkgs, parse_attrpath(attr))


def problems(package) -> str:
    return "\n".join(p["message"] for p in package.meta.problems.values())


@pytest.fixture(autouse=True)
def _manifests(manifests_dir):
    return manifests_dir


def _lib_dir(package) -> str:
    return f"{package['lib' if 'lib' in package.outputs else 'out']}/lib"


def test_the_plugins_dlopen_the_sets_libraries_through_appended_run_paths():
    cuda = at("cudaPackages_13_0")
    torch = at(f"{CU13}.torch")
    for name in ("jax-cuda13-pjrt", "jax-cuda13-plugin"):
        plugin = at(f"{CU13}.{name}")
        assert plugin.version == "0.10.2" and not plugin.meta.broken, problems(plugin)
        attrs = plugin.drvAttrs
        # The plugin's with-cuda extra names NVIDIA's wheels; the PJRT wheel requires nothing.
        assert attrs.get("pythonRemoveDeps") == (["nvidia-*"] if name == "jax-cuda13-plugin" else None)
        runpaths = attrs["appendRunpaths"]
        # Nixpkgs' cudaLibPath (jax-cuda12-pjrt/default.nix@00e6b22b), plus nvrtc and NVSHMEM for CUDA 13.
        for attr in ("libcublas", "cuda_cupti", "cuda_cudart", "libcufft", "libcusolver", "libcusparse", "nccl",
                     "libnvjitlink", "cuda_nvrtc", "libnvshmem"):
            assert _lib_dir(cuda[attr]) in runpaths, attr
        # One cuDNN with torch in the process: torch's choice (9.27: 2.14.1 refuses the set's 9.22), not cudnn.
        assert _lib_dir(torch.passthru.cudnn) in runpaths and _lib_dir(cuda.cudnn) not in runpaths
        assert runpaths[-1] == "$ORIGIN" and attrs["autoAddDriverRunpath"]
        assert plugin.passthru.cudaPackages.cudaMajorMinorVersion == "13.0"
    pjrt = at(f"{CU13}.jax-cuda13-pjrt").drvAttrs
    assert pjrt["wheel"]["file"] == "jax_cuda13_pjrt-0.10.2-py3-none-manylinux_2_27_x86_64.whl"
    assert pjrt["wheelSubstitutions"][0]["file"] == "jax_plugins/xla_cuda13/__init__.py"
    links = pjrt["wheelLinks"]
    from cudapkgs.pkgs.python_modules.triton import nvcc_tools

    tools = nvcc_tools(cuda)  # cuda_nvcc without the host compiler: the plugin's path names none
    assert links["jax_plugins/nvidia/cu13/bin/ptxas"] == [str(tools.out), "bin/ptxas"]
    assert links["jax_plugins/nvidia/cu13/bin/nvlink"] == [str(tools.out), "bin/nvlink"]
    assert links["jax_plugins/nvidia/cu13/nvvm"] == [str(cuda.libnvvm.out), "."]
    plugin = at(f"{CU13}.jax-cuda13-plugin")
    assert plugin.drvAttrs["wheel"]["file"] == "jax_cuda13_plugin-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl"
    assert at(f"{CU13}.jax-cuda13-pjrt").drvPath in {d.drv_path for d in plugin.derivation.deps}


def test_jax_and_jaxlib_are_cuda_free_wheels_with_their_requirements():
    jax = at(f"{CU13}.jax")
    assert jax.version == "0.10.2" and jax.drvAttrs["wheel"]["file"] == "jax-0.10.2-py3-none-any.whl"
    deps = {d.pname for d in jax.passthru.dependencies}
    assert deps == {"jaxlib", "ml-dtypes", "numpy", "opt-einsum", "scipy"}  # its Requires-Dist
    jaxlib = at(f"{CU13}.jaxlib")
    assert jaxlib.version == "0.10.2" and not any("-cuda13.0-" in str(d.drv_path) for d in jaxlib.derivation.deps)
    # The same jax for every set: it carries no CUDA.
    assert at("pkgsCuda.python3Packages.jax").drvPath == jax.drvPath


def test_cupy_links_the_sets_libraries_and_drops_cuda_pathfinder():
    cuda = at("cudaPackages_13_0")
    cupy = at(f"{CU13}.cupy")
    assert cupy.version == "14.2.0" and not cupy.meta.broken, problems(cupy)
    attrs = cupy.drvAttrs
    assert attrs["wheel"]["file"] == "cupy_cuda13x-14.2.0-cp311-cp311-manylinux2014_x86_64.whl"
    # cuda-pathfinder stays (a compiled module calls it), without its search of nvidia/ trees on sys.path.
    pathfinder = at(f"{CU13}.cuda-pathfinder")
    assert {d.pname for d in cupy.passthru.dependencies} == {"numpy", "cuda-pathfinder"}
    early = pathfinder.drvAttrs["wheelSubstitutions"][0]["replace"][0][1]
    # The set's library directories first (issue 31): never nvidia/ trees on sys.path or $CONDA_PREFIX.
    assert "EARLY_FIND_STEPS: tuple[FindStep, ...] = (find_in_cudapkgs_set,)" in early
    assert f"'{_lib_dir(at('cudaPackages_13_0.cuda_nvrtc'))}'" in early and "find_in_site_packages" not in early.split("EARLY")[1]
    inputs = {str(p) for p in attrs["buildInputs"]}
    for attr in CUPY_LIBRARIES:
        assert str(cuda[attr]["lib" if "lib" in cuda[attr].outputs else "out"]) in inputs, attr
    assert attrs["appendRunpaths"] == [_lib_dir(cuda.cuda_nvrtc), "$ORIGIN"]  # nvrtc is dlopened (SoftLink)
    # NVIDIA's wheels supply no cuTENSOR here: only cupyx.cutensor's library is left to fail.
    assert attrs["autoPatchelfIgnoreMissingDeps"] == ["libcutensor.so.2", "libcutensorMg.so.2"]
    environment = next(s for s in attrs["wheelSubstitutions"] if s["file"] == "cupy/_environment.py")
    assert f"return {str(cuda.cuda_cudart.include)!r}" in environment["replace"][0][1]  # the set's headers


@pytest.mark.parametrize("name", ["jax-cuda13-pjrt", "jax-cuda13-plugin"])
def test_a_cuda_12_set_cannot_have_the_cuda_13_wheels_and_says_why(name):
    package = at(f"pkgsCuda.python3Packages.{name}")  # the default set: CUDA 12.9
    assert package.meta.broken
    assert "is a CUDA 13 build; cudaPackages_12_9 is CUDA 12.9 (use cudaPackages_13_0.pkgs" in problems(package)


def test_a_cuda_12_sets_cupy_is_cupy_cuda12x():
    # issue 31: CUDA 12 sets get CuPy's CUDA 12 wheel (they were broken: "a CUDA 13 build")
    package = at("pkgsCuda.python3Packages.cupy")  # the default set: CUDA 12.9
    assert not package.meta.broken and "cupy-cuda12x 14.2.0 on cudaPackages_12_9" in package.meta["longDescription"]


def test_a_cudnn_older_than_the_plugins_minimum_is_named_with_the_version_needed():
    class Package:
        def __init__(self, version):
            self.version = version

    class Set(dict):
        attr_path, cudaMajorVersion, cudaMajorMinorVersion = "cudaPackages_13_9", 13, "13.9"

    cuda = Set(cudnn=Package("9.10.2.21"), nccl=Package("2.30.7"), libnvshmem=None)
    found = {a["message"]: a["assertion"] for a in jax_module.cuda13_assertions(cuda, "jax-cuda13-plugin 0.10.2",
                                                                                pick=lambda c, a: c[a])}
    assert found["jax-cuda13-plugin 0.10.2 needs cudnn >= 9.12.0.46; cudaPackages_13_9.cudnn is 9.10.2.21"] is False
    assert found["jax-cuda13-plugin 0.10.2 needs nccl >= 2.27.7; cudaPackages_13_9.nccl is 2.30.7"] is True
    assert found["jax-cuda13-plugin 0.10.2 needs libnvshmem >= 3.3.20; cudaPackages_13_9.libnvshmem is missing"] is False


def test_the_new_packages_are_found_by_name():
    pkgs = cudapkgs.import_pkgs(config=WHEELS)
    names = set(pkgs.cudaPackages_13_0.pkgs.pkgsCuda.python3Packages)
    assert {"jax", "jaxlib", "jax-cuda13-pjrt", "jax-cuda13-plugin", "cupy", "cuda-pathfinder", "scipy", "ml-dtypes",
            "opt-einsum"} <= names


def test_xla_is_given_the_plugins_cuda_directory_first_and_torch_the_sets_nvrtc_by_path():
    """issue 31: XLA ran /usr/local/cuda/bin/ptxas (its own search puts /usr/local/cuda first); torch's
    _get_nvrtc_library loaded libnvrtc.so.13 by name, through the system's search. (Run, with a decoy
    host CUDA: tests/pkgs/test_runtime_lookups.py.)"""
    pjrt = at(f"{CU13}.jax-cuda13-pjrt")
    texts = [new for entry in pjrt.drvAttrs["wheelSubstitutions"] for _old, new in entry["replace"]]
    assert any("os.environ['XLA_FLAGS'] = (f'--xla_gpu_cuda_data_dir={data_dir} ' + flags)" in t for t in texts)
    assert pjrt.drvAttrs["wheelLinks"]["jax_plugins/nvidia/cu13/bin/ptxas"][1] == "bin/ptxas"
    torch = at(f"{CU13}.torch")
    nvrtc = _lib_dir(at("cudaPackages_13_0.cuda_nvrtc"))
    (entry,) = [e for e in torch.drvAttrs["wheelSubstitutions"] if e["file"] == "torch/cuda/_utils.py"]
    assert f"'{nvrtc}/libnvrtc.so.13',  # cudapkgs: the set's NVRTC, by its path" in entry["replace"][0][1]
