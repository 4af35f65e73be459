"""Real binaries: sets realised with ``fetchers = ["wheels"]`` only (NVIDIA's PyPI wheels, through pip).

CUDA 12.8: the runtime (cudart, and nvcc's headers as cuda_crt, from the nvcc-cu12 wheel) realises
and a host C++ program builds against it, while nvcc itself (its wheel has no ``nvcc``) is refused
before anything is downloaded, naming the fetchers that could supply it. CUDA 13.2 and 13.4: the
compiler and runtime realise without cuda_compat (no wheel of it, so no run-path hook, as Nixpkgs
does when cuda_compat is unavailable) and compile a kernel for sm_90; 13.4 takes cccl 13.3.4.3.1.

The wheels are kept in the test cache (see tests/conftest.py), so only the first run downloads.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.elf.read import read_elf
from cudapkgs.errors import UnavailablePackageError
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store

pytestmark = pytest.mark.wheels

KERNEL = (
    "#include <cuda_runtime.h>\n__global__ void axpy(int n, float a, const float *x, float *y) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i]; }\n"
    "int main() { return cudaGetDeviceCount(nullptr) == cudaSuccess ? 0 : 2; }\n"
)


def _config(tmp_path: Path) -> dict:
    return {"storeDir": str(tmp_path / "store"), "fetchers": ["wheels"], "allowUnfree": True,
            "cudaSupport": True, "cudaCapabilities": ["9.0"], "cudaForwardCompat": False}


def test_cuda_12_8_runtime_from_wheels_and_nvcc_refused_before_any_download(tmp_path, manifests_dir, wheel_cache,
                                                                         require_pypi):
    require_pypi("nvidia-cuda-runtime-cu12")
    pkgs = cudapkgs.import_pkgs(config=_config(tmp_path))
    cuda = pkgs.cudaPackages_12_8
    with pytest.raises(UnavailablePackageError, match=r'lacks bin/nvcc.*fetchers that could: "redist"'):
        cuda.cuda_nvcc.derivation
    with pytest.raises(UnavailablePackageError, match="cuda_nvcc"):
        pkgs.saxpy.override(cudaPackages=cuda).derivation  # what needs nvcc is refused at evaluation too
    with Store.open(tmp_path / "store") as store:
        realise(store, [cuda.cuda_cudart.derivation])  # and with it cuda_crt and cuda_cccl
        assert store.is_valid(cuda.cuda_crt.out)
        assert not any("-cuda_nvcc-" in p for p in store.all_paths())
    crt = Path(cuda.cuda_crt.out)
    assert sorted(p.name for p in crt.iterdir() if p.name != "nix-support") == ["include"]  # nvcc's headers only
    assert (crt / "include" / "crt" / "host_config.h").is_file()
    propagated = (Path(cuda.cuda_cudart.out) / "nix-support" / "propagated-build-inputs").read_text().split()
    assert cuda.cuda_crt.out in propagated and not any("-cuda_nvcc-" in p for p in propagated)
    # A host program (as the ML stack's are) compiles against cudart with only what cudart propagates.
    source = tmp_path / "t.cpp"
    source.write_text("#include <cuda_runtime.h>\nint main() { int n = 0; return cudaGetDeviceCount(&n) == cudaSuccess ? 0 : 2; }\n")
    includes = [f"-I{p}/include" for p in (cuda.cuda_cudart.include, cuda.cuda_crt.out, cuda.cuda_cccl.out)]
    build = subprocess.run(["g++", *includes, str(source), f"-L{cuda.cuda_cudart.lib}/lib", "-lcudart",
                            f"-Wl,-rpath,{cuda.cuda_cudart.lib}/lib", "-o", str(tmp_path / "t")],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    ran = subprocess.run([tmp_path / "t"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert "error while loading shared libraries" not in ran.stderr and ran.returncode in (0, 2)


@pytest.mark.parametrize(("set_name", "cccl_version"), [("cudaPackages_13_2", "13.2.86"),
                                                        ("cudaPackages_13_4", "13.3.4.3.1")])
def test_compiler_and_runtime_from_wheels_without_cuda_compat(tmp_path, manifests_dir, wheel_cache, require_pypi,
                                                              set_name, cccl_version):
    require_pypi("nvidia-cuda-nvcc")
    cuda = cudapkgs.import_pkgs(config=_config(tmp_path))[set_name]
    cccl = cuda.cccl if cuda.cudaAtLeast("13.3") else cuda.cuda_cccl
    assert cccl.version == cccl_version
    if "cuda_compat" in cuda and cuda.cuda_compat is not None and cuda.cuda_compat.preferredRelease is not None:
        assert not cuda.cuda_compat.meta.available  # in 13.2's manifest for x86_64, and no wheel of it
    with Store.open(tmp_path / "store") as store:
        realise(store, [cuda.cuda_nvcc.derivation, cuda.cuda_cudart.derivation])
        assert store.verify() == []
        assert all(not p.rsplit("-", 2)[0].endswith("cuda_compat") for p in store.all_paths())
    lib = next(Path(cuda.cuda_cudart.lib, "lib").glob("libcudart.so.13*"))
    assert not any("cuda_compat" in entry for entry in read_elf(lib.resolve()).runpath)
    (tmp_path / "k.cu").write_text(KERNEL)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    compile_ = subprocess.run([f"{cuda.cuda_nvcc.out}/bin/nvcc", "-arch=sm_90", "-c", "k.cu", "-o", "k.o",
                               f"-I{cuda.cuda_cudart.include}/include"], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
    assert compile_.returncode == 0, compile_.stderr[-3000:]
    assert os.path.getsize(tmp_path / "k.o") > 0
    assert b"sm_90" in (tmp_path / "k.o").read_bytes()
