"""pkgs.zlib: built from the pinned archive of the source mirror (CUDAPKGS_SOURCES, CI: ../shared/sources)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.elf import read as elf
from cudapkgs.fetch import fixed_output
from cudapkgs.fetch.hashes import parse_hash
from cudapkgs.pkgs.sources import source_dirs
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store


def _mirror() -> Path:
    for d in source_dirs():
        if (d / "zlib-1.3.1.tar.gz").is_file():
            return d
    pytest.skip("zlib-1.3.1.tar.gz is not in the source mirror (set CUDAPKGS_SOURCES, e.g. ../shared/sources)")


def test_zlib_builds_with_split_outputs(tmp_path, manifests_dir):
    mirror = _mirror()
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "sourceMirrors": [str(mirror)]})
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
    # Built by the host's cc, which its path does not name (cudnn, numpy, triton need libz.so.1 and keep
    # one path on every host: tests/pkgs/test_host_compiler_portability.py); the output says which one.
    assert zlib.drvAttrs["stdenvCc"] is None and not any("wrapper" in k for k in zlib.derivation.data["inputs"])
    assert Path(zlib.dev, "nix-support", "cc-version").read_text().strip()


def test_zlib_evaluates_without_its_source_and_a_wrong_mirror_copy_is_refused(tmp_path, monkeypatch, manifests_dir):
    # Evaluation names the source by Nixpkgs' fetchFromGitHub hash: no archive is needed to evaluate.
    monkeypatch.setenv("CUDAPKGS_SOURCES", str(tmp_path / "nowhere"))
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "sourceMirrors": [str(tmp_path / "bad")]})
    assert pkgs.zlib.src.outputHash == "sha256-TkPLWSN5QcPlL9D0kc/yhH0/puE9bFND24aj5NVDKYs="
    assert pkgs.zlib.drvPath.endswith("-zlib-1.3.1.drv")
    # A configured mirror holding something else under zlib's name is refused when fetching; the archive
    # cudapkgs ships (the built-in mirror, tried after the configured ones: ce95b3b) gives the source.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "zlib-1.3.1.tar.gz").write_bytes(b"not zlib")
    assert fixed_output.source_mirrors([str(tmp_path / "bad")], env={})[-1] == fixed_output.SHIPPED_SOURCES
    with Store.open(tmp_path / "store") as store:
        realise(store, [pkgs.zlib.src.derivation])
        assert store.is_valid(pkgs.zlib.src.outPath) and not store.is_valid(pkgs.zlib.out)
    src = Path(pkgs.zlib.src.outPath)
    fixed_output.check_hash(src, "recursive", parse_hash(pkgs.zlib.src.outputHash), "zlib-src")
    assert (src / "zlib.h").is_file() and not (src / "zlib-1.3.1.tar.gz").exists()
