"""hooks.cc_wrapper: a link through the wrapper gets a RUNPATH for every store library dir it links from."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cudapkgs.elf import read as elf
from cudapkgs.hooks import cc_wrapper

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
