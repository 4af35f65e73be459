"""python3Packages.pycuda: pycuda's PyPI sdist built against cudaPackages_13_0 (NVIDIA's wheels).

Evaluation tests need nothing.  The build test (marked ``wheels``: pip reaches PyPI) needs a
CPython 3.12 (`_python312`: $CUDAPKGS_TEST_PYTHON312, ``python3.12`` on PATH, pyenv's) and a C++ compiler; it keeps
its store in the test cache ($CUDAPKGS_TEST_CACHE_HOME, else ~/.cache: cudapkgs/test-stores/pycuda),
so a second run finds everything built (derivations that change are rebuilt).  No GPU here:
what it proves is the link-time story: the extension links ``-lcuda`` against the set's
generated stub, needs ``libcuda.so.1`` from the driver at run time, and nothing of CUDA is in
its run-time closure.  docs/pycuda.md has the run on an H200.
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
from cudapkgs.errors import EvalError
from cudapkgs.hooks import is_stubs_entry
from cudapkgs.pkgs.python_modules import pinned_wheel
from cudapkgs.realise.realise import realise
from cudapkgs.stdenv import mk_derivation
from cudapkgs.store.store import Store


def _python312() -> str | None:
    """A CPython 3.12: $CUDAPKGS_TEST_PYTHON312, python3.12 on PATH, /usr(/local)/bin, or pyenv's versions."""
    return _cpython(12)


