"""Store paths under two host compilers (issues 31 and 34): what compiles nothing names no compiler.

A teammate whose distribution ships another gcc must evaluate the same store paths for torch, its
Python packages, the set's cuDNN and the other library components, or the team's cache has nothing
for them. Each test evaluates the same expressions twice in this process, once with a fake GCC
12.2.0 and once with a fake GCC 13.3.0 as the host compiler (``CC``/``CXX`` and first on PATH:
scripts answering ``-dM -E`` as GCC does, as tests/evalcache/test_eval_cache.py's), and compares.
Nothing is built or downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs import top_level
from cudapkgs.host import compiler as host_compiler

CONFIG = {"allowUnfree": True}


def _fake_gcc(directory: Path, version: str) -> Path:
    """gcc, g++, cc and c++ scripts answering ``-dM -E`` with GCC `version`."""
    directory.mkdir(parents=True, exist_ok=True)
    body = f"#!/bin/sh\necho '#define __GNUC__ {version.split('.')[0]}'\necho '#define __VERSION__ \"{version}\"'\n"
    for name in ("gcc", "g++", "cc", "c++"):
        (directory / name).write_text(body)
        (directory / name).chmod(0o755)
    return directory


@pytest.fixture
def under(tmp_path, monkeypatch, manifests_dir):
    """``under(version, fn)``: `fn()` evaluated afresh with a fake GCC `version` as the host compiler."""
    path = os.environ.get("PATH", os.defpath)

    def run(version: str, fn):
        bin_dir = _fake_gcc(tmp_path / f"gcc-{version}", version)
        monkeypatch.setenv("CC", str(bin_dir / "gcc"))
        monkeypatch.setenv("CXX", str(bin_dir / "g++"))
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{path}")
        top_level.clear_cache()
        host_compiler._find.cache_clear()
        try:
            return fn()
        finally:
            top_level.clear_cache()
            host_compiler._find.cache_clear()

    return run


def _closure(*packages) -> dict[str, dict[str, str]]:
    """Every derivation of the packages' closures: drv name (with the drv path where two share one) -> outputs."""
    found: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    for package in packages:
        for drv in package.derivation.closure():
            if drv.drv_path in seen:
                continue
            seen.add(drv.drv_path)
            key = drv.name if drv.name not in found else f"{drv.name} ({drv.drv_path})"
            found[key] = dict(drv.outputs) | ({"fixed": "yes"} if drv.is_fixed_output else {})
    return found


def _ml_env():
    pkgs = cudapkgs.import_pkgs(CONFIG)
    ps = pkgs.pkgsCuda.python3Packages
    cuda = pkgs.pkgsCuda.cudaPackages
    wanted = {
        "torch": ps.torch, "torchvision": ps.torchvision, "torchaudio": ps.torchaudio, "numpy": ps.numpy,
        "triton": ps.triton, "cudnn": cuda.cudnn, "cuda_cudart": cuda.cuda_cudart, "libcublas": cuda.libcublas,
        "nccl": cuda.nccl, "jax-cuda12-plugin": ps["jax-cuda12-plugin"], "cupy": ps.cupy,
        "env": ps.withPackages(lambda p: [p.torch, p.torchvision, p.torchaudio, p.numpy]),
    }
    compiling = {"cuda_nvcc": cuda.cuda_nvcc, "saxpy": cuda.saxpy, "stdenv.cc": pkgs.stdenv.cc}
    return ({name: p.outPath for name, p in wanted.items()}, {name: p.outPath for name, p in compiling.items()},
            _closure(*wanted.values()), _closure(*compiling.values()))


