"""Real binaries: CUDA 13.0's nvcc toolchain realised from NVIDIA's PyPI wheels compiles saxpy for sm_90.

Downloads through pip (deselect with -m "not wheels"). The wheels are kept in the
user's cache ($CUDAPKGS_TEST_CACHE_HOME, else ~/.cache: cudapkgs/wheels), so only
the first run downloads; the store is a fresh temporary one every time. Without a
cuobjdump on the machine, cudaPackages_13_2's (from its wheel) checks the binary.

The cuda_cudart wheel has no lib/stubs: the stubs output gets a link-only libcuda.so
written from the wheel's cuda.h (cudapkgs.elf.link_stub) instead of staying empty.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.realise.realise import realise
from cudapkgs.elf.read import read_elf
from cudapkgs.store.store import Store

pytestmark = pytest.mark.wheels

COMPONENTS = ("cuda_nvcc", "cuda_cudart", "cuda_crt", "libnvvm", "cuda_cccl")


def _system_cuobjdump() -> str | None:
    return shutil.which("cuobjdump") or next(
        (p for p in ("/usr/local/cuda/bin/cuobjdump",) if os.access(p, os.X_OK)), None
    )


def test_saxpy_compiled_for_sm_90_by_the_stores_nvcc(tmp_path, manifests_dir, wheel_cache, require_pypi):
    require_pypi("nvidia-cuda-nvcc")
    store_dir = tmp_path / "store"
    config = {
        "storeDir": str(store_dir), "fetchers": ["wheels"], "allowUnfree": True,
        "cudaSupport": True, "cudaCapabilities": ["9.0"], "cudaForwardCompat": False,
    }
    with Store.open(store_dir) as store:
        pkgs = cudapkgs.import_pkgs(config=config)
        cuda = pkgs.cudaPackages_13_0
        realise(store, [cuda[name].derivation for name in COMPONENTS])
        assert (Path(cuda.cuda_cudart.stubs) / "lib" / "stubs" / "libcuda.so").is_file()
        assert not (Path(cuda.cuda_cudart.stubs) / "nix-support" / "missing-from-wheel").exists()
        for name in COMPONENTS:
            assert all(store.is_valid(cuda[name][o]) for o in cuda[name].outputs), name
        assert list(wheel_cache.glob("nvidia_cuda_nvcc-13.0.88-*.whl"))
        # nvcc's nvvm/ is libnvvm's files hard-linked (store optimisation), not copies; RUNPATHs set
        # in process by elf_edit, the binaries run (they compile saxpy below).
        cicc = Path(cuda.cuda_nvcc.out) / "nvvm" / "bin" / "cicc"
        assert os.stat(cicc).st_ino == os.stat(Path(cuda.libnvvm.out) / "bin" / "cicc").st_ino
        assert read_elf(cicc).runpath == ["$ORIGIN", "/run/opengl-driver/lib"]
        assert store.verify(paths=[cuda.cuda_nvcc.out, cuda.libnvvm.out]) == []
        saxpy = pkgs.saxpy.override(cudaPackages=cuda)
        assert saxpy.drvAttrs["gencode"] == ["-gencode=arch=compute_90,code=sm_90"]
        realise(store, [saxpy.derivation])
        closure = store.closure([saxpy.out])
        cuobjdump = _system_cuobjdump()
        if cuobjdump is None:  # no CUDA 13.0 wheel of it: the first one on PyPI is 13.2's
            # Without cuda_compat, as Nixpkgs users drop it (`cuda_compat = null`): CUDA 13.2's
            # manifest has it for x86_64, so every redist would take its run path, and NVIDIA
            # publishes no wheel of it.
            checker = pkgs.cudaPackages_13_2.override_scope(lambda final, prev: {"cuda_compat": None}).cuda_cuobjdump
            realise(store, [checker.derivation])
            cuobjdump = f"{checker.out}/bin/cuobjdump"

    exe = Path(saxpy.out, "bin", "saxpy")
    listing = subprocess.run([cuobjdump, "--list-elf", exe], capture_output=True, text=True, check=True).stdout
    assert "sm_90" in listing, listing
    ptx = subprocess.run([cuobjdump, "--list-ptx", exe], capture_output=True, text=True).stdout
    assert "sm_" not in ptx  # cudaForwardCompat=false: no PTX for newer GPUs

    cudart_lib = cuda.cuda_cudart.lib
    info = read_elf(exe)
    assert "libcudart.so.13" in info.needed
    assert info.runpath[0] == f"{cudart_lib}/lib" and "/run/opengl-driver/lib" in info.runpath
    assert closure == {saxpy.out, cudart_lib}  # nvcc's path is scrubbed from the fatbinary

    # No GPU here: the program must load (libcudart from the store, found by RUNPATH
    # with no LD_LIBRARY_PATH) and then report the missing driver (exit 2), or pass on a GPU.
    run = subprocess.run([exe, "4096"], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert "error while loading shared libraries" not in run.stderr
    assert run.returncode in (0, 2), run.stdout + run.stderr
    if run.returncode == 0:
        assert "PASS" in run.stdout

