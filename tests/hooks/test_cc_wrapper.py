"""hooks.cc_wrapper: a link through the wrapper gets a RUNPATH for every store library dir it links from."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cudapkgs.elf import read as elf
from cudapkgs.hooks import cc_wrapper
from cudapkgs.hooks.cudatoolkit_root import JOINED_MARKER

GCC = shutil.which("gcc", path="/usr/bin:/bin")
pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc in /usr/bin")


@pytest.fixture
def tree(tmp_path: Path):
    store = tmp_path / "store"
    lib = store / "aaaa-greet-1.0" / "lib"
    stubs = store / "bbbb-cudart-1.0-stubs" / "lib"
    for d in (lib, stubs):
        d.mkdir(parents=True)
    (tmp_path / "greet.c").write_text('#include <stdio.h>\nvoid greet(void){puts("hello from greet");}\n')
    subprocess.run([GCC, "-shared", "-fPIC", "-o", lib / "libgreet.so", tmp_path / "greet.c"], check=True)
    (tmp_path / "drv.c").write_text("int drv_version(void){return 1;}\n")
    subprocess.run([GCC, "-shared", "-fPIC", "-o", stubs / "libdrv.so", tmp_path / "drv.c"], check=True)
    (tmp_path / "main.c").write_text("void greet(void);\nint main(void){greet();return 0;}\n")
    (tmp_path / "main2.c").write_text("int drv_version(void);\nint main(void){return drv_version()-1;}\n")
    wrapper = tmp_path / "wrapper" / "bin" / "cc"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(cc_wrapper.wrapper_script(os.path.realpath(GCC), "gcc (test)"))
    wrapper.chmod(0o755)
    return store, lib, stubs, wrapper


def _env(store: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "NIX_STORE": str(store), **extra}


def test_link_gets_runpath_and_runs_without_ld_library_path(tree, tmp_path):
    store, lib, _, wrapper = tree
    exe = tmp_path / "t"
    subprocess.run([wrapper, tmp_path / "main.c", f"-L{lib}", "-lgreet", "-o", exe], check=True, env=_env(store))
    assert elf.read_elf(exe).runpath == [str(lib)]
    run = subprocess.run(["env", "-i", exe], capture_output=True, text=True)
    assert run.stdout == "hello from greet\n"


def test_library_path_counts_and_non_store_dirs_do_not(tree, tmp_path):
    store, lib, _, wrapper = tree
    exe = tmp_path / "t"
    subprocess.run([wrapper, tmp_path / "main.c", "-lgreet", "-o", exe], check=True,
                   env=_env(store, LIBRARY_PATH=str(lib)))
    assert elf.read_elf(exe).runpath == [str(lib)]
    outside = tmp_path / "elsewhere"
    shutil.copytree(lib, outside)
    subprocess.run([wrapper, tmp_path / "main.c", f"-L{outside}", "-lgreet", "-o", exe], check=True, env=_env(store))
    assert elf.read_elf(exe).runpath == []  # only store dirs are made run paths


def test_stubs_dir_becomes_the_driver_dir(tree, tmp_path):
    store, _, stubs, wrapper = tree
    exe = tmp_path / "t2"
    subprocess.run([wrapper, tmp_path / "main2.c", f"-L{stubs}", "-ldrv", "-o", exe], check=True,
                   env=_env(store, CUDAPKGS_DRIVER_DIR="/run/opengl-driver/lib"))
    assert elf.read_elf(exe).runpath == ["/run/opengl-driver/lib"]
    subprocess.run([wrapper, tmp_path / "main2.c", f"-L{stubs}", "-ldrv", "-o", exe], check=True, env=_env(store))
    assert elf.read_elf(exe).runpath == []  # never the stubs dir itself


def test_compile_only_passes_through_unchanged(tree, tmp_path):
    store, lib, _, wrapper = tree
    obj = tmp_path / "main.o"
    subprocess.run([wrapper, "-c", tmp_path / "main.c", f"-L{lib}", "-o", obj], check=True, env=_env(store))
    assert obj.is_file()
    with pytest.raises(ValueError, match="absolute"):
        cc_wrapper.wrapper_script("gcc", "relative")


# --- response files (CMake links through @linkLibs.rsp) --------------------------------------

BASH = shutil.which("bash", path="/usr/bin:/bin")


def _recorder(tmp_path: Path) -> tuple[Path, Path]:
    """A wrapper around a stand-in compiler that records the arguments it is given (one per line)."""
    log = tmp_path / "args.txt"
    fake = tmp_path / "fake-cc"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > {log}\n')
    fake.chmod(0o755)
    wrapper = tmp_path / "rec" / "cc"
    wrapper.parent.mkdir()
    wrapper.write_text(cc_wrapper.wrapper_script(str(fake), "recorder"))
    wrapper.chmod(0o755)
    return wrapper, log


def test_a_link_through_a_response_file_gets_its_run_paths(tree, tmp_path):
    """CMake's `c++ main.o -o t @CMakeFiles/t.dir/linkLibs.rsp`: the libraries are in the file
    (the wrapper saw none of them before, so the program had no RUNPATH and failed to load)."""
    store, lib, stubs, wrapper = tree
    rsp = tmp_path / "linkLibs.rsp"
    rsp.write_text(f" -L{lib}  -lgreet\n")
    exe = tmp_path / "t"
    subprocess.run([wrapper, tmp_path / "main.c", "-o", exe, f"@{rsp}"], check=True, env=_env(store))
    assert elf.read_elf(exe).runpath == [str(lib)]
    assert subprocess.run(["env", "-i", exe], capture_output=True, text=True).stdout == "hello from greet\n"
    # By full path, quoted (a space in the name), nested one file deeper, through a tree of links
    # (a merged toolkit root): the run path is the library's own directory, not the tree's.
    merged = store / "cccc-merged root" / "lib"
    merged.mkdir(parents=True)
    (merged / "libgreet.so").symlink_to(lib / "libgreet.so")
    (merged.parent / JOINED_MARKER).write_text("")
    inner = tmp_path / "inner.rsp"
    inner.write_text(f"'{merged}/libgreet.so'\n")
    rsp.write_text(f'"@{inner}"\n')
    subprocess.run([wrapper, tmp_path / "main.c", "-o", exe, f"@{rsp}"], check=True, env=_env(store))
    assert elf.read_elf(exe).runpath == [str(lib)]
    # A tree of links that is no joined root (a symlinkJoin like cudatoolkit) is taken as it is.
    (merged.parent / JOINED_MARKER).unlink()
    subprocess.run([wrapper, tmp_path / "main.c", "-o", exe, f"@{rsp}"], check=True, env=_env(store))
    assert elf.read_elf(exe).runpath == [str(merged)]


def test_a_stubs_library_in_a_response_file_gives_the_driver_dir(tree, tmp_path):
    store, _, stubs, wrapper = tree
    rsp = tmp_path / "libs.rsp"
    rsp.write_text(f"-L{stubs} -ldrv\n")
    exe = tmp_path / "t2"
    subprocess.run([wrapper, tmp_path / "main2.c", "-o", exe, f"@{rsp}"], check=True,
                   env=_env(store, CUDAPKGS_DRIVER_DIR="/run/opengl-driver/lib"))
    assert elf.read_elf(exe).runpath == ["/run/opengl-driver/lib"]


def test_a_response_file_that_cannot_be_read_is_passed_through(tree, tmp_path):
    """Missing, a directory, a FIFO (reading it would hang): the argument reaches the compiler as
    it was, nothing of it is guessed, and a stubs dir named beside it still gets no run path."""
    store, lib, stubs, _ = tree
    wrapper, log = _recorder(tmp_path)
    fifo = tmp_path / "fifo.rsp"
    os.mkfifo(fifo)
    readable = tmp_path / "ok.rsp"
    readable.write_text(f"-L{stubs} -ldrv @{tmp_path}/missing.rsp\n")
    for unreadable in (tmp_path / "missing.rsp", tmp_path, fifo):
        argv = ["main.o", f"@{unreadable}", f"@{readable}", "-o", "t"]
        subprocess.run([wrapper, *argv], check=True, env=_env(store), timeout=30)
        assert log.read_text().splitlines() == argv  # untouched, and no -Wl,-rpath for the stubs dir


def test_response_files_are_read_at_most_2000_in_all(tree, tmp_path):
    """GCC's expandargv stops after 2000 response files ("too many @-files encountered"); the
    wrapper read every one up to 10 deep, so a file naming itself four times (4^10 reads) hung
    it before the compiler was ever run. Now the 2000th and later @FILEs are left as they are."""
    store, lib, _, _ = tree
    wrapper, log = _recorder(tmp_path)
    empty = tmp_path / "empty.rsp"
    empty.write_text("\n")
    top = tmp_path / "top.rsp"
    top.write_text(f"@{empty} " * 2100 + "\n")
    run = subprocess.run([wrapper, "main.o", f"@{top}", "-o", "t"], check=True, capture_output=True, text=True,
                         env=_env(store, NIX_DEBUG="1"), timeout=300)
    read = run.stderr.split("run paths added:")[0].splitlines()
    assert read.count(f"  {empty}") == 0
    assert read.count(f"  @{empty}") == 2100 - 1999  # top.rsp is the first of the 2000
    tree_rsp = tmp_path / "self.rsp"
    tree_rsp.write_text(f"@{tree_rsp} @{tree_rsp} @{tree_rsp} @{tree_rsp} -L{lib} -lgreet\n")
    argv = ["main.o", f"@{tree_rsp}", "-o", "t"]
    subprocess.run([wrapper, *argv], check=True, env=_env(store), timeout=300)
    assert log.read_text().splitlines() == [*argv, f"-Wl,-rpath,{lib}"]


def _reference_words(text: str) -> list[str]:
    """GCC's response-file syntax (libiberty buildargv, as Nixpkgs' expand-response-params reads
    it): words split by whitespace; '…' and "…" quote; a backslash takes the next character as it
    is, inside quotes too; at the end, an unfinished word is still a word."""
    words: list[str] = []
    word: list[str] | None = None
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            word = word if word is not None else []
            if i + 1 < len(text):
                word.append(text[i + 1])
            i += 2
            continue
        if quote is not None:
            if c == quote:
                quote = None
            else:
                word.append(c)
        elif c in "'\"":
            word = word if word is not None else []
            quote = c
        elif c.isspace():
            if word is not None:
                words.append("".join(word))
                word = None
        else:
            word = word if word is not None else []
            word.append(c)
        i += 1
    if word is not None:
        words.append("".join(word))
    return words


def _words_read(wrapper: Path, store: Path, rsp: Path) -> list[str]:
    run = subprocess.run([wrapper, "x.o", f"@{rsp}"], capture_output=True, text=True, env=_env(store, NIX_DEBUG="1"))
    lines = run.stderr.split("cudapkgs cc-wrapper: run paths added:")[0].splitlines()[1:]
    decoded = subprocess.run([BASH, "-c", 'eval "a=($1)"; printf "%s\\0" "${a[@]}"', "_", " ".join(lines)],
                             capture_output=True, text=True, check=True).stdout
    return decoded.split("\0")[:-1]


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_response_file_words_are_gccs(tree, tmp_path):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    store, _, _, _ = tree
    wrapper, _ = _recorder(tmp_path)
    rsp = tmp_path / "words.rsp"
    cases = ['a b\tc\n', "'a b' \"c d\" e\\ f", 'x"y z"w', "'it\\'s'", '"a\\"b"', "''", 'tail\\', "'open q", "'\\", "é ü"]
    for text in cases:
        rsp.write_text(text)
        assert _words_read(wrapper, store, rsp)[1:] == _reference_words(text), text

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text(alphabet="ab -'\"\\\t\n", max_size=40))
    def check(text: str) -> None:
        rsp.write_text(text)
        assert _words_read(wrapper, store, rsp)[1:] == _reference_words(text)

    check()


def test_host_run_paths_asked_for_are_dropped_and_store_ones_kept(tree, tmp_path):
    """torch's CMake config adds MKL's /lib/intel64:/lib/intel64_win:/lib/win-x64 (an empty root): a
    program linked in a shell keeps only run paths into the store, its build's tree and $ORIGIN."""
    store, lib, _, wrapper = tree
    build = tmp_path / "build"
    (build / "sub").mkdir(parents=True)
    exe = tmp_path / "t"
    args = [wrapper, tmp_path / "main.c", f"-L{lib}", "-lgreet", "-o", exe,
            "-Wl,-rpath,/lib/intel64:/lib/intel64_win:/lib/win-x64", f"-Wl,-rpath,{build}/sub:{lib}",
            "-Wl,-rpath=$ORIGIN/../lib", "-Wl,-rpath", "-Wl,/opt/host/lib", "-Xlinker", "-rpath", "-Xlinker", "/usr/lib64",
            "-Wl,--as-needed,-rpath,/usr/local/lib,-O1"]
    run = subprocess.run(args, capture_output=True, text=True, env=_env(store, CUDAPKGS_BUILD_TREE=str(build)))
    assert run.returncode == 0, run.stderr
    assert elf.read_elf(exe).runpath == [f"{build}/sub", str(lib), "$ORIGIN/../lib"]
    assert "dropped run path entries" in run.stderr
    for host in ("/lib/intel64", "/lib/intel64_win", "/lib/win-x64", "/opt/host/lib", "/usr/lib64", "/usr/local/lib"):
        assert host in run.stderr
    assert subprocess.run(["env", "-i", exe], capture_output=True, text=True).stdout == "hello from greet\n"
    # Nothing to drop: nothing said.
    quiet = subprocess.run([wrapper, tmp_path / "main.c", f"-L{lib}", "-lgreet", "-o", exe, f"-Wl,-rpath,{lib}"],
                           capture_output=True, text=True, env=_env(store))
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_use_libs_from_directories_must_be_absolute_and_comma_free(tmp_path):
    """useLibsFrom's directories go into ``-L`` and ``-Wl,-rpath,`` words: a relative one (the working
    directory of a cloned repository) or one with a comma (``-Wl,`` splits there) is refused."""
    # Without useLibsFrom the script has none of it: every stdenv.cc, and so every package, keeps its store path.
    plain = cc_wrapper.wrapper_script("/usr/bin/gcc", "gcc")
    assert "libs_from" not in plain and plain == cc_wrapper.wrapper_script("/usr/bin/gcc", "gcc", libs_from={})
    for bad in ("lib", "/opt/gcc,16/lib"):
        with pytest.raises(ValueError, match="useLibsFrom"):
            cc_wrapper.wrapper_script("/usr/bin/gcc", "gcc", libs_from={"libDirs": [bad], "runPath": []})
    # Quoted for the shell: a directory with a space or a quote reaches the linker as one word.
    wrapper, log = _recorder(tmp_path)
    odd = "/opt/gcc 16's/lib"
    wrapper.write_text(cc_wrapper.wrapper_script(str(tmp_path / "fake-cc"), "recorder",
                                                 libs_from={"libDirs": [odd], "runPath": [odd]}, cxx=True))
    subprocess.run([wrapper, "main.o", "-o", "t"], check=True, env={"PATH": "/usr/bin:/bin"})
    assert log.read_text().splitlines() == ["main.o", "-o", "t", f"-L{odd}", f"-Wl,-rpath,{odd}"]
    subprocess.run([wrapper, "-c", "main.c"], check=True, env={"PATH": "/usr/bin:/bin"})
    assert log.read_text().splitlines() == ["-c", "main.c"]  # no link: nothing added
