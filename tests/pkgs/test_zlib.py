"""pkgs.zlib: built from the pinned archive of the source mirror (CUDAPKGS_SOURCES, CI: ../shared/sources)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs import elf
from cudapkgs.errors import EvalError
from cudapkgs.pkgs.sources import source_dirs
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store


def _mirror() -> Path:
    for d in source_dirs():
        if (d / "zlib-1.3.1.tar.gz").is_file():
            return d
    pytest.skip("zlib-1.3.1.tar.gz is not in the source mirror (set CUDAPKGS_SOURCES, e.g. ../shared/sources)")


def test_zlib_builds_with_split_outputs(tmp_path, manifests_dir):
    _mirror()
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")})
    zlib = pkgs.zlib
    assert zlib.outputs == ["out", "dev", "static"] and zlib.version == "1.3.1"
    with Store.open(tmp_path / "store") as store:
        realise(store, [zlib.derivation])
    so = Path(zlib.out, "lib", "libz.so.1")
    assert elf.read_elf(so.resolve()).soname == "libz.so.1"
    assert Path(zlib.static, "lib", "libz.a").is_file() and Path(zlib.dev, "include", "zlib.h").is_file()
    pc = Path(zlib.dev, "lib", "pkgconfig", "zlib.pc").read_text()
    assert f"libdir={zlib.out}/lib" in pc and f"includedir={zlib.dev}/include" in pc
    assert Path(zlib.dev, "nix-support", "propagated-build-inputs").read_text().split() == [zlib.out]


def test_a_wrong_archive_is_an_evaluation_error(tmp_path, monkeypatch, manifests_dir):
    (tmp_path / "zlib-1.3.1.tar.gz").write_bytes(b"not zlib")
    monkeypatch.setenv("CUDAPKGS_SOURCES", str(tmp_path))
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")})
    with pytest.raises(EvalError, match="has sha256 .*expected 4714c4d9"):
        pkgs.zlib.drvPath
    monkeypatch.setenv("CUDAPKGS_SOURCES", str(tmp_path / "empty"))
    with pytest.raises(EvalError, match="not in the source mirror"):
        cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "s2")}).zlib.drvPath
