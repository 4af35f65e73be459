"""String context: a package named in a string attribute is an input of the derivation (issue 31, item 4).

In Nix a string made from a package carries its context, so ``"${torch}/lib"`` in ``appendRunpaths`` makes
torch an input: built first, in the closure. Before, ``f"{ps.torch}/lib"`` gave the outPath (a plain `str`)
and the package was no input: the RUNPATH named a path that was neither built before nor carried with
the closure (onnxruntime's, cupy's, torch's and the JAX plugins' ``appendRunpaths``).
Evaluation only: nothing is built or downloaded.
"""

from __future__ import annotations

import gc
import re

import pytest

import cudapkgs
from cudapkgs.derivation import Derivation, known_output
from cudapkgs.errors import EvalError
from cudapkgs.stdenv import mk_derivation


@pytest.fixture
def pkgs(tmp_path, manifests_dir):
    return cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "fetchers": ["wheels"],
                                        "allowUnfree": True, "prebuiltWheels": ["nccl", "libnvshmem"]})


def _user(pkgs, **attrs):
    return mk_derivation(pkgs.config, {"pname": "user", "version": "1", "installPhase": "mkdir $out", **attrs})


def _closure_outputs(drv: Derivation) -> set[str]:
    return {p for d in drv.closure() for p in d.outputs.values()}


@pytest.mark.parametrize("make", [
    lambda zlib: {"appendRunpaths": [f"{zlib}/lib"]},                    # Nix's "${zlib}/lib"
    lambda zlib: {"appendRunpaths": [zlib.outPath + "/lib"]},            # .outPath, a plain str
    lambda zlib: {"env": {"ZLIB_HOME": "%s" % zlib}},                    # an env var
    lambda zlib: {"postFixup": f"patchelf --add-rpath {zlib}/lib $out/lib/x.so"},  # a phase
    lambda zlib: {"extra": {"nested": [[f"-L{zlib}/lib"]]}},             # deep in a structured attribute
    lambda zlib: {"flags": [f"-I{zlib.dev}/include"]},                   # another output: that output
])
def test_a_package_named_in_a_string_attribute_is_an_input(pkgs, make):
    zlib = pkgs.zlib
    drv = _user(pkgs, **make(zlib)).derivation
    named = [p for p in zlib.derivation.outputs.values() if p in str(drv.data["attrs"])]
    assert named, "the attribute names one of zlib's outputs"
    assert zlib.derivation in drv.deps  # built first
    assert set(named) <= set(drv.data["inputs"].values())  # hashed, and scanned for references after the build


def test_the_context_changes_the_derivation_and_drops_nothing_the_lists_give(pkgs):
    zlib = pkgs.zlib
    with_string = _user(pkgs, appendRunpaths=[f"{zlib}/lib"]).derivation
    plain = _user(pkgs, appendRunpaths=["/opt/lib"]).derivation
    assert with_string.drv_path != plain.drv_path
    # a package both in buildInputs and in a string: one input, as before
    both = _user(pkgs, buildInputs=[zlib], appendRunpaths=[f"{zlib}/lib"]).derivation
    assert [d.name for d in both.deps].count(zlib.derivation.name) == 1


def test_a_dropped_package_still_gives_its_context(pkgs):
    zlib = pkgs.zlib
    path = f"{zlib.override_attrs({'version': '1.3.1-x'})}/lib"  # the package is gone after this line
    gc.collect()
    drv = _user(pkgs, appendRunpaths=[path]).derivation
    assert any(d.name == "zlib-1.3.1-x" for d in drv.deps)
    found = known_output(path[: -len("/lib")], pkgs.config.storeDir)
    assert found is not None and found[1] == "out"


@pytest.mark.parametrize("text", [
    "{store}/0123456789abcdfghijklmnpqrsvwxyz-not-made-here/lib",  # a path of no evaluated package
    "{zlib}x/lib",                                                  # a known hash with another name
])
def test_a_store_path_no_package_makes_is_an_error_naming_the_attribute(pkgs, text):
    text = text.format(store=pkgs.config.storeDir, zlib=pkgs.zlib.outPath)
    with pytest.raises(EvalError) as raised:
        _user(pkgs, appendRunpaths=["$ORIGIN", text]).derivation
    message = str(raised.value)
    assert message.startswith("user-1.attrs.appendRunpaths[1]: '") and "no package of this evaluation makes" in message


def test_paths_of_another_store_and_text_around_the_path_are_fine(pkgs):
    zlib = pkgs.zlib
    other = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-glibc-2.40/lib"
    drv = _user(pkgs, appendRunpaths=[other], preFixup=f'echo "{zlib}".;x={zlib}:$x').derivation
    assert zlib.derivation in drv.deps and drv.data["attrs"]["appendRunpaths"] == [other]


def _store_paths(value, store: str) -> set[str]:
    pattern = re.escape(store + "/") + r"[0-9a-z]{32}-[A-Za-z0-9+._?=-]+"
    return set(re.findall(pattern, str(value)))


@pytest.mark.parametrize("set_name, names", [
    ("cudaPackages_13_0", ["torch", "torchvision", "torchaudio", "onnxruntime", "cupy", "jax-cuda13-plugin",
                           "jax-cuda13-pjrt", "cuda-pathfinder"]),
    ("cudaPackages_12_9", ["torch", "torchvision", "torchaudio", "cupy", "jax-cuda12-plugin", "jax-cuda12-pjrt"]),
])
def test_the_ml_packages_closures_hold_every_path_their_attributes_name(pkgs, set_name, names):
    ps = pkgs[set_name].pkgs.pkgsCuda.python3Packages
    store = pkgs.config.storeDir
    for name in names:
        drv = ps[name].derivation
        named = _store_paths(drv.data["attrs"], store)
        assert named, f"{name} names no store path"
        runpaths = _store_paths(drv.data["attrs"].get("appendRunpaths", []), store)
        missing = named - _closure_outputs(drv)
        assert not missing, f"{name}: {sorted(missing)} named but not in its closure"
        assert runpaths <= set(drv.data["inputs"].values()), name


def test_a_package_named_only_in_a_phase_is_built_first_and_is_in_the_closure(tmp_path):
    """End to end: ``b``'s phase copies a file of ``a`` and links to it; ``a`` is in no input list."""
    from cudapkgs.config import load_config
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    config = load_config(overrides={"storeDir": str(tmp_path / "store")})
    a = mk_derivation(config, {"pname": "a", "version": "1", "stdenvCc": None, "dontUnpack": True,
                               "installPhase": "mkdir -p $out/share && echo from-a > $out/share/greeting"})
    b = mk_derivation(config, {"pname": "b", "version": "1", "stdenvCc": None, "dontUnpack": True,
                               "installPhase": f"mkdir -p $out && cp {a}/share/greeting $out/ && "
                                               f"ln -s {a}/share/greeting $out/link"})
    with Store.open(tmp_path / "store") as store:
        (out,) = realise(store, [b.derivation])
        assert (tmp_path / "store").joinpath(out, "greeting").read_text() == "from-a\n"
        assert a.outPath in store.references(out)  # its link keeps a alive: a is in b's closure
        assert a.outPath in store.closure([out])
