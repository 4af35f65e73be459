"""builders.python: buildPythonPackage (PEP 517, no network) with a propagated dependency, and withPackages."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store

_CHECK = ["/usr/bin/python3", "-c", "import setuptools, wheel, pip"]


def _has_backend() -> bool:
    try:
        return subprocess.run(_CHECK, capture_output=True, timeout=60).returncode == 0
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _has_backend(), reason="/usr/bin/python3 lacks setuptools, wheel or pip")

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"
[project]
name = "{name}"
version = "1.0"
[project.scripts]
{name}-hello = "{name}:main"
"""


def _project(root: Path, name: str, body: str) -> Path:
    src = root / name
    src.mkdir()
    (src / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    (src / f"{name}.py").write_text(body)
    return src


def test_python_packages_build_propagate_and_join(tmp_path, manifests_dir):
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    ps = pkgs.python3Packages
    base = ps.buildPythonPackage({
        "pname": "basepkg", "version": "1.0",
        "src": _project(tmp_path, "basepkg", "VALUE = 41\ndef main():\n    print('base')\n"),
        "pythonImportsCheck": ["basepkg"],
    })
    top = ps.buildPythonPackage({
        "pname": "toppkg", "version": "1.0",
        "src": _project(tmp_path, "toppkg", "import basepkg\ndef main():\n    print(basepkg.VALUE + 1)\n"),
        "dependencies": [base],
        "pythonImportsCheck": ["toppkg"],  # needs basepkg: found through the dependency's PYTHONPATH
    })
    env = ps.withPackages(lambda p: [top])
    with Store.open(store_dir) as store:
        realise(store, [env.derivation])
        assert base.out in store.closure([env.out])  # propagated: toppkg brings basepkg
    site = Path(top.out, "lib", f"python{ps.pythonVersion}", "site-packages")
    assert (site / "toppkg.py").is_file() and Path(top.out, "bin", "toppkg-hello").is_file()
    assert Path(top.out, "nix-support", "propagated-build-inputs").read_text().split() == [base.out]
    run = subprocess.run(["env", "-i", f"{env.out}/bin/python3", "-c", "import toppkg; toppkg.main()"],
                         capture_output=True, text=True)
    assert run.stdout == "42\n", run.stderr


def test_a_failing_import_check_fails_the_build(tmp_path, manifests_dir):
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    bad = pkgs.python3Packages.buildPythonPackage({
        "pname": "badpkg", "version": "1.0",
        "src": _project(tmp_path, "badpkg", "import not_a_module_anywhere\n"),
        "pythonImportsCheck": ["badpkg"],
    })
    with Store.open(store_dir) as store:
        with pytest.raises(Exception, match="not_a_module_anywhere"):
            realise(store, [bad.derivation])
