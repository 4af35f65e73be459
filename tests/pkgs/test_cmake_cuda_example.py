"""Real CUDA 13.0 binaries (NVIDIA's PyPI wheels): the CMake example and the shell's nvcc -lcublas story.

Downloads through pip (deselect with -m "not wheels"); wheels are kept in the user's cache
($CUDAPKGS_TEST_CACHE_HOME, else ~/.cache), the store is fresh.  No GPU here: each program
must resolve every library from the store (ldd) and exit 2, "no CUDA device"; on a GPU, 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.elf import read as elf
from cudapkgs.hooks import is_stubs_entry
from cudapkgs.realise.realise import realise
from cudapkgs.shell import shell_environment
from cudapkgs.store.store import Store

pytestmark = pytest.mark.wheels


def _ldd(path: str) -> dict[str, str]:
    out = subprocess.run(["ldd", path], capture_output=True, text=True, env={}).stdout
    return {line.split()[0]: line.split("=>")[1].split("(")[0].strip() for line in out.splitlines() if "=>" in line}


def test_cmake_example_and_shell_link_cublas_from_the_store(tmp_path, manifests_dir, wheel_cache, require_pypi):
    require_pypi("nvidia-cublas")
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={
        "storeDir": str(store_dir), "fetchers": ["wheels"], "allowUnfree": True,
        "cudaSupport": True, "cudaCapabilities": ["9.0"], "cudaForwardCompat": False,
    })
    cuda = pkgs.cudaPackages_13_0
    example = pkgs["cmake-cuda-example"].override(cudaPackages=cuda)
    assert example.drvAttrs["cmakeCudaArchitectures"] == "90"
    with Store.open(store_dir) as store:
        realise(store, [example.derivation])
        closure = store.closure([example.out])
        # libcublas propagates cuda_cudart (libcublas.nix): its dev output lists cudart.
        assert cuda.cuda_cudart.out in Path(cuda.libcublas.dev, "nix-support", "propagated-build-inputs").read_text().split()
    # Run time: the programs, cudart's and cuBLAS's lib outputs, and NVRTC's (cublasLt dlopens it); no nvcc.
    assert closure == {example.out, cuda.cuda_cudart.lib, cuda.libcublas.lib, cuda.cuda_nvrtc.lib}
    for program, libs in (("saxpy-cudart", {"libcudart.so.13": cuda.cuda_cudart.lib}),
                          ("cublas-check", {"libcublas.so.13": cuda.libcublas.lib, "libcudart.so.13": cuda.cuda_cudart.lib})):
        exe = f"{example.out}/bin/{program}"
        assert not any(is_stubs_entry(e) for e in elf.read_elf(exe).runpath)
        resolved = _ldd(exe)
        assert "not found" not in resolved.values()
        for lib, owner in libs.items():
            assert resolved[lib].startswith(owner + "/"), (program, lib, resolved[lib])
        run = subprocess.run(["env", "-i", exe], capture_output=True, text=True)
        assert run.returncode in (0, 2), run.stdout + run.stderr
        assert ("PASS" in run.stdout) if run.returncode == 0 else ("no CUDA device" in run.stdout)

    # The shell story: nvcc t.cu -lcublas inside the shell; the program runs outside it too.
    with Store.open(store_dir) as store:
        cc = example.stdenvCc
        realise(store, [cc.derivation])
    paths = [cc.out] + [p for name in ("cuda_nvcc", "cuda_cudart", "libcublas") for p in
                        (cuda[name][o] for o in cuda[name].outputs)]
    env = shell_environment(paths, base={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, store_dir=str(store_dir))
    assert env["NVCC_CCBIN"] == f"{cc.out}/bin/g++" and env["CUDAHOSTCXX"] == env["NVCC_CCBIN"]
    (tmp_path / "t.cu").write_text(
        "#include <cstdio>\n#include <cublas_v2.h>\n"
        "int main(){cublasHandle_t h; int s = cublasCreate(&h); std::printf(\"cublasCreate=%d\\n\", s);"
        " return s == 0 ? 0 : 2;}\n"
    )
    subprocess.run(["nvcc", "t.cu", "-lcublas", "-o", "t"], cwd=tmp_path, env=env, check=True)
    assert elf.read_elf(tmp_path / "t").runpath == [f"{cuda.libcublas.lib}/lib"]
    outside = subprocess.run(["env", "-i", tmp_path / "t"], capture_output=True, text=True)
    assert outside.returncode in (0, 2) and outside.stdout.startswith("cublasCreate=")


def test_plain_cmake_in_a_shell_finds_the_toolkit_and_links_from_the_store(tmp_path, manifests_dir, wheel_cache,
                                                                            require_pypi):
    """The issue's story: `cudapkgs shell … cuda_nvcc cuda_cudart libcublas`, then the machine's own
    `cmake -S . -B b && cmake --build b` of the example (find_package(CUDAToolkit), project(… CUDA),
    CUDA::cublas, CUDA::cudart) with nothing passed to CMake.  Before: FindCUDAToolkit failed
    (missing: CUDAToolkit_INCLUDE_DIR), and with that given the program had no RUNPATH (CMake links
    through @linkLibs.rsp) and stopped at `libcublas.so.13: cannot open shared object file`."""
    require_pypi("nvidia-cublas")
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake on PATH")
    store_dir = tmp_path / "store"
    source = Path(cudapkgs.__file__).parent / "pkgs" / "cmake_cuda_example" / "src"
    env = {**os.environ, "CUDAPKGS_STORE": str(store_dir), "CUDAPKGS_MANIFESTS": str(manifests_dir)}
    build = tmp_path / "b"
    # The same with C++ alone (no CUDA language: FindCUDAToolkit asks nvcc -v for its TOP itself).
    cxx = tmp_path / "cxx"
    cxx.mkdir()
    (cxx / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(t LANGUAGES CXX)\nfind_package(CUDAToolkit REQUIRED)\n"
        f"add_executable(t {source}/cublas_check.cpp)\ntarget_link_libraries(t PRIVATE CUDA::cublas CUDA::cudart)\n")
    script = (f"cmake -S {source} -B {build} && cmake --build {build} && cmake -S {cxx} -B {cxx}/b && "
              f"cmake --build {cxx}/b && command -v nvcc && echo \"$CUDAToolkit_ROOT\"")
    run = subprocess.run(
        [sys.executable, "-m", "cudapkgs", "shell", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]',
         *(f"cudaPackages_13_0.{name}" for name in ("cuda_nvcc", "cuda_cudart", "libcublas")),
         "--command", "sh", "-c", script],
        capture_output=True, text=True, env=env, timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    nvcc, root = run.stdout.splitlines()[-2:]
    assert nvcc == f"{root}/bin/nvcc" and root.endswith("-cuda-toolkit-root")
    cache = (build / "CMakeCache.txt").read_text()
    assert f"CMAKE_CUDA_COMPILER:FILEPATH={root}/bin/nvcc" in cache
    for exe in (build / "saxpy-cudart", build / "cublas-check", cxx / "b" / "t"):
        runpath = elf.read_elf(exe).runpath
        assert runpath and not any(is_stubs_entry(e) for e in runpath)
        assert not any(e.startswith(root) for e in runpath)  # each library's own output, not the joined tree
        assert "not found" not in _ldd(str(exe)).values()
        outside = subprocess.run(["env", "-i", exe], capture_output=True, text=True)
        # No loader error: the program reaches CUDA's initialisation (no GPU here: "no CUDA device").
        assert outside.returncode in (0, 2), outside.stdout + outside.stderr
        assert ("PASS" in outside.stdout) if outside.returncode == 0 else ("no CUDA device" in outside.stdout)


def test_develop_runs_the_examples_phases_as_the_builder(tmp_path, manifests_dir, wheel_cache, require_pypi):
    """`cudapkgs develop cmake-cuda-example` then genericBuild by hand: setupCudaHook's flags and the
    set's architectures reach cmake as in the builder, and the programs are the builder's (same
    run paths, nvcc scrubbed, the same start on a machine without a GPU)."""
    require_pypi("nvidia-cublas")
    store_dir = tmp_path / "store"
    env = {**os.environ, "CUDAPKGS_STORE": str(store_dir), "CUDAPKGS_MANIFESTS": str(manifests_dir)}
    options = ["--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]', "--set", "cudaSupport=true",
               "--set", 'cudaCapabilities=["9.0"]', "--set", "cudaForwardCompat=false",
               "-f", str(Path(__file__).resolve().parents[2] / "examples" / "cmake_examples.py"),
               "--arg", "cudaPackages=cudaPackages_13_0"]

    def cudapkgs(*argv: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cudapkgs", *argv], capture_output=True, text=True, env=env,
                              cwd=cwd, timeout=1800)

    built = cudapkgs("build", *options, "cmake_cuda_example", "-o", str(tmp_path / "result"))
    assert built.returncode == 0, built.stderr[-3000:]
    work = tmp_path / "work"
    work.mkdir()
    manual = cudapkgs("develop", *options, "cmake_cuda_example", "--command", "eval",
                      'echo "arch=$cmakeCudaArchitectures root=$CUDAToolkit_ROOT"; genericBuild', cwd=work)
    assert manual.returncode == 0, manual.stdout[-3000:] + manual.stderr[-3000:]
    assert "arch=90 root=" in manual.stdout and "-DCMAKE_CUDA_ARCHITECTURES=90" in manual.stderr + manual.stdout
    for program in ("saxpy-cudart", "cublas-check"):
        theirs, mine = tmp_path / "result" / "bin" / program, work / "outputs" / "out" / "bin" / program
        assert elf.read_elf(mine).runpath == elf.read_elf(theirs).runpath
        runs = [subprocess.run(["env", "-i", exe], capture_output=True, text=True) for exe in (theirs, mine)]
        assert runs[0].returncode == runs[1].returncode in (0, 2) and runs[0].stdout == runs[1].stdout


def test_nvcc_left_in_the_outputs_fails_naming_it(tmp_path, manifests_dir, wheel_cache, require_pypi):
    require_pypi("nvidia-cublas")
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={
        "storeDir": str(store_dir), "fetchers": ["wheels"], "allowUnfree": True,
        "cudaSupport": True, "cudaCapabilities": ["9.0"], "cudaForwardCompat": False,
    })
    cuda = pkgs.cudaPackages_13_0
    (tmp_path / "k.cu").write_text("__global__ void k(float *x){x[0]=1;}\nint main(){return 0;}\n")
    leaky = pkgs.saxpy.override(cudaPackages=cuda).override_attrs({
        "pname": "nvcc-leak", "src": tmp_path / "k.cu", "env": {"src_file": "k.cu"},
        "buildPhase": 'nvcc -O2 -o saxpy "$src_file"; echo "built by $(command -v nvcc)" > note',
        "installPhase": 'install -Dm755 saxpy "$out/bin/saxpy"; install -Dm644 note "$out/share/note"',
        "removeReferencesTo": [], "disallowedReferences": [],
    })
    with Store.open(store_dir) as store:
        with pytest.raises(Exception, match=r"refers to nvcc .*removeReferencesTo"):
            realise(store, [leaky.derivation])