def test_the_ml_environment_has_the_same_paths_under_another_host_compiler(under):
    paths12, compiling12, closure12, built12 = under("12.2.0", _ml_env)
    paths13, compiling13, closure13, built13 = under("13.3.0", _ml_env)
    # What compiles records the host compiler: another gcc, other paths.
    assert all(compiling12[name] != compiling13[name] for name in compiling12), (compiling12, compiling13)
    assert "gcc-wrapper-12.2.0" in built12 and "gcc-wrapper-13.3.0" in built13
    # What compiles nothing does not: torch, its Python packages and the set's libraries alike.
    assert paths12 == paths13
    # ... down to every derivation of their closures: the wheels' fixed-output fetches, the
    # rewired wheels, buildRedist's components, cuda_nvcc's tools for triton's ptxas, zlib.
    assert closure12 == closure13
    assert not any(name.startswith("gcc-wrapper") for name in closure12)
    assert any(value.get("fixed") for value in closure12.values())
    assert {"zlib-1.3.1"} <= set(closure12) and any("cuda_nvcc-tools" in name for name in closure12)
    assert not any(name.endswith("-cuda_nvcc-12.9.86") for name in closure12)
    # Fixed-output fetches are named by their hashes alone: the same in the compiling closures too.
    fixed = [name for name, value in closure12.items() if value.get("fixed")]
    assert "source" in fixed and any(name.endswith(".whl") for name in fixed)


def _cuda13_ml():
    pkgs = cudapkgs.import_pkgs(CONFIG)
    s13 = pkgs.cudaPackages_13_0.pkgs.pkgsCuda
    ps = s13.python3Packages
    wanted = [ps.torch, ps.torchvision, ps.jax, ps["jax-cuda13-plugin"], ps.cupy, ps.onnxruntime]
    return {p.name: p.outPath for p in wanted}, _closure(*wanted), s13.cudaPackages.cuda_nvcc.outPath


def test_jax_cupy_and_onnxruntime_of_cuda_13_too(under):
    paths12, closure12, nvcc12 = under("12.2.0", _cuda13_ml)
    paths13, closure13, nvcc13 = under("13.3.0", _cuda13_ml)
    assert nvcc12 != nvcc13  # the set's nvcc records the compiler
    assert paths12 == paths13 and closure12 == closure13  # XLA's ptxas and nvlink come from nvcc's tools
    assert any("cuda13.0-cuda_nvcc-tools" in name for name in closure12)


def _a_wheel_package():
    pkgs = cudapkgs.import_pkgs(CONFIG)
    ps = pkgs.python3Packages
    own = ps.buildPythonPackage({"pname": "idna-again", "version": ps.idna.version, "format": "wheel",
                                 "src": ps.idna.src})
    compiled = ps.buildPythonPackage({"pname": "a-source-build", "version": "1", "format": "pyproject",
                                      "src": ps.idna.src})
    return own.outPath, compiled.outPath


def test_a_buildpythonpackage_of_a_wheel_has_no_host_compiler(under):
    wheel12, source12 = under("12.2.0", _a_wheel_package)
    wheel13, source13 = under("13.3.0", _a_wheel_package)
    assert wheel12 == wheel13  # format "wheel": installed, never compiled (stdenvNoCC)
    assert source12 != source13  # a PEP 517 build may compile: stdenv.cc stays


def _shell_paths():
    from cudapkgs.cli import build_parser
    from cudapkgs.cli.installables import evaluate
    from cudapkgs.cli.shell import shell_items

    args = build_parser("shell").parse_args(["shell", "--set", "allowUnfree=true", "pkgsCuda.python3Packages.torch"])
    _, items = evaluate(args)
    items, cc, develop = shell_items(args, items)
    assert cc is not None and develop  # the shell puts its compiler first on PATH; torch brings its inputs
    closure = {}
    for item in items:
        if item.drv is not cc:
            closure.update((d.drv_path, (d.name, tuple(sorted(d.outputs.values())))) for d in item.drv.closure())
    return sorted(closure.values()), cc.outputs["out"]


def test_a_shell_with_torch_evaluates_the_same_packages_under_another_host_compiler(under):
    packages12, cc12 = under("12.2.0", _shell_paths)
    packages13, cc13 = under("13.3.0", _shell_paths)
    assert cc12 != cc13  # the shell's own compiler is the host's (built here, no download)
    assert packages12 == packages13
    names = {name for name, _ in packages12}
    assert {"torch-2.9.1", "numpy-2.4.6", "triton-3.5.1"} <= names and any("cudnn" in n for n in names)


