"""cudapkgs.cuda.hooks: buildRedist's output split and fix-up hooks on real gcc-built trees."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs import elf
from cudapkgs.cuda import hooks
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


def test_split_outputs_order(pkgs) -> None:
    bar, foo = pkgs
    assert foo["out"].name == "bbbb-cuda12.8-libfoo-1.0"
    assert foo["lib"].name == "bbbb-cuda12.8-libfoo-1.0-lib"
    assert (foo["bin"] / "bin" / "app").is_file()
    assert (foo["lib"] / "lib" / "libfoo.so.1").is_file()
    assert (foo["lib"] / "lib" / "libfoo.so").is_symlink()
    assert (foo["include"] / "include" / "foo.h").is_file()
    # static (**/*.a) runs after lib took lib/, and moves from every other output.
    assert (foo["static"] / "lib" / "libfoo_static.a").is_file()
    assert not (foo["lib"] / "lib" / "libfoo_static.a").exists()
    # stubs took lib/stubs from lib.
    assert (foo["stubs"] / "lib" / "stubs" / "libcuda.so").is_file()
    assert not (foo["lib"] / "lib" / "stubs").exists()
    # dev's **/*.pc (after move_pkgconfig put it in share/pkgconfig).
    assert (foo["dev"] / "share" / "pkgconfig" / "foo-1.0.pc").is_file()
    assert not (foo["out"] / "share").exists()  # emptied dirs are pruned
    assert sorted(p.name for p in foo["out"].iterdir()) == ["LICENSE"]
    assert list(bar) == ["out", "lib"]


def test_split_outputs_uses_expected_order_and_rejects_unknown(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "x.a").write_text("!<arch>\n")
    (tree / "lib" / "x.so").write_text("")
    # Given static before lib, the expected order still runs lib first, so x.a ends in static.
    outs = hooks.split_outputs(tree, ["static", "lib", "out"], name="p")
    assert list(outs) == ["out", "lib", "static"]
    assert (outs["static"] / "lib" / "x.a").exists() and (outs["lib"] / "lib" / "x.so").exists()
    with pytest.raises(hooks.FixupError, match="unknown"):
        hooks.split_outputs(tmp_path / "u", ["out", "headers"])


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
    elf.set_runpath(libfoo, ["/stale", str(bar["lib"] / "lib")])
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


def test_hooks_standalone(pkgs, tmp_path: Path) -> None:
    bar, foo = pkgs
    hooks.auto_patchelf(foo, [bar["lib"] / "lib"])
    libgpu = foo["lib"] / "lib" / "libgpu.so.1"
    app = foo["bin"] / "bin" / "app"
    hooks.add_driver_runpath(foo, "/drv")
    hooks.add_driver_runpath(foo, "/drv")  # once only
    assert runpath(app) == [str(foo["lib"] / "lib"), "$ORIGIN", "/drv"]
    hooks.remove_stubs_from_runpath(foo, "/drv")
    assert runpath(libgpu) == ["/drv", "$ORIGIN"]
    hooks.add_cuda_compat_runpath(foo, "/compat")
    assert runpath(libgpu) == ["/compat", "/drv", "$ORIGIN"]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (["/s/x-cuda12.8-cudart-stubs/lib/stubs", "/a"], [DRIVER, "/a"]),
        (["/a", "/x/stubs", "/y-cuda12/lib/stubs", "/b"], ["/a", DRIVER, "/b"]),
        ([DRIVER, "/x-cuda12/lib/stubs", "/b"], [DRIVER, "/b"]),
        (["/x-cuda12/lib/stubs", "/b", DRIVER], [DRIVER, "/b"]),
        (["/a", "/stubsy"], ["/a", "/stubsy"]),
    ],
)
def test_strip_stubs(before, after) -> None:
    assert hooks.strip_stubs(before, DRIVER) == after


def test_default_driver_lib_dir_parses_ldconfig() -> None:
    out = (
        "1234 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n"
        "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
    )
    assert hooks._ldconfig_libcuda_dir(out) == "/usr/lib/x86_64-linux-gnu"
    assert hooks._ldconfig_libcuda_dir("\tlibc.so.6 (libc6,x86-64) => /lib/libc.so.6\n") is None
    assert hooks.default_driver_lib_dir().startswith("/")


def test_mark_for_cudatoolkit_root(tmp_path: Path) -> None:
    outs = {"out": tmp_path / "o", "lib": tmp_path / "l"}
    for p in outs.values():
        p.mkdir()
    made = hooks.mark_for_cudatoolkit_root(outs)
    assert len(made) == 2 and all(m.read_text() == "" for m in made)
    assert hooks.mark_for_cudatoolkit_root(outs, pname="x", strict_deps=False) == []  # once
    other = {"out": tmp_path / "n"}
    (tmp_path / "n").mkdir()
    [marker] = hooks.mark_for_cudatoolkit_root(other, pname="cuda_cudart", strict_deps=False)
    assert marker == tmp_path / "n" / "nix-support" / "include-in-cudatoolkit-root"
    assert marker.read_text() == "cuda_cudart-out"


def test_lift_versioned_lib_dir(tmp_path: Path) -> None:
    (tmp_path / "lib" / "12").mkdir(parents=True)
    (tmp_path / "lib" / "13").mkdir()
    (tmp_path / "lib" / "12" / "libx.so").write_text("12")
    (tmp_path / "lib" / "libold.so").write_text("old")
    assert hooks.lift_versioned_lib_dir(tmp_path, 12)
    assert sorted(p.name for p in (tmp_path / "lib").iterdir()) == ["libx.so"]
    assert not hooks.lift_versioned_lib_dir(tmp_path, 12)


def test_pkgconfig_move_and_rewrite(tmp_path: Path) -> None:
    (tmp_path / "pkg-config").mkdir()
    (tmp_path / "pkgconfig").mkdir()
    (tmp_path / "pkg-config" / "cudart-12.8.pc").write_text(
        "cudaroot=/usr/local/cuda\nlibdir=${cudaroot}/targets/x86_64-linux/lib\n"
        "includedir=${cudaroot}/targets/x86_64-linux/include\nLibs: -L${libdir} -lcudart\n"
    )
    (tmp_path / "pkgconfig" / "nvrtc.pc").write_text("libdir=/opt/lib64\nName: nvrtc\n")
    moved = hooks.move_pkgconfig(tmp_path)
    pcdir = tmp_path / "share" / "pkgconfig"
    assert sorted(p.name for p in moved) == ["cudart-12.8.pc", "nvrtc.pc"]
    assert not (tmp_path / "pkg-config").exists() and not (tmp_path / "pkgconfig").exists()
    changed = hooks.rewrite_pkgconfig(tmp_path, "/s/dev", "/s/lib", "/s/include")
    assert [p.name for p in changed] == ["cudart-12.8.pc"]  # libdir=/opt/lib64 does not end in /lib
    assert (pcdir / "cudart-12.8.pc").read_text() == (
        "cudaroot=/s/dev\nlibdir=/s/lib/lib\nincludedir=/s/include/include\nLibs: -L${libdir} -lcudart\n"
    )
    link = pcdir / "cudart.pc"
    assert link.is_symlink() and link.readlink() == Path("cudart-12.8.pc")
    assert not (pcdir / "nvrtc.pc").is_symlink()


def test_fhs_check(pkgs) -> None:
    bar, foo = pkgs
    # The .pc file still says cudaroot=/usr/local/cuda; LICENSE mentions /usr/ but is exempt.
    with pytest.raises(hooks.FHSReferenceError, match="foo-1.0.pc"):
        hooks.check_no_fhs_references(foo)
    assert [p.name for p in hooks.check_no_fhs_references(foo, allow=True)] == ["foo-1.0.pc"]
    hooks.rewrite_pkgconfig(foo["dev"], "/s/dev", "/s/lib", "/s/include")
    assert hooks.check_no_fhs_references(foo) == []


def test_outputs_not_empty(tmp_path: Path) -> None:
    outs = {n: tmp_path / n for n in ("out", "dev", "lib", "doc")}
    for p in outs.values():
        (p / "nix-support").mkdir(parents=True)
    (outs["lib"] / "lib").mkdir()
    with pytest.raises(hooks.EmptyOutputError, match="doc"):
        hooks.check_outputs_not_empty(outs)
    (outs["doc"] / "README").write_text("x")
    hooks.check_outputs_not_empty(outs)


_entries = st.sampled_from(["/a", "/b", "$ORIGIN", DRIVER, "/s/x-cuda12.8-cudart-stubs/lib/stubs", "/other/stubs"])


@given(st.lists(_entries, max_size=8))
def test_strip_stubs_properties(runpath) -> None:
    out = hooks.strip_stubs(runpath, DRIVER)
    assert not any(hooks.is_stubs_entry(e) for e in out)
    assert out.count(DRIVER) == (1 if DRIVER in runpath or any(hooks.is_stubs_entry(e) for e in runpath) else 0)
    others = [e for e in runpath if e != DRIVER and not hooks.is_stubs_entry(e)]
    assert [e for e in out if e != DRIVER] == others  # everything else kept, in order
    assert hooks.strip_stubs(out, DRIVER) == out


def test_auto_patchelf_sets_interpreter(pkgs) -> None:
    import os

    bar, foo = pkgs
    app = foo["bin"] / "bin" / "app"
    real = os.path.realpath(elf.read_elf(app).interpreter)
    hooks.fixup(foo, [bar["lib"] / "lib"], interpreter=real)
    assert elf.read_elf(app).interpreter == real
    assert elf.read_elf(foo["lib"] / "lib" / "libfoo.so.1").interpreter is None  # libraries untouched
    assert subprocess.run(["env", "-i", str(app)], capture_output=True, text=True).stdout == "foo(7)=42\n"
