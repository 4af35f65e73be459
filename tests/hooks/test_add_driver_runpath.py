"""hooks.add_driver_runpath: the driver dir appended once; the host's driver dir from ldconfig."""

from __future__ import annotations

from hook_trees import pkgs, runpath  # noqa: F401 (pkgs is a fixture)

from cudapkgs import hooks
from cudapkgs.hooks.add_driver_runpath import _ldconfig_libcuda_dir


def test_add_driver_runpath_standalone_once(pkgs) -> None:
    bar, foo = pkgs
    hooks.auto_patchelf(foo, [bar["lib"] / "lib"])
    app = foo["bin"] / "bin" / "app"
    hooks.add_driver_runpath(foo, "/drv")
    hooks.add_driver_runpath(foo, "/drv")  # once only
    assert runpath(app) == [str(foo["lib"] / "lib"), "$ORIGIN", "/drv"]


def test_default_driver_lib_dir_parses_ldconfig() -> None:
    out = (
        "1234 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n"
        "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
    )
    assert _ldconfig_libcuda_dir(out) == "/usr/lib/x86_64-linux-gnu"
    assert _ldconfig_libcuda_dir("\tlibc.so.6 (libc6,x86-64) => /lib/libc.so.6\n") is None
    assert hooks.default_driver_lib_dir().startswith("/")
