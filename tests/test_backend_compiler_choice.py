"""backendCC as cuda-modules/backend.nix@1dbbce67 chooses it (issue 35, item 5): the default compiler
when the set's nvcc accepts it; else the newest accepted major of the same family (for Clang:
`llvmPackages_N.clang`), keeping the default's C++ runtime (`passthru.useLibsFrom`); else an
evaluation error naming the versions nvcc accepts. Fake compilers answer the `-dM -E` probe."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.host.compiler import HostCompilerError, explain_choice, find_compilers


def _fake_clang(directory: Path, major: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    body = (f"#!/bin/sh\necho '#define __clang__ 1'\necho '#define __clang_major__ {major}'\n"
            f"echo '#define __clang_version__ \"{major}.1.0 \"'\necho '#define __GNUC__ 4'\n")
    for name in (f"clang-{major}", f"clang++-{major}"):
        (directory / name).write_text(body)
        (directory / name).chmod(0o755)
    return directory / f"clang-{major}"


def _use(monkeypatch, directory: Path, default: Path) -> None:
    monkeypatch.setenv("PATH", str(directory))
    monkeypatch.setenv("CC", str(default))
    monkeypatch.delenv("CXX", raising=False)


def _cuda(tmp_path, name="cudaPackages_13_0"):
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path / "store"),
                                        "cudaCapabilities": ["9.0"]}, system="x86_64-linux")
    return pkgs, pkgs[name]


def test_an_accepted_default_clang_is_backend_cc(manifests_dir, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    default = _fake_clang(bin_dir, 19)
    _use(monkeypatch, bin_dir, default)
    pkgs, cuda = _cuda(tmp_path)
    cc = cuda.backendCC
    assert cc.hostCompiler["kind"] == "clang" and cc.hostCompiler["major"] == 19
    assert "useLibsFrom" not in (cc.passthru or {})
    assert cc.drvPath == pkgs.llvmPackages_19.clang.drvPath == pkgs.llvmPackages_19.stdenv.cc.drvPath


def test_a_too_new_default_clang_falls_back_keeping_its_runtime(manifests_dir, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    default = _fake_clang(bin_dir, 21)
    _fake_clang(bin_dir, 20)
    _fake_clang(bin_dir, 18)
    _use(monkeypatch, bin_dir, default)
    pkgs, cuda = _cuda(tmp_path)  # nvcc 13.0 accepts clang 7 to 20 (nvcc.toml)
    cc = cuda.backendCC
    assert cc.hostCompiler["major"] == 20  # the newest accepted, not 18
    assert cc.passthru["useLibsFrom"]["major"] == 21
    # llvmPackages_20's clang, wrapped with clang 21's C++ runtime (useLibsFrom): another derivation
    assert cc.hostCompiler == pkgs.llvmPackages_20.clang.hostCompiler
    assert cc.drvPath != pkgs.llvmPackages_20.clang.drvPath and cc.useLibsFrom["major"] == 21
    compilers, found_default = find_compilers()
    why = explain_choice("13.0", compilers, found_default)["why"]
    assert "clang 21, is outside what nvcc 13.0 accepts (clang 7 to 20)" in why and "useLibsFrom" in why


def test_an_unsupported_clang_alone_is_an_evaluation_error_naming_the_versions(manifests_dir, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _use(monkeypatch, bin_dir, _fake_clang(bin_dir, 21))
    pkgs, cuda = _cuda(tmp_path)
    with pytest.raises(HostCompilerError, match=r"cudaPackages_13_0\.backendCC: .*clang 7 to 20.*clang 21"):
        cuda.backendCC
    meta = cuda.tests["backend-stdenv"].meta  # the tests needing it say why instead of failing to list
    assert meta["available"] is False and "clang 7 to 20" in meta["problems"]["broken"]["message"]
    with pytest.raises(cudapkgs.CudapkgsError, match="no Clang 20 on PATH"):
        pkgs.llvmPackages_20.clang


def test_doctor_explains_each_releases_choice(manifests_dir, tmp_path, monkeypatch):
    from cudapkgs.doctor import _compilers, Report
    from cudapkgs.package_sets import package_set_definitions

    bin_dir = tmp_path / "bin"
    default = _fake_clang(bin_dir, 21)
    _fake_clang(bin_dir, 20)
    _use(monkeypatch, bin_dir, default)
    report = Report()
    _compilers(report, package_set_definitions(), {"PATH": str(bin_dir), "CC": str(default)})
    by_release = {c["cuda"]: c for c in report.backend_compilers}
    assert by_release["13.0"]["chosen"]["major"] == 20 and by_release["13.0"]["useLibsFrom"]["major"] == 21
    # nvcc 12.6 accepts clang 7 to 18 (nvcc.toml): neither Clang here
    assert by_release["12.6"]["chosen"] is None and "clang 7 to 18" in by_release["12.6"]["why"]


# --- useLibsFrom: the default compiler's C++ runtime on backendCC's links ------------------------

GXX = shutil.which("g++", path="/usr/bin:/bin")
HELLO = r"""
#include <fstream>
#include <iostream>
#include <string>
int main() {  // the libstdc++ this process mapped
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
        if (line.find("libstdc++") != std::string::npos) { std::cout << line.substr(line.find('/')) << "\n"; break; }
    return 0;
}
"""


def _newer_gcc(root: Path, real_gcc: str, major: int) -> tuple[Path, Path]:
    """A GCC `major` installation under `root` standing in for a newer default compiler: gcc-N/g++-N
    run the host's GCC but report __GNUC__ N, and its own libstdc++ (a copy of the host's) lives in
    lib/, named by ``-print-file-name=libstdc++.so`` through lib/gcc/x86_64-linux-gnu/N as GCC lays it out."""
    bin_dir, lib = root / "bin", root / "lib"
    versioned = lib / "gcc" / "x86_64-linux-gnu" / str(major)
    for d in (bin_dir, versioned):
        d.mkdir(parents=True)
    host_runtime = subprocess.run([real_gcc, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True,
                                  check=True).stdout.strip()
    shutil.copy(os.path.realpath(host_runtime), lib / "libstdc++.so.6")
    (versioned / "libstdc++.so").symlink_to("../../../libstdc++.so.6")
    for name, real in ((f"gcc-{major}", real_gcc), (f"g++-{major}", GXX)):
        (bin_dir / name).write_text(
            "#!/bin/sh\n"
            f'case "$*" in\n'
            f'  *-print-file-name=libstdc++.so) echo {versioned}/libstdc++.so ;;\n'
            f'  *-dM*) {real} "$@" | sed "s/^#define __GNUC__ .*/#define __GNUC__ {major}/" ;;\n'
            f'  *) exec {real} "$@" ;;\n'
            "esac\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir / f"gcc-{major}", lib


@pytest.mark.skipif(GXX is None or shutil.which("gcc", path="/usr/bin:/bin") is None, reason="needs gcc and g++")
def test_use_libs_from_links_and_runs_the_default_compilers_libstdcxx(manifests_dir, tmp_path, monkeypatch):
    """nvcc 13.0 accepts gcc 6 to 15; the default here is a gcc 16 with its own libstdc++: backendCC is
    the host's gcc, and what it links (the link trace, the RUNPATH) and what the program loads is
    gcc 16's libstdc++ (Nixpkgs' backendStdenv, stdenvAdapters.useLibsFrom). Before, the choice
    was only recorded: the host gcc's own libstdc++ was linked and loaded."""
    from cudapkgs.elf import read as elf
    from cudapkgs.realise.scheduler import realise_parallel
    from cudapkgs.stdenv.cc_wrapper import cc_wrapper_for
    from cudapkgs.store.store import Store

    real_gcc = os.path.realpath(shutil.which("gcc", path="/usr/bin:/bin"))
    host = find_compilers({"PATH": "/usr/bin:/bin"})[1]
    if host is None or host.kind != "gcc" or not 6 <= host.major <= 15:
        pytest.skip("the host's gcc is not one nvcc 13.0 accepts (gcc 6 to 15)")
    newer, newer_lib = _newer_gcc(tmp_path / "gcc16", real_gcc, 16)
    monkeypatch.setenv("PATH", f"{newer.parent}:/usr/bin:/bin")
    monkeypatch.setenv("CC", str(newer))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("NIX_STORE", raising=False)
    pkgs, cuda = _cuda(tmp_path)
    cc = cuda.backendCC
    assert cc.hostCompiler["major"] == host.major and cc.passthru["useLibsFrom"]["major"] == 16
    with Store.open(tmp_path / "store") as store:
        realise_parallel(store, [cc.derivation], jobs=1)
    (tmp_path / "hello.cpp").write_text(HELLO)
    exe = tmp_path / "hello"
    link = subprocess.run([f"{cc.out}/bin/c++", tmp_path / "hello.cpp", "-o", exe, "-Wl,-t"], capture_output=True,
                          text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    traced = [line for line in link.stdout.splitlines() if "libstdc++" in line]
    assert traced and all(str(newer_lib) in line for line in traced), traced  # gcc 16's, not the host gcc's
    assert elf.read_elf(exe).runpath == [str(newer_lib)]
    ran = subprocess.run(["env", "-i", exe], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == str(newer_lib / "libstdc++.so.6")
    # A C link of no C++ gets the directories but no run path; naming -lstdc++ gets it.
    (tmp_path / "plain.c").write_text("int main(void) { return 0; }\n")
    subprocess.run([f"{cc.out}/bin/cc", tmp_path / "plain.c", "-o", tmp_path / "plain"], check=True,
                   env={"PATH": "/usr/bin:/bin"})
    assert elf.read_elf(tmp_path / "plain").runpath == []
    subprocess.run([f"{cc.out}/bin/cc", tmp_path / "plain.c", "-o", tmp_path / "plain", "-lstdc++"], check=True,
                   env={"PATH": "/usr/bin:/bin"})
    assert elf.read_elf(tmp_path / "plain").runpath == [str(newer_lib)]
    # Built in the store with backendStdenv's compiler: the fixup (autoPatchelf) keeps that run path.
    from cudapkgs.stdenv.generic import mk_derivation

    built = mk_derivation(pkgs.config, {
        "name": "use-libs-from-hello", "dontUnpack": True, "dontConfigure": True, "dontInstall": True,
        "stdenvCc": cc, "hello": HELLO,
        "buildPhase": 'printf "%s" "$hello" > hello.cpp && mkdir -p "$out/bin" && "$CXX" hello.cpp -o "$out/bin/hello"',
    }, system=pkgs.system, name="use-libs-from-hello")
    with Store.open(tmp_path / "store") as store:
        realise_parallel(store, [built.derivation], jobs=1)
    assert elf.read_elf(Path(built.out, "bin", "hello")).runpath == [str(newer_lib)]
    ran = subprocess.run(["env", "-i", f"{built.out}/bin/hello"], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == str(newer_lib / "libstdc++.so.6")
    libs_from = cc.passthru["useLibsFrom"]
    assert libs_from["libDirs"] == [str(newer_lib / "gcc" / "x86_64-linux-gnu" / "16"), str(newer_lib)]
    assert libs_from["runPath"] == [str(newer_lib)]  # not a directory the loader searches by default
    # What nvcc records gives the packages built with it the same compiler, runtime included.
    recorded = cuda.cuda_nvcc.derivation.attrs["hostCompiler"]
    assert recorded["useLibsFrom"] == libs_from
    assert cc_wrapper_for(pkgs.config, pkgs.system, recorded).drvPath == cc.drvPath


def test_no_use_libs_from_when_the_default_is_accepted(manifests_dir, tmp_path, monkeypatch):
    """The host's own gcc, accepted: nvcc records no useLibsFrom and backendCC is the plain wrapper."""
    host = find_compilers({"PATH": "/usr/bin:/bin"})[1]
    if host is None or host.kind != "gcc" or not 6 <= host.major <= 15:
        pytest.skip("the host's gcc is not one nvcc 13.0 accepts (gcc 6 to 15)")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    pkgs, cuda = _cuda(tmp_path)
    assert "useLibsFrom" not in cuda.cuda_nvcc.derivation.attrs["hostCompiler"]
    assert "useLibsFrom" not in cuda.backendCC.derivation.attrs
    assert cuda.backendCC.drvPath == pkgs.stdenv.cc.drvPath  # the default compiler's plain wrapper