def _cpython(minor: int) -> str | None:
    """A CPython 3.<minor>: $CUDAPKGS_TEST_PYTHON3<minor>, python3.<minor> on PATH, /usr(/local)/bin, pyenv's."""
    import glob

    name = f"python3.{minor}"
    candidates = [os.environ.get(f"CUDAPKGS_TEST_PYTHON3{minor}"), shutil.which(name), f"/usr/bin/{name}",
                  f"/usr/local/bin/{name}", *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}*/bin/{name}")))]
    for candidate in filter(None, candidates):
        try:  # a pyenv shim is a script: ask the interpreter for its own path
            done = subprocess.run([candidate, "-c", f"import sys; print(sys.executable, sys.version_info[:2] == (3, {minor}))"],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        path, _, ok = done.stdout.strip().rpartition(" ")
        if done.returncode == 0 and ok == "True":
            return path
    return None


def _config(store_dir: Path, **extra) -> dict:
    return {"storeDir": str(store_dir), "fetchers": ["wheels"], "allowUnfree": True, **extra}


def test_pycuda_is_evaluated_against_the_sets_headers_and_stub(tmp_path, manifests_dir):
    pkgs = cudapkgs.import_pkgs(config=_config(tmp_path / "store"))
    cuda = pkgs.cudaPackages_13_0
    pycuda = cuda.pkgs.python3Packages.pycuda
    attrs = pycuda.drvAttrs
    assert set(attrs["buildInputs"]) == {cuda.cuda_cudart.include, cuda.cuda_cudart.stubs,
                                         cuda.cuda_profiler_api.include}
    assert attrs["cudaStubs"] == cuda.cuda_cudart.stubs and "--no-cuda-enable-curand" in attrs["preBuild"]
    # Nixpkgs' fetchPypi names the sdist <pname>-<version>.tar.gz, hash flat.
    assert pycuda.src.name == "pycuda-2026.1.tar.gz"
    assert pycuda.src.outputHash == "sha256-dZUWFgYougbzLOflY+P1uSFGkdyVKKA+qZ6hBz9OFLo="
    # Another set's pycuda is another derivation.
    assert pkgs.cudaPackages_12_8.pkgs.python3Packages.pycuda.drvPath != pycuda.drvPath
    # Binary wheels exist per CPython version: a version with no pin is an evaluation error naming the pins.
    with pytest.raises(EvalError, match=r"numpy 2.2.6 or 2.4.6 or 2.5.5: no pinned wheel for CPython 3.9 .pinned for "
                       r"CPython 3.10, 3.11, 3.12, 3.13 on x86_64-linux: use python310Packages, python311Packages, python312Packages or python313Packages"):
        pinned_wheel("numpy", "3.9", "x86_64-linux")
    assert pinned_wheel("mako", "3.13", "x86_64-linux").platform == "any"


def test_pycudas_name_and_meta_evaluate_without_allow_unfree(tmp_path, manifests_dir):
    # pycuda is MIT: its name and meta need nothing unfree; only its derivation (cudart's outputs) does.
    from cudapkgs.errors import UnfreeLicenseError

    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")})
    pycuda = pkgs.python3Packages.pycuda
    assert pycuda.name == "pycuda-2026.1" and pycuda.meta["license"] == "MIT"
    assert "CUDA 12.9" in pycuda.meta["description"]
    with pytest.raises(UnfreeLicenseError, match="cuda_cudart"):
        pycuda.drvPath


def test_numpy_for_cpython_311_links_the_zlib_its_bundled_libgfortran_needs(tmp_path, manifests_dir):
    # numpy 2.4.6's cp311 wheel bundles libgfortran, NEEDED libz.so.1: without zlib among its inputs the
    # build fails in auto_patchelf ("1 unresolved DT_NEEDED ... libz.so.1"); cp312's numpy needs none.
    python311 = _cpython(11)
    if python311 is None:
        pytest.skip("no CPython 3.11 here (set CUDAPKGS_TEST_PYTHON311)")
    pkgs = cudapkgs.import_pkgs(config=_config(tmp_path / "store", python3Executable=python311))
    numpy = pkgs.python3Packages.numpy
    assert numpy.version == "2.4.6" and numpy.drvAttrs["buildInputs"] == [pkgs.zlib.dev]  # dev propagates out
    assert pkgs.python3Packages.mako.drvAttrs["buildInputs"] == []
    python312 = _python312()
    if python312 is not None:
        numpy312 = cudapkgs.import_pkgs(config=_config(tmp_path / "store", python3Executable=python312)).python3Packages.numpy
        assert numpy312.version == "2.5.5" and not numpy312.drvAttrs.get("buildInputs")


@pytest.mark.wheels
def test_pycuda_from_its_sdist_links_the_stub_and_needs_only_the_driver(tmp_path, manifests_dir, wheel_cache,
        require_pypi, cached_store, host_has_libcuda):
    python = _python312()
    if python is None:
        pytest.skip("no CPython 3.12 (python3.12 on PATH or $CUDAPKGS_TEST_PYTHON312)")
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    require_pypi("pycuda")
    store_dir = cached_store("pycuda")
    pkgs = cudapkgs.import_pkgs(config=_config(store_dir, python3Executable=python))
    cuda = pkgs.cudaPackages_13_0
    ps = cuda.pkgs.python3Packages
    env = ps.withPackages(lambda ps: [ps.pycuda])
    with Store.open(store_dir) as store:
        realise(store, [env.derivation])
        closure = store.closure([env.out])
        realise(store, [cuda.cuda_cudart.derivation])
    # The run-time closure: Python packages only; nothing of CUDA (no cudart, no headers, no stub).
    assert ps.pycuda.out in closure and ps.numpy.out in closure
    assert not [p for p in closure if "-cuda13.0-" in p]

    site = Path(ps.pycuda.out, "lib", "python3.12", "site-packages", "pycuda")
    (driver_so,) = site.glob("_driver.cpython-312-*.so")
    info = elf.read_elf(driver_so)
    assert "libcuda.so.1" in info.needed
    assert info.runpath == ["/run/opengl-driver/lib"] and not any(is_stubs_entry(e) for e in info.runpath)
    # The stub defines every driver function the extension references: link-only, but complete.
    stub = Path(cuda.cuda_cudart.stubs, "lib", "stubs", "libcuda.so")
    assert elf.read_elf(stub).soname == "libcuda.so.1"

    def nm(*args: str) -> set[str]:
        out = subprocess.run(["nm", "-D", *args], capture_output=True, text=True, check=True).stdout
        return {line.split()[-1] for line in out.splitlines() if line.split()}

    used = {s for s in nm("--undefined-only", str(driver_so)) if s.startswith("cu")}
    assert "cuInit" in used and "cuMemAlloc_v2" in used
    assert used <= nm("--defined-only", str(stub))

    python_env = f"{env.out}/bin/python3"
    check = subprocess.run(["env", "-i", python_env, "-c", "import numpy, pytools, mako, pycuda; print(numpy.__file__)"],
                           capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.startswith(ps.numpy.out), check.stderr
    importing = subprocess.run(["env", "-i", python_env, "-c", "import pycuda.driver"], capture_output=True, text=True)
    if not host_has_libcuda:
        # No driver here, and the stub is not in any run path: the import fails on libcuda.so.1 itself.
        assert importing.returncode != 0 and "libcuda.so.1: cannot open shared object file" in importing.stderr
    # The stub standing in for a driver (a copy named libcuda.so.1): every call says it is a stub.
    fake = tmp_path / "not-a-driver"
    fake.mkdir()
    shutil.copy(stub, fake / "libcuda.so.1")
    stubbed = subprocess.run(
        ["env", "-i", f"LD_LIBRARY_PATH={fake}", python_env, "-c",
         "import pycuda.driver as d\ntry:\n    d.init()\nexcept d.Error as e:\n    print('init failed:', e)\n"],
        capture_output=True, text=True)
    assert stubbed.returncode == 0 and stubbed.stdout.startswith("init failed: cuInit failed"), stubbed.stderr

    # Any package of the set's users: cuda_cudart in buildInputs (its dev output propagates the stubs
    # output) and a plain `cc -lcuda` through the cc wrapper: linked against the stub, run path clean.
    (tmp_path / "t.c").write_text("int cuInit(unsigned);\nint main(void) { return cuInit(0) == 0 ? 0 : 2; }\n")
    user = mk_derivation(pkgs, {
        "pname": "driver-user", "version": "1", "src": tmp_path / "t.c",
        "buildInputs": [cuda.cuda_cudart],
        "buildPhase": 'cc -o t "$(ls *.c)" -lcuda', "installPhase": 'install -Dm755 t "$out/bin/t"',
    })
    with Store.open(store_dir) as store:
        realise(store, [user.derivation])
    linked = elf.read_elf(Path(user.out, "bin", "t"))
    assert "libcuda.so.1" in linked.needed and not any(is_stubs_entry(e) for e in linked.runpath)

    # The command, through the CLI: the same output path, nothing left to build.
    cli = subprocess.run(
        [sys.executable, "-m", "cudapkgs", "build", "cudaPackages_13_0.pkgs.python3Packages.pycuda", "--no-link",
         "--set", f"storeDir={store_dir}", "--set", 'fetchers=["wheels"]', "--set", "allowUnfree=true",
         "--set", f"python3Executable={python}"], capture_output=True, text=True, cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.split() == [ps.pycuda.out]
