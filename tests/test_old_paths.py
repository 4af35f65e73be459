"""Import paths from before the layout move (`cudapkgs.old_paths`): released ones still work, the
same objects, with a DeprecationWarning naming the new path; moved internal modules fail naming
theirs.  On the layout before this (86cebe7) every old path failed with a bare ModuleNotFoundError."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs import old_paths

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"


def _forget(monkeypatch, dotted: str) -> None:
    """Make `dotted` import afresh in this test (restored afterwards)."""
    monkeypatch.delitem(sys.modules, dotted, raising=False)
    parent, _, leaf = dotted.rpartition(".")
    monkeypatch.delattr(sys.modules[parent], leaf, raising=False)


def _file_of(dotted: str) -> Path:
    return SRC.joinpath(*dotted.split("."))


@pytest.mark.parametrize("old, new", sorted(old_paths.RELEASED.items()))
def test_a_released_old_path_is_the_new_module_with_a_warning(old, new, monkeypatch):
    _forget(monkeypatch, old)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import from {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new and module.__spec__.name == new  # the new module untouched


def test_the_warning_names_the_importing_line_and_the_names_are_the_same_objects(monkeypatch):
    """As a package file wrote it before the move (README, examples/ of cfcc37b)."""
    _forget(monkeypatch, "cudapkgs.fixpoint")
    namespace: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile("from cudapkgs.fixpoint import lazy\n"  # noqa: S102 - a fixed text
                     "from cudapkgs.stdenv import mk_derivation\n"
                     "from cudapkgs.store.store import Store\n"
                     "from cudapkgs.store.caches import open_cache\n", "mypkgs.py", "exec"), namespace)
    assert [(w.category, w.filename, w.lineno) for w in caught] == [(DeprecationWarning, "mypkgs.py", 1)]
    from cudapkgs import api

    for name in ("lazy", "mk_derivation", "Store", "open_cache"):
        assert namespace[name] is getattr(api, name)


@pytest.mark.parametrize("old, new", sorted(old_paths.INTERNAL.items()))
def test_a_moved_internal_module_fails_naming_the_new_one(old, new):
    parent, _, leaf = old.rpartition(".")
    with pytest.raises(ImportError, match=rf"No module named '{old}': it moved to {new} ") as error:
        importlib.import_module(old)
    assert error.value.name == old
    with pytest.raises(ImportError, match=rf"it moved to {new} "):  # the message survives a from-import
        exec(f"from {parent} import {leaf}", {})  # noqa: S102 - names of the table
    for module in new.replace(" and ", ", ").split(", "):
        importlib.import_module(module)  # the table names modules that exist


def test_old_paths_name_no_file_that_exists():
    """A file at an old path would shadow the table: the old clutter back, or a stale entry."""
    for old in [*old_paths.RELEASED, *old_paths.INTERNAL]:
        path = _file_of(old)
        assert not path.with_suffix(".py").exists() and not (path / "__init__.py").exists(), old
    for new in [*old_paths.RELEASED.values(), *old_paths.INTERNAL.values()]:
        assert new not in old_paths.RELEASED and new not in old_paths.INTERNAL


def test_names_that_left_the_old_elf_module_fail_naming_their_module():
    from cudapkgs import elf

    for module, names in old_paths.NAMES.items():
        for name, new in names.items():
            assert hasattr(importlib.import_module(new), name), (name, new)
            assert not _file_of(module).joinpath(f"{name}.py").exists(), name  # no submodule of that name
            with pytest.raises(ImportError, match=rf"cannot import name '{name}' from '{module}': it moved to {new} "):
                exec(f"from {module} import {name}", {})  # noqa: S102
    with pytest.raises(ImportError, match="it moved to cudapkgs.elf.read"):
        from cudapkgs.elf import read_elf  # noqa: F401
    from cudapkgs.elf import patch  # the submodule, never the old function's message

    assert patch is sys.modules["cudapkgs.elf.patch"]
    assert not hasattr(elf, "no_such_name") and getattr(elf, "no_such_name", 1) == 1


def test_an_unknown_module_is_still_python_s_own_error():
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'cudapkgs.no_such_module'$") as error:
        importlib.import_module("cudapkgs.no_such_module")
    assert error.value.name == "cudapkgs.no_such_module"
    assert sum(getattr(f, "cudapkgs_old_paths", False) for f in sys.meta_path) == 1
    importlib.reload(cudapkgs)  # installed once, however often the package runs
    assert sum(getattr(f, "cudapkgs_old_paths", False) for f in sys.meta_path) == 1
    ours = next(i for i, f in enumerate(sys.meta_path) if getattr(f, "cudapkgs_old_paths", False))
    assert ours > sys.meta_path.index(importlib.machinery.PathFinder)  # asked only when the files have no such module


def test_a_package_file_with_an_old_path_builds_and_its_line_is_warned_about(tmp_path, manifests_dir):
    """`cudapkgs eval -f`: the warning names the file and line (Python would hide it: not __main__)."""
    (tmp_path / "old.py").write_text(textwrap.dedent("""\
        from cudapkgs.fixpoint import lazy
        from cudapkgs.stdenv import mk_derivation

        def hello(config):
            return mk_derivation(config, {"pname": "hello", "version": "1.0", "x": lazy(lambda: 1)})
        """))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS",)}
    env.update(PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
               CUDAPKGS_STORE=str(tmp_path / "store"))
    done = subprocess.run([sys.executable, "-m", "cudapkgs", "eval", "-f", "old.py", "hello.version"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '"1.0"'
    assert "old.py:1: DeprecationWarning: cudapkgs.fixpoint is deprecated: import from cudapkgs.lib.fixpoint" in done.stderr
    assert done.stderr.count("DeprecationWarning") == 1


def test_the_finder_leaves_sys_meta_path_at_exit():
    """Held there into the interpreter's shutdown, it kept every module of an evaluation alive and
    made each `cudapkgs eval` about 1 ms slower to exit (docs/bench-startup.md)."""
    code = ("import atexit, sys, cudapkgs; mark = lambda: any(getattr(f, 'cudapkgs_old_paths', False) for f in sys.meta_path); "
            "before = mark(); atexit._run_exitfuncs(); print(before, mark())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["True", "False"]
