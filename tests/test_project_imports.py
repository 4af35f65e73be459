"""A project's Python file that imports a sibling module (issue 30 follow-up, item 6).

The sibling was found through the import system: never compared with what the user allowed (a git
pull could change it with no new allow), and an "unchecked-hash" ``.pyc`` beside it ran in its place.
Now a module found in the project's work tree is imported only when it is one of the project's
allowed Python files (listed in ``files``), from the bytes compared with the allowed digest; any
other is an ImportError naming it and the fix.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from cudapkgs.cli import main
from cudapkgs.project import evaluate_project, load_project
from cudapkgs.top_level import clear_cache
from cudapkgs.user_files import UserFileError

from test_user_file_source import _plant_unchecked_pyc

PACKAGE_FILE = """\
    import os, sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import {helper}
    from cudapkgs.stdenv import mk_derivation

    def hello(config):
        return mk_derivation(config, {{"pname": "hello", "version": {helper}.VERSION, "installPhase": 'mkdir -p "$out"'}})
"""
HELPER = """\
    import os
    open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "HELPER-RAN"), "a").write("ran\\n")
    VERSION = "{version}"
"""


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifests_dir: Path):
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.setattr(sys, "path", list(sys.path))  # the package file puts its directory there
    # The guard this process installs (a fresh one: it notes the interpreter's directories when made).
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if type(f).__name__ != "_ProjectImportGuard"])
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as most users run
    helper = f"helper_{uuid.uuid4().hex[:12]}"  # a name no other test imported
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".git").mkdir()  # a work tree: its root is what the project controls
    (root / "pk.py").write_text(textwrap.dedent(PACKAGE_FILE.format(helper=helper)))
    (root / f"{helper}.py").write_text(textwrap.dedent(HELPER.format(version="1.0")))
    monkeypatch.chdir(root)
    yield root, helper
    sys.modules.pop(helper, None)


def _allow(capsys, root: Path) -> None:
    assert main(["allow", str(root / "cudapkgs.toml")]) == 0, capsys.readouterr().err
    capsys.readouterr()


def test_an_unlisted_sibling_module_is_refused_and_never_runs(repo, capsys) -> None:
    root, helper = repo
    (root / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["pk.py"]\n')
    _allow(capsys, root)
    with pytest.raises(UserFileError, match=rf"pk\.py.*module {helper} would be imported from {root}/{helper}\.py, in "
                                            r"the project's work tree but not one of its allowed Python files; list it "
                                            r"in `files` \(then run cudapkgs allow .*cudapkgs\.toml\)"):
        evaluate_project(load_project(root / "cudapkgs.toml"))
    assert not (root / "HELPER-RAN").exists() and helper not in sys.modules


def test_a_listed_sibling_runs_from_its_allowed_source_never_from_byte_code(repo, tmp_path, capsys) -> None:
    root, helper = repo
    (root / "cudapkgs.toml").write_text(f'packages = ["hello"]\nfiles = ["pk.py", "{helper}.py"]\n')
    planted = _plant_unchecked_pyc(root / f"{helper}.py", tmp_path)  # git carries it: 6.6.6, and RAN left
    _allow(capsys, root)
    env = evaluate_project(load_project(root / "cudapkgs.toml"))
    assert env.packages["hello"].version == "1.0"
    assert not (root / "RAN").exists()
    assert sys.modules[helper].__file__ == str(root / f"{helper}.py")
    assert [p.name for p in (root / "__pycache__").iterdir()] == [planted.name]  # none written beside them


def test_a_listed_sibling_changed_after_allow_is_refused(repo, capsys) -> None:
    root, helper = repo
    (root / "cudapkgs.toml").write_text(f'packages = ["hello"]\nfiles = ["pk.py", "{helper}.py"]\n')
    _allow(capsys, root)
    from cudapkgs.project import check_allowed

    check_allowed(load_project(root / "cudapkgs.toml"))  # the check, then a git pull before the import
    (root / f"{helper}.py").write_text(textwrap.dedent(HELPER.format(version="6.6.6")))
    with pytest.raises(UserFileError, match="not the ones you allowed"):
        evaluate_project(load_project(root / "cudapkgs.toml"), assume_allowed=True)
    assert not (root / "HELPER-RAN").exists()


def test_installed_modules_inside_the_work_tree_are_not_the_projects(repo, capsys, monkeypatch) -> None:
    """A home directory that is a git repository holds the user's site-packages: what is installed
    there imports as before, though it lies in the project's work tree."""
    import site

    root, helper = repo
    user_site = root / "home-site" / "lib" / "python3" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / f"{helper}.py").write_text('VERSION = "2.0"\n')
    (root / f"{helper}.py").unlink()
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(user_site))
    monkeypatch.syspath_prepend(str(user_site))
    (root / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["pk.py"]\n')
    _allow(capsys, root)
    assert evaluate_project(load_project(root / "cudapkgs.toml")).packages["hello"].version == "2.0"
