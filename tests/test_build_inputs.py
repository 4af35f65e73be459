"""cudapkgs.build_inputs: output selection, propagation (setup.sh's findInputs) and the one environment function."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudapkgs.config import load_config
from cudapkgs.errors import EvalError
from cudapkgs.build_inputs import find_inputs, get_lib, get_output, setup_environment
from cudapkgs.stdenv import mk_derivation


def out(root: Path, name: str, dirs=(), build=(), native=(), marker=False) -> str:
    path = root / name
    for d in ("nix-support", *dirs):
        (path / d).mkdir(parents=True, exist_ok=True)
    if build:
        (path / "nix-support" / "propagated-build-inputs").write_text(" ".join(build) + "\n")
    if native:
        (path / "nix-support" / "propagated-native-build-inputs").write_text(" ".join(native) + "\n")
    if marker:
        (path / "nix-support" / "include-in-cudatoolkit-root").write_text("")
    return os.fspath(path)


def test_find_inputs_follows_nixpkgs_offsets(tmp_path):
    tool_dep = out(tmp_path, "tool-dep", ["bin"])
    tool = out(tmp_path, "tool", ["bin"], build=[tool_dep])
    gen = out(tmp_path, "generator", ["bin"])
    base = out(tmp_path, "base", ["lib"])
    lib = out(tmp_path, "lib", ["lib"], build=[base], native=[gen])
    dev = out(tmp_path, "lib-dev", ["include"], build=[lib])
    got = find_inputs([tool], [dev])
    # A tool's propagated inputs run on the build platform too; a library's propagated native
    # inputs are tools, its propagated build inputs libraries.
    assert got.native == [tool, tool_dep, gen]
    assert got.host == [dev, lib, base]


def test_find_inputs_terminates_on_cycles_and_keeps_first_order(tmp_path):
    a, b = os.fspath(tmp_path / "a"), os.fspath(tmp_path / "b")
    out(tmp_path, "a", build=[b])
    out(tmp_path, "b", build=[a])
    assert find_inputs([], [b, a]).host == [b, a]


def test_setup_environment_is_pure_except_base(tmp_path):
    lib = out(tmp_path, "lib", ["lib/pkgconfig", "include", "lib/python3.11/site-packages"], marker=True)
    tool = out(tmp_path, "tool", ["bin"])
    env = setup_environment([tool], [lib], base={"PATH": "/usr/bin", "KEEP": "1"}, store_dir=str(tmp_path))
    assert env["PATH"].split(":") == [f"{tool}/bin", "/usr/bin"]
    assert env["CPATH"] == f"{lib}/include" and env["LIBRARY_PATH"] == f"{lib}/lib"
    assert env["PKG_CONFIG_PATH"] == f"{lib}/lib/pkgconfig"
    assert env["PYTHONPATH"] == f"{lib}/lib/python3.11/site-packages"
    assert env["CMAKE_PREFIX_PATH"].split(":") == [lib, tool]
    assert env["CUDAToolkit_ROOT"] == lib and env["CUDAToolkit_INCLUDE_DIR"] == f"{lib}/include"
    assert env["KEEP"] == "1" and env["NIX_STORE"] == str(tmp_path)
    assert "CUDACXX" not in env  # no nvcc among the native inputs


@pytest.fixture
def config(tmp_path):
    return load_config(overrides={"storeDir": str(tmp_path / "store")})


def test_inputs_contribute_their_dev_output_or_the_selected_ones(config):
    multi = mk_derivation(config, {"pname": "multi", "outputs": ["out", "dev", "lib"], "stdenvCc": None})
    single = mk_derivation(config, {"pname": "single", "stdenvCc": None})
    user = mk_derivation(config, {
        "pname": "user", "stdenvCc": None,
        "buildInputs": [multi, single], "nativeBuildInputs": [multi.lib],
        "propagatedBuildInputs": [get_lib(multi), get_output(single, "bin")],
        "removeReferencesTo": [multi],
    })
    attrs = user.drvAttrs
    assert attrs["buildInputs"] == [multi.dev, single.out]  # lib.getDev
    assert attrs["nativeBuildInputs"] == [multi.lib]  # pkg.lib names that output alone
    assert attrs["propagatedBuildInputs"] == [multi.lib, single.out]  # getOutput falls back to out
    assert attrs["removeReferencesTo"] == [multi.out, multi.dev, multi.lib]  # reference lists: every output
    assert {d.name for d in user.derivation.deps} == {"multi", "single"}


def test_a_plain_string_in_an_input_list_is_refused_with_a_hint(config):
    pkg = mk_derivation(config, {"pname": "p", "stdenvCc": None, "buildInputs": ["/some/path"]})
    with pytest.raises(EvalError, match=r"buildInputs\[0\].*pkg\.lib"):
        pkg.drvPath


def test_nix_support_files_of_a_hostile_input_are_read_safely(tmp_path):
    """An input's nix-support files may be absolute links to anywhere (`cudapkgs import` and
    substitution keep such links, as Nix does): a FIFO must not hang the build, /dev/zero must
    not be read until memory runs out, and bytes that are not UTF-8 must not crash it."""
    from cudapkgs.hooks.multiple_outputs import PROPAGATED_BUILD
    from cudapkgs.build_inputs import Closures, propagated_file
    from cudapkgs.realise.generic import SETUP_HOOK, _default_phases
    from cudapkgs.realise.redist import dependency_paths

    def hostile(name: str, target: str) -> str:
        root = tmp_path / f"input-{name}"
        (root / "nix-support").mkdir(parents=True)
        os.symlink(target, root / PROPAGATED_BUILD)
        os.symlink(target, root / SETUP_HOOK)
        return str(root)

    binary = tmp_path / "binary"
    binary.write_bytes(os.fsencode(tmp_path) + b"/a\xffb cmake /usr/lib\n")  # a host dir, a relative name: dropped
    path = hostile("binary", str(binary))
    assert propagated_file(path) == [f"{tmp_path}/a\udcffb"]
    assert dependency_paths({"x": path}) == [path, f"{tmp_path}/a\udcffb"]
    assert "cmake" in _default_phases(Closures(native=[path], host=[]), {})["configure"]  # a link to a file: read
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (str(fifo), "/dev/zero"):
        path = hostile(os.path.basename(target), target)
        assert propagated_file(path) == [] and propagated_file(path, native=True) == []
        assert dependency_paths({"x": path}) == [path]
        assert "cmake" not in _default_phases(Closures(native=[path], host=[]), {})["configure"]


def test_propagated_inputs_keep_only_paths_of_the_same_store(tmp_path):
    """A hostile (imported) path's propagated-build-inputs cannot put host directories into its
    dependents' search paths: only store paths of its own store are taken."""
    from cudapkgs.build_inputs import propagated_file

    store = tmp_path / "store"
    me = store / ("a" * 32 + "-hostile-1.0")
    dep = store / ("b" * 32 + "-dep-1.0")
    (me / "nix-support").mkdir(parents=True)
    dep.mkdir()
    listed = [str(dep), "/usr/lib", str(tmp_path), str(tmp_path / "other" / ("c" * 32 + "-x")),
              f"{store}/../etc", "relative-name", f"{store}/sub/dir"]
    (me / "nix-support" / "propagated-build-inputs").write_text(" ".join(listed) + "\n")
    assert propagated_file(me) == [str(dep)]
