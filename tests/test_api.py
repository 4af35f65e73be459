"""`cudapkgs.api`, the one home of the Python API: every name is the library's own object, is
documented there, is also ``cudapkgs.NAME``, and costs nothing until it is used."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import cudapkgs
from cudapkgs import api

REPO = Path(__file__).resolve().parents[1]


def _fresh_python(code: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return done.stdout.splitlines()


def test_every_name_is_the_object_of_the_module_that_defines_it():
    assert api.__all__ and set(api.__all__) == set(api.EXPORTS)
    for name, module in api.EXPORTS.items():
        defining = importlib.import_module(module)
        expected = defining if module == f"cudapkgs.{name}" else getattr(defining, name)
        assert getattr(api, name) is expected, name
        if name not in api.NOT_AT_TOP:
            assert getattr(cudapkgs, name) is expected, name


def test_a_name_that_is_a_package_of_cudapkgs_is_left_to_it():
    """``cudapkgs.realise`` is the package that builds; `realise` the function is ``cudapkgs.api``'s."""
    import cudapkgs.realise.realise as module

    assert api.realise is module.realise and callable(api.realise)
    assert cudapkgs.realise is sys.modules["cudapkgs.realise"]
    for name in api.EXPORTS:
        if importlib.util.find_spec(f"cudapkgs.{name}") is not None:
            assert name in api.NOT_AT_TOP or api.EXPORTS[name] == f"cudapkgs.{name}", name


def documented_names(doc: str) -> set[str]:
    """The names of the reference entries of `api`'s docstring: the unindented lines after the first
    section title (``Title`` over ``-----``), argument lists and ``-> result`` left out."""
    lines = doc.splitlines()
    first = next(i for i, line in enumerate(lines) if line and set(line) == {"-"})
    names: set[str] = set()
    for i, line in enumerate(lines[first + 1:], first + 1):
        if not line or line.startswith(" ") or set(line) == {"-"} or (i + 1 < len(lines) and set(lines[i + 1] or "x") == {"-"}):
            continue
        while re.search(r"\([^()]*\)", line):
            line = re.sub(r"\([^()]*\)", "", line)
        line = re.sub(r"\s*->\s*[\w\[\]]+", "", line)
        names.update(part.strip() for part in line.split(","))
    return names


def test_every_name_is_documented_and_every_documented_name_exists():
    documented = documented_names(api.__doc__ or "")
    assert {"import_pkgs", "get_static", "version_at_least", "ConfigError", "BuildFailed"} <= documented
    assert documented == set(api.EXPORTS), (sorted(set(api.EXPORTS) - documented), sorted(documented - set(api.EXPORTS)))


def test_importing_cudapkgs_imports_nothing_else():
    out = _fresh_python("import sys, cudapkgs; print(sorted(m for m in sys.modules if m.startswith('cudapkgs')));"
                        "print('typing' in sys.modules)")
    assert out == ["['cudapkgs']", "False"]


def test_a_name_loads_only_what_defines_it():
    out = _fresh_python("import sys; from cudapkgs.api import lazy; "
                        "print(sorted(m for m in sys.modules if m.startswith('cudapkgs'))); "
                        "from cudapkgs.api import mk_derivation; "
                        "print(sorted(m for m in ('cudapkgs.stdenv', 'cudapkgs.top_level', 'cudapkgs.store.store', "
                        "'cudapkgs.realise.realise', 'cudapkgs.old_paths', 'sqlite3') if m in sys.modules))")
    assert out == ["['cudapkgs', 'cudapkgs.api', 'cudapkgs.lib', 'cudapkgs.lib.errors', 'cudapkgs.lib.lazy']",
                   "['cudapkgs.stdenv']"]


def test_a_package_file_written_against_the_api_builds_its_package(tmp_path, manifests_dir, monkeypatch):
    from cudapkgs.top_level import clear_cache
    from cudapkgs.user_files import package_file_overlay

    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    (tmp_path / "mine.py").write_text(
        "from cudapkgs.api import get_lib, lazy, licenses, mk_derivation, version_at_least\n"
        "def mine(config, cudaPackages):\n"
        "    return mk_derivation(config, lambda final: {\n"
        "        'pname': 'mine', 'version': '1.0', 'meta': {'license': licenses.mit},\n"
        "        'buildInputs': [get_lib(cudaPackages.cuda_cudart)],\n"
        "        'isNew': lazy(lambda: version_at_least(cudaPackages.cudaMajorMinorVersion, '12.0'))})\n"
    )
    pkgs = api.import_pkgs(config={"allowUnfree": True}, system="x86_64-linux",
                           overlays=[package_file_overlay([tmp_path / "mine.py"])])
    mine = pkgs.mine
    assert mine.version == "1.0" and mine.isNew is True and mine.meta["license"] is api.licenses.mit
    assert mine.drvPath.endswith("-mine-1.0.drv")
    assert [p.rsplit("-", 1)[1] for p in mine.drvAttrs["buildInputs"]] == ["lib"]  # get_lib: the lib output alone
