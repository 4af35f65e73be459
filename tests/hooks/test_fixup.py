"""hooks.fixup: buildRedist's postFixup RUNPATH chain with one shared plan."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hook_trees import DRIVER, pkgs, runpath  # noqa: F401 (pkgs is a fixture)

from cudapkgs.elf import read as elf
from cudapkgs import hooks


def test_fixup_chain_stubs_driver_compat(pkgs, tmp_path: Path) -> None:
    bar, foo = pkgs
    compat = tmp_path / "store" / "cccc-cuda12.8-cuda_compat-1.0" / "compat"
    report = hooks.fixup(foo, [bar["lib"] / "lib"], driver_dir=DRIVER, compat_dir=compat)
    app = foo["bin"] / "bin" / "app"
    libgpu = foo["lib"] / "lib" / "libgpu.so.1"
    assert runpath(app) == [str(compat), str(foo["lib"] / "lib"), "$ORIGIN", DRIVER]
    # The stubs dir became the driver dir in its place, and the appended driver dir is not repeated.
    assert runpath(libgpu) == [str(compat), DRIVER, "$ORIGIN"]
    assert report.runpaths[libgpu] == runpath(libgpu)
    n_elf = len(list(elf.iter_elf_files(foo["lib"]))) + 2  # + app + stub
    assert report.patchelf_calls <= n_elf
    assert subprocess.run(["env", "-i", str(app)], capture_output=True, text=True).stdout == "foo(7)=42\n"


def test_fixup_sets_interpreter(pkgs) -> None:
    bar, foo = pkgs
    app = foo["bin"] / "bin" / "app"
    real = os.path.realpath(elf.read_elf(app).interpreter)
    hooks.fixup(foo, [bar["lib"] / "lib"], interpreter=real)
    assert elf.read_elf(app).interpreter == real
    assert elf.read_elf(foo["lib"] / "lib" / "libfoo.so.1").interpreter is None  # libraries untouched
    assert subprocess.run(["env", "-i", str(app)], capture_output=True, text=True).stdout == "foo(7)=42\n"
