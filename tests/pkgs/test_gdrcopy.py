"""cudaPackages.gdrcopy: Nixpkgs' expression (pkgs/development/cuda-modules/packages/gdrcopy.nix@0b73a0c2114322292ae614235b7c50da19226483).

The evaluation test needs nothing.  The build test (marked ``wheels``: the toolkit comes from
NVIDIA's PyPI wheels through pip) also needs the source mirror ($CUDAPKGS_SOURCES, default
../shared/sources beside the checkout) and skips with the reason without either; it keeps its
store in the test cache ($CUDAPKGS_TEST_CACHE_HOME, else ~/.cache: cudapkgs/test-stores/gdrcopy),
so a second run finds it built (23 s here from an empty store with pip's wheel cache warm; 2 s after).
No GPU or gdrdrv here: what it proves is that `make lib exes` links its test programs against
cuda_cudart's generated libcuda stub (wheel-sourced cudart has no driver stub of NVIDIA's), that they
need the driver's ``libcuda.so.1`` at run time and not the stub, and that nvcc is not in the closure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.elf import read as elf
from cudapkgs.hooks import is_stubs_entry

SOURCES = Path(os.environ.get("CUDAPKGS_SOURCES", Path(__file__).resolve().parents[3] / "shared" / "sources"))
PROGRAMS = ("gdrcopy_apiperf", "gdrcopy_copybw", "gdrcopy_copylat", "gdrcopy_pplat", "gdrcopy_sanity")


def _config(store_dir: Path, **extra) -> dict:
    return {"storeDir": str(store_dir), "fetchers": ["wheels"], "allowUnfree": True, "cudaSupport": True,
            "cudaCapabilities": ["9.0"], "cudaForwardCompat": False, **extra}


def test_gdrcopy_is_nixpkgs_make_build_with_nvcc_scrubbed(tmp_path, manifests_dir):
    cuda = cudapkgs.import_pkgs(config=_config(tmp_path / "store")).cudaPackages_13_0
    g = cuda.gdrcopy
    attrs = g.drvAttrs
    # gdrcopy.nix@0b73a0c2: CUDA = getLib cuda_cudart, NVCC = getExe cuda_nvcc, targets `lib exes` (not `all`).
    assert attrs["buildFlags"] == [f"CUDA={cuda.cuda_cudart.lib}", f"NVCC={cuda.cuda_nvcc.outPath}/bin/nvcc",
                                   "lib", "exes"]
    assert attrs["installFlags"] == ["DESTDIR=$(out)", "prefix=/"]
    assert g.outputs == ["out"] and attrs["doCheck"] is False
    # The tests' Makefile probes nvcc for its version and gencodes; Nixpkgs substitutes the set's values.
    assert "'CUDA_VERSION := 13.0'" in attrs["postPatch"]
    assert f"'NVCCFLAGS ?= {cuda.flags.gencodeString} $(NVCC_STD)'" in attrs["postPatch"]
    # Ours only: nvcc's path leaks into gdrcopy_pplat's fatbinary, scrubbed as nccl.nix@0145c6da scrubs libnccl.
    assert attrs["disallowedReferences"] == [cuda.cuda_nvcc.outPath]
    assert cuda.cuda_nvcc.outPath in attrs["removeReferencesTo"]
    # Another set's gdrcopy is another derivation (its cudart/nvcc/gencode).
    # (CUDA 12's nvcc needs NVIDIA's server or a mirror: its wheel has no nvcc.)
    other = cudapkgs.import_pkgs(config=_config(tmp_path / "store", fetchers=["redist", "wheels"])).cudaPackages_12_8
    assert other.gdrcopy.drvPath != g.drvPath


def _symbols(*args: str) -> set[str]:
    out = subprocess.run(["nm", "-D", *args], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()}


@pytest.mark.wheels
def test_gdrcopy_links_its_programs_against_the_stub_and_needs_only_the_driver(tmp_path, manifests_dir, wheel_cache,
        require_pypi, cached_store, host_has_libcuda):
    if not (SOURCES / "INDEX.md").is_file():
        pytest.skip(f"the source mirror {SOURCES} is absent (set CUDAPKGS_SOURCES to the absolute path of ../shared/sources)")
    if shutil.which("c++") is None or shutil.which("nm") is None:
        pytest.skip("needs a C++ compiler and nm")
    require_pypi("nvidia-cuda-nvcc")
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    store_dir = cached_store("gdrcopy")
    cuda = cudapkgs.import_pkgs(config=_config(store_dir, sourceMirrors=[str(SOURCES)])).cudaPackages_13_0
    g = cuda.gdrcopy
    with Store.open(store_dir) as store:
        realise(store, [g.derivation])
        closure = store.closure([g.out])
        realise(store, [cuda.cuda_cudart.derivation])
    out = Path(g.out)

    library = elf.read_elf(out / "lib" / "libgdrapi.so.2.5")
    assert library.soname == "libgdrapi.so.2" and (out / "lib" / "libgdrapi.so").resolve().name == "libgdrapi.so.2.5"
    assert (out / "include" / "gdrapi.h").is_file()
    stub = Path(cuda.cuda_cudart.stubs, "lib", "stubs", "libcuda.so")
    provided = _symbols("--defined-only", str(stub))
    for name in PROGRAMS:
        info = elf.read_elf(out / "bin" / name)
        assert {"libcuda.so.1", "libgdrapi.so.2"} <= set(info.needed), name
        # libgdrapi from its own output; libcuda left to the driver: no stubs directory in the run path.
        assert str(out / "lib") in info.runpath and not any(is_stubs_entry(e) for e in info.runpath), name
        used = {s for s in _symbols("--undefined-only", str(out / "bin" / name)) if s.startswith("cu")}
        assert "cuInit" in used and used <= provided, (name, used - provided)
    # nvcc (a build tool) and the stub are not in the run-time closure.
    assert g.out in closure
    assert not [p for p in closure if "-cuda_nvcc-" in p or p.endswith("-stubs")], closure

    program = str(out / "bin" / "gdrcopy_copybw")
    if not host_has_libcuda:
        run = subprocess.run(["env", "-i", program], capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and "libcuda.so.1: cannot open shared object file" in run.stderr
    # The stub standing in for a driver: the program loads, and its first driver call reports the stub.
    fake = tmp_path / "not-a-driver"
    fake.mkdir()
    shutil.copy(stub, fake / "libcuda.so.1")
    run = subprocess.run(["env", "-i", f"LD_LIBRARY_PATH={fake}", program], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "CUDA_ERROR_STUB_LIBRARY" in run.stdout + run.stderr
