"""backendCC as cuda-modules/backend.nix@1dbbce67 chooses it (issue 35, item 5): the default compiler
when the set's nvcc accepts it; else the newest accepted major of the same family (for Clang:
`llvmPackages_N.clang`), keeping the default's C++ runtime (`passthru.useLibsFrom`); else an
evaluation error naming the versions nvcc accepts. Fake compilers answer the `-dM -E` probe."""

from __future__ import annotations

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
    assert cc.drvPath == pkgs.llvmPackages_20.clang.drvPath
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
