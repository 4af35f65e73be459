"""A package in a string is its outPath; an object's text never reaches a derivation (issue 31, deliverable 4).

Before: ``f"{ps.torch}/lib"`` wrote ``<Package python3Packages.torch-bin>/lib`` into a built library's
RUNPATH, with no error.
"""

from __future__ import annotations

import re

import pytest

import cudapkgs
from cudapkgs.errors import EvalError
from cudapkgs.package import mk_package
from cudapkgs.stdenv import mk_derivation


@pytest.fixture
def pkgs(tmp_path, manifests_dir):
    return cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")})


def test_a_package_in_a_string_is_its_out_path(pkgs, tmp_path):
    zlib = pkgs.zlib
    assert f"{zlib}/lib" == zlib.outPath + "/lib"
    assert str(zlib) == zlib.outPath and zlib.outPath.startswith(str(tmp_path / "store") + "/")
    assert "%s" % zlib == zlib.outPath and f"{zlib:>5}" == zlib.outPath  # a format spec applies to the path
    # The path reaches the derivation as written: a RUNPATH entry of the store, not an object's repr.
    user = mk_derivation(pkgs.config, {"pname": "user", "version": "1", "appendRunpaths": [f"{zlib}/lib"],
                                       "installPhase": "mkdir $out"})
    assert user.derivation.data["attrs"]["appendRunpaths"] == [zlib.outPath + "/lib"]
    assert repr(zlib).startswith("<Package ")  # messages still show what it is


def test_a_package_without_an_out_path_is_no_string():
    plain = mk_package({"pname": "x"}, name="plain")
    with pytest.raises(EvalError, match=r"^plain has no outPath \(it is not a derivation\)"):
        str(plain)


@pytest.mark.parametrize("attr, make", [
    ("appendRunpaths[0]", lambda pkgs: {"appendRunpaths": [f"{pkgs.python3Packages}/lib"]}),
    ("LD_EXTRA", lambda pkgs: {"LD_EXTRA": f"{len}:/usr/lib"}),
    ("postFixup", lambda pkgs: {"postFixup": f"patchelf --add-rpath {object()}/lib $out/lib/x.so"}),
    ("env.CUDA_HOME", lambda pkgs: {"env": {"CUDA_HOME": str(pkgs.cudaPackages_13_0)}}),
])
def test_an_object_written_as_text_is_an_error_naming_the_attribute(pkgs, attr, make):
    drv = mk_derivation(pkgs.config, {"pname": "user", "version": "1", "installPhase": "mkdir $out", **make(pkgs)})
    with pytest.raises(EvalError) as raised:
        drv.derivation
    text = str(raised.value)
    assert text.startswith(f"user-1.{attr}: '<") and "is a Python object written as text, not a path" in text


def test_shell_text_with_angle_brackets_is_fine(pkgs):
    drv = mk_derivation(pkgs.config, {"pname": "user", "version": "1",
                                      "installPhase": "mkdir $out; cat > $out/x <<EOF\n<a> <b/>\nEOF\n[ 1 -lt 2 ]"})
    assert "<a> <b/>" in drv.derivation.data["attrs"]["installPhase"]


@pytest.mark.parametrize("attr, make", [
    ("appendRunpaths[0]", lambda pkgs: {"appendRunpaths": [f"{pkgs}/lib"]}),          # the top level
    ("env.CONFIG", lambda pkgs: {"env": {"CONFIG": f"{pkgs.config}"}}),               # the configuration
    ("postInstall", lambda pkgs: {"postInstall": f"echo {pkgs.config!r} > $out/config"}),
])
def test_sets_and_the_configuration_written_as_text_are_errors_too(pkgs, attr, make):
    """Before: the top level (``<TopLevel pkgs: …>``) and the configuration (``Config(…)``) passed silently."""
    drv = mk_derivation(pkgs.config, {"pname": "user", "version": "1", "installPhase": "mkdir $out", **make(pkgs)})
    with pytest.raises(EvalError, match=rf"^user-1\.{re.escape(attr)}: .* is a Python object written as text"):
        drv.derivation


@pytest.mark.parametrize("entry", ["None/lib", "lib", "./lib", "$out/lib", "", 3])
def test_a_runpath_entry_that_is_not_absolute_is_an_error_naming_it(pkgs, entry):
    """The loader reads a relative RUNPATH entry from the program's working directory: ``f"{pkg.get('lib')}/lib"``
    gave ``None/lib``, which a program run in a cloned repository would search there."""
    drv = mk_derivation(pkgs.config, {"pname": "user", "version": "1", "installPhase": "mkdir $out",
                                      "appendRunpaths": ["$ORIGIN/../lib", "/opt/x/lib", entry]})
    with pytest.raises(EvalError, match=r"^user-1\.appendRunpaths\[2\]: .* is not an absolute directory or \$ORIGIN"):
        drv.derivation