def test_a_teammate_with_another_gcc_substitutes_zlib_instead_of_building_it(tmp_path, under, monkeypatch):
    """zlib, built by the host's cc on one machine and uploaded to a signed file:// cache, is substituted
    on a machine whose host compiler is another GCC: the one source build of the ML closure
    (cuDNN, numpy, pillow and triton link it) no longer forks the closure per compiler."""
    import subprocess
    import sys

    from cudapkgs.realise.realise import realise
    from cudapkgs.store.caches import open_cache
    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    store_dir = tmp_path / "store"
    config = {"storeDir": str(store_dir)}
    monkeypatch.setenv("CUDAPKGS_SOURCES", str(tmp_path / "no-mirror"))  # the copy cudapkgs ships, nothing else

    def built_here():
        zlib = cudapkgs.import_pkgs(config).zlib
        with Store.open(store_dir) as store:
            realise(store, [zlib.derivation])
            key = generate("team-cache-1")
            open_cache(f"file://{tmp_path}/cache").upload_closure(store, [zlib.out, zlib.dev, zlib.static],
                                                                   secret_key=key)
        return zlib.derivation.outputs, key

    outputs, key = under("13.3.0", built_here)
    for dirpath, _, _ in os.walk(store_dir):
        os.chmod(dirpath, 0o755)
    store_dir.rename(tmp_path / "first-machine")

    def teammate():
        zlib = cudapkgs.import_pkgs(config).zlib
        settings = ["--set", f"storeDir={store_dir}", "--set", f'substituters=["file://{tmp_path}/cache"]',
                    "--set", f'trustedPublicKeys=["{key.public}"]']
        done = subprocess.run([sys.executable, "-m", "cudapkgs", "build", "--no-link", *settings, "zlib"],
                              capture_output=True, text=True, timeout=300, env=dict(os.environ))
        return zlib.derivation.outputs, done

    again, done = under("12.2.0", teammate)
    assert again == outputs  # evaluated to the same paths with another gcc
    assert done.returncode == 0, done.stderr
    assert "3 of 3 paths done" in done.stderr and "building" not in done.stderr.lower(), done.stderr
    assert (Path(outputs["out"]) / "lib" / "libz.so.1").exists()


def test_zlibs_compiler_is_never_one_planted_on_the_users_path(tmp_path, monkeypatch):
    """Attack (held): zlib's store path names no compiler, so a compiler it was built with that the user did
    not mean (a cloned repository's ``cc`` on a PATH holding ``.``, a project's ``bin/``, ``$CC``) would give
    the honest path dishonest bytes, uploaded to the team's cache under the user's key. Its build's PATH is
    its inputs' and the host's fixed directories only (realise/generic.py ``HOST_PATH``), never the user's."""
    import subprocess

    from cudapkgs.realise.generic import HOST_PATH, build_environment

    planted = tmp_path / "repo"
    planted.mkdir()
    for name in ("cc", "gcc", "clang"):
        (planted / name).write_text(f"#!/bin/sh\necho ran > {tmp_path}/RAN\n")
        (planted / name).chmod(0o755)
    monkeypatch.chdir(planted)
    monkeypatch.setenv("PATH", f"{planted}:.::{os.environ.get('PATH', '')}")
    monkeypatch.setenv("CC", str(planted / "cc"))
    top_level.clear_cache()
    zlib = cudapkgs.import_pkgs({"storeDir": str(tmp_path / "store")}).zlib
    drv = zlib.derivation
    env = build_environment(drv, tmp_path / "work", {o: tmp_path / o for o in drv.outputs})
    entries = env["PATH"].split(os.pathsep)
    assert all(e.startswith(f"{tmp_path}/store/") or e in HOST_PATH for e in entries), entries
    assert "CC" not in env
    found = subprocess.run(["/bin/sh", "-c", "command -v cc || command -v gcc || command -v clang"],
                           env=env, cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert found and not found.startswith(str(planted)) and not (tmp_path / "RAN").exists()
