"""Trees for the hook tests: real gcc-built libraries split into outputs under a store-like dir (the `pkgs` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudapkgs.elf import read as elf
from cudapkgs import hooks
from elf_builders import GCC, build_bar_tree, build_foo_tree, readelf_runpath

DRIVER = "/run/opengl-driver/lib"
FOO_OUTPUTS = ["out", "bin", "dev", "include", "lib", "static", "stubs"]


def runpath(path: Path) -> list[str]:
    """RUNPATH per read_elf, cross-checked against binutils' readelf."""
    mine = elf.read_elf(path).runpath
    assert readelf_runpath(path) == (mine or None)
    return mine


@pytest.fixture
def pkgs(tmp_path: Path):
    """Two unpacked and split redists under a store-like dir: libbar (out, lib) and libfoo."""
    if GCC is None:
        pytest.skip("gcc is not installed")
    store = tmp_path / "store"
    store.mkdir()
    bar_src = build_bar_tree(tmp_path / "src-bar")
    bar = hooks.split_outputs(bar_src, ["out", "lib"], root=store, name="aaaa-cuda12.8-libbar-1.0")
    foo_src = build_foo_tree(tmp_path / "src-foo", bar["lib"] / "lib")
    hooks.move_pkgconfig(foo_src)
    foo = hooks.split_outputs(foo_src, FOO_OUTPUTS, root=store, name="bbbb-cuda12.8-libfoo-1.0")
    return bar, foo
