"""A Python package's ``dependencies`` are made when its derivation is, not when the package is
(issue 34, item 4): Nix's list elements are thunks, and a package's meta (what `nix-env -qa` and
`nix search` list) reads no dependency unless ``config.checkMetaRecursively``
(make-derivation.nix@8c2682d3).  Each test fails on the tree before (dependencies were made with
the package: a dependency's evaluation error was the dependent's listing row, and torchvision's
"sets that have it" made torch-bin's eleven dependencies in three more top levels)."""

from __future__ import annotations

import collections

import pytest

import cudapkgs
from cudapkgs.errors import CudapkgsError, EvalError
from cudapkgs.inventory import list_all

# python3Packages rows whose status was a dependency's "no pinned wheel" on aarch64-linux and now is
# the package's own meta: (attribute, status prefix, version)
OWN_META_ON_AARCH64 = [
    ("python3Packages.torch-bin", "unfree (issl, unfreeRedistributable", "2.9.1"),
    ("python3Packages.torch", "unsupported: Package torch-2.9.1 is marked as broken", "2.9.1"),
    ("python3Packages.torchaudio-bin", "unsupported: Package torchaudio-2.9.1 is marked as broken", "2.9.1"),
    ("python3Packages.torchaudio", "unsupported: Package torchaudio-2.9.1 is marked as broken", "2.9.1"),
    ("python3Packages.torchvision-bin", "unsupported: Package torchvision-0.24.1 is marked as broken", "0.24.1"),
    ("python3Packages.torchvision", "unsupported: Package torchvision-0.24.1 is marked as broken", "0.24.1"),
    ("python3Packages.cupy", "unsupported: Package cupy-14.2.0 is not available on aarch64-linux", "14.2.0"),
    ("python3Packages.jax", "unsupported: Package jax-0.10.2 is not available on aarch64-linux", "0.10.2"),
    ("python3Packages.onnxruntime", "unsupported: Package onnxruntime-1.31.1 is marked as broken", "1.31.1"),
    # pure-Python wheels and a source build: nothing of their own keeps them from aarch64 (as in Nixpkgs,
    # whose meta.available does not look at dependencies); their builds still fail on the dependency
    ("python3Packages.jinja2", "available", "3.1.6"),
    ("python3Packages.mako", "available", "1.4.3"),
    ("python3Packages.requests", "available", "2.34.2"),
    ("python3Packages.pytools", "available", "2026.1.1"),
    ("python3Packages.pycuda", "available", "2026.1"),
]


_ROWS: dict[str, dict] = {}


@pytest.fixture
def aarch64_rows(manifests_dir):
    """The rows of a listing on aarch64-linux (the vendored manifests), made once for the module."""
    if not _ROWS:
        _ROWS.update((row["attr"], row) for row in list_all(cudapkgs.import_pkgs(system="aarch64-linux")))
    return _ROWS


@pytest.mark.parametrize("attr, status, version", OWN_META_ON_AARCH64, ids=[a for a, _, _ in OWN_META_ON_AARCH64])
def test_a_package_is_listed_by_its_own_meta_not_by_a_dependencys_error(aarch64_rows, attr, status, version):
    row = aarch64_rows[attr]
    assert row["status"].startswith(status), row
    assert row["version"] == version and row["outputs"] == ["out"], row


def test_what_has_no_wheel_here_is_still_its_own_error(aarch64_rows):
    for name in ("numpy", "markupsafe", "charset-normalizer", "siphash24", "jaxlib"):
        row = aarch64_rows[f"python3Packages.{name}"]
        assert row["status"].startswith(f"error: python3Packages.{name} ") and "no pinned wheel" in row["status"], row
    torch = aarch64_rows["python3Packages.torch"]["status"]
    assert "not available on aarch64-linux" in torch and "markupsafe" not in torch


def test_the_build_still_fails_on_the_dependency(manifests_dir):
    # The dependency's error moved from the listing to the derivation, where Nix reports it too.
    ps = cudapkgs.import_pkgs(system="aarch64-linux").python3Packages
    assert ps.jinja2.version == "3.1.6" and "description" in ps.jinja2.meta
    with pytest.raises(EvalError, match=r"python3Packages\.markupsafe 3\.0\.4: no pinned wheel for CPython .* on aarch64-linux"):
        ps.jinja2.drvPath
    with pytest.raises(CudapkgsError, match=r"not available on aarch64-linux"):  # its own reason comes first
        cudapkgs.import_pkgs(config={"allowUnfree": True}, system="aarch64-linux").python3Packages["torch-bin"].drvPath


def test_list_all_makes_each_wheel_once(manifests_dir, monkeypatch):
    # torchvision's message reads torch-bin of cudaPackages_12_6, 12_8 and 12_9's top levels; their
    # dependencies (ten wheels, their own, triton) were made there too: 4 pins read per wheel, not 1.
    import cudapkgs.pkgs.python_modules as python_modules

    calls: collections.Counter[str] = collections.Counter()
    real = python_modules.pinned_wheel

    def counting(name, *args, **kwargs):
        calls[name] += 1
        return real(name, *args, **kwargs)

    monkeypatch.setattr(python_modules, "pinned_wheel", counting)
    rows = {row["attr"]: row for row in list_all(cudapkgs.import_pkgs(system="x86_64-linux"))}
    assert "no set here has it" in rows["python3Packages.torchvision"]["status"]
    assert calls["filelock"] == calls["markupsafe"] == 1 and max(calls.values()) == 1, calls


def test_dependencies_are_read_when_the_derivation_is_made(manifests_dir):
    from cudapkgs.lib.fixpoint import lazy

    pkgs = cudapkgs.import_pkgs(system="x86_64-linux")
    ps = pkgs.python3Packages
    read: list[str] = []

    def deps():
        read.append("dependencies")
        return [ps.numpy]

    package = ps.buildPythonPackage({"pname": "p", "version": "1", "format": "wheel", "src": ps.numpy.src,
                                     "dependencies": lazy(deps)})
    assert package.name == "p-1" and package.outputs == ["out"] and package.meta == {} and read == []
    assert package.propagatedBuildInputs == [ps.numpy] and read == ["dependencies"]
    assert package.drvPath == package.drvPath  # a derivation is made with them
    eager = ps.buildPythonPackage({"pname": "p", "version": "1", "format": "wheel", "src": ps.numpy.src,
                                   "dependencies": [ps.numpy]})
    assert eager.drvPath == package.drvPath  # a list or a thunk of it: the same derivation
    bad = ps.buildPythonPackage({"pname": "p", "version": "1", "format": "wheel", "src": ps.numpy.src,
                                 "dependencies": lazy(lambda: ps.numpy)})
    with pytest.raises(EvalError, match=r"p\.dependencies: expected a list of packages, got DerivationPackage"):
        bad.drvPath
