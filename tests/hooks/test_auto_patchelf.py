"""hooks.auto_patchelf: RUNPATHs exactly the dirs that satisfy DT_NEEDED, on real gcc-built trees."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hook_trees import pkgs, runpath  # noqa: F401 (pkgs is a fixture)

from cudapkgs.elf import patch as elf_patch
from cudapkgs.elf import read as elf
from cudapkgs import hooks


def test_auto_patchelf_sets_exact_runpaths_and_app_runs(pkgs) -> None:
    bar, foo = pkgs
    report = hooks.auto_patchelf(foo, [bar["lib"] / "lib"])
    app = foo["bin"] / "bin" / "app"
    libfoo = foo["lib"] / "lib" / "libfoo.so.1"
    libgpu = foo["lib"] / "lib" / "libgpu.so.1"
    stub = foo["stubs"] / "lib" / "stubs" / "libcuda.so"
    assert runpath(app) == [str(foo["lib"] / "lib"), "$ORIGIN"]
    assert runpath(libfoo) == [str(bar["lib"] / "lib"), "$ORIGIN"]
    # libcuda.so.1 resolves to the stubs output here; remove_stubs_from_runpath fixes that up.
    assert runpath(libgpu) == [str(foo["stubs"] / "lib" / "stubs"), "$ORIGIN"]
    assert runpath(stub) == ["$ORIGIN"]  # no DT_NEEDED outside libc
    assert report.runpaths[app] == runpath(app)
    assert report.resolved[app]["libfoo.so.1"] == foo["lib"] / "lib" / "libfoo.so.1"
    out = subprocess.run(["env", "-i", str(app)], capture_output=True, text=True, check=True)
    assert out.stdout == "foo(7)=42\n"


def test_auto_patchelf_is_idempotent_and_drops_stale_entries(pkgs) -> None:
    bar, foo = pkgs
    libfoo = foo["lib"] / "lib" / "libfoo.so.1"
    elf_patch.set_runpath(libfoo, ["/stale", str(bar["lib"] / "lib")])
    hooks.auto_patchelf(foo, [bar["lib"] / "lib"], append_runpaths=())
    assert runpath(libfoo) == [str(bar["lib"] / "lib")]
    plan = hooks.RunpathPlan()
    hooks.auto_patchelf(foo, [bar["lib"] / "lib"], append_runpaths=(), plan=plan)
    assert plan.apply() == 0  # nothing changes the second time


def test_unresolved_needed_names_file_and_library(pkgs) -> None:
    bar, foo = pkgs
    libfoo = foo["lib"] / "lib" / "libfoo.so.1"
    before = runpath(libfoo)
    with pytest.raises(hooks.UnresolvedDependencyError) as exc:
        hooks.auto_patchelf(foo, [])
    assert exc.value.missing == [(libfoo, "libbar.so.1")]
    assert str(libfoo) in str(exc.value) and "libbar.so.1" in str(exc.value)
    assert runpath(libfoo) == before  # nothing written on failure
    report = hooks.auto_patchelf(foo, [], ignore_missing=["libbar.so.*"])
    assert report.ignored_missing == [(libfoo, "libbar.so.1")]
    assert runpath(libfoo) == ["$ORIGIN"]


def test_libcuda_missing_is_allowed(pkgs, tmp_path: Path) -> None:
    bar, foo = pkgs
    del foo["stubs"]  # fix up without the stubs output: libcuda.so.1 is then found nowhere
    report = hooks.auto_patchelf(foo, [bar["lib"] / "lib"])
    libgpu = foo["lib"] / "lib" / "libgpu.so.1"
    assert (libgpu, "libcuda.so.1") in report.ignored_missing
    assert runpath(libgpu) == ["$ORIGIN"]
