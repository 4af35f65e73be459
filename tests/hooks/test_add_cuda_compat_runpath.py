"""hooks.add_cuda_compat_runpath: cuda_compat's dir first, once."""

from __future__ import annotations

from hook_trees import pkgs, runpath  # noqa: F401 (pkgs is a fixture)

from cudapkgs import hooks


def test_add_cuda_compat_runpath_prepends_once(pkgs) -> None:
    bar, foo = pkgs
    hooks.auto_patchelf(foo, [bar["lib"] / "lib"], append_runpaths=())
    app = foo["bin"] / "bin" / "app"
    hooks.add_driver_runpath(foo, "/drv")
    hooks.add_cuda_compat_runpath(foo, "/compat")
    hooks.add_cuda_compat_runpath(foo, "/compat")
    assert runpath(app) == ["/compat", str(foo["lib"] / "lib"), "/drv"]
