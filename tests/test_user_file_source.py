"""A user's Python file runs from the bytes that were read (and allowed), never from byte code.

`user_files.load_module` imported through `SourceFileLoader`, which takes
``__pycache__/NAME.cpython-3XX.pyc`` when that file says it is valid: an "unchecked-hash" ``.pyc``
(PEP 552) is used without reading the source at all, and git carries one.  So the allowed digest
covered ``pk.py`` while the ``.pyc`` ran, and adding one after allow needed no new allow (issue 30,
item 2).  Same for ``-f FILE`` and the ``overlays`` key.
"""

from __future__ import annotations

import inspect
import json
import py_compile
import sys
import textwrap
from pathlib import Path

import pytest

from cudapkgs.cli import main
from cudapkgs.project import check_allowed, evaluate_project, load_project
from cudapkgs.top_level import clear_cache
from cudapkgs.user_files import UserFileError, load_module, package_file_overlay

ALLOWED = """\
    from cudapkgs.stdenv import mk_derivation

    def hello(config):
        return mk_derivation(config, {"pname": "hello", "version": "1.0", "installPhase": 'mkdir -p "$out"'})

    def overlay(final, prev):
        return {"greeting": "allowed"}
"""

#: What the planted byte code was compiled from: it leaves RAN beside itself and changes the version.
PLANTED = """\
    import os
    open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "RAN"), "w").write("byte code ran")
    from cudapkgs.stdenv import mk_derivation

    def hello(config):
        return mk_derivation(config, {"pname": "hello", "version": "6.6.6", "installPhase": 'mkdir -p "$out"'})

    def overlay(final, prev):
        return {"greeting": "planted"}
"""


def _plant_unchecked_pyc(source: Path, tmp_path: Path) -> Path:
    """``__pycache__/<stem>.<tag>.pyc`` beside `source`, compiled from PLANTED as an unchecked-hash
    pyc (PEP 552: flags 0b01, so the import system never reads the source to check it)."""
    other = tmp_path / "planted-source" / source.name
    other.parent.mkdir(exist_ok=True)
    other.write_text(textwrap.dedent(PLANTED))
    pyc = source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
    py_compile.compile(str(other), cfile=str(pyc), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01
    return pyc


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifests_dir: Path) -> Path:
    """A cloned repository whose cudapkgs.toml names pk.py (a package file) and ov.py (an overlay)."""
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    root = tmp_path / "repo"
    root.mkdir()
    (root / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["pk.py"]\n[config]\noverlays = ["ov.py"]\n')
    (root / "pk.py").write_text(textwrap.dedent(ALLOWED))
    (root / "ov.py").write_text(textwrap.dedent(ALLOWED))
    monkeypatch.chdir(root)
    return root


def _evaluate(root: Path) -> tuple[str, str]:
    env = evaluate_project(load_project(root / "cudapkgs.toml"))
    return env.packages["hello"].version, env.pkgs.greeting


def test_a_pyc_in_the_repository_before_allow_never_runs(repo: Path, tmp_path: Path, capsys) -> None:
    """git carries the .pyc; the user reviews pk.py and ov.py, allows, and the source runs."""
    for name in ("pk.py", "ov.py"):
        _plant_unchecked_pyc(repo / name, tmp_path)
    assert run(capsys, "allow")[0] == 0
    assert _evaluate(repo) == ("1.0", "allowed")
    code, out, err = run(capsys, "build", "--dry-run")
    assert code == 0, err
    assert not (repo / "RAN").exists()


def test_a_pyc_added_after_allow_changes_nothing(repo: Path, tmp_path: Path, capsys) -> None:
    assert run(capsys, "allow")[0] == 0
    for name in ("pk.py", "ov.py"):
        _plant_unchecked_pyc(repo / name, tmp_path)
    assert _evaluate(repo) == ("1.0", "allowed")
    code, out, err = run(capsys, "shell", "--print-env")
    assert code == 0, err
    assert not (repo / "RAN").exists()


def test_no_byte_code_is_written_beside_a_user_file(repo: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as most users run (PYTHONDONTWRITEBYTECODE unset)
    assert run(capsys, "allow")[0] == 0
    assert _evaluate(repo) == ("1.0", "allowed")
    code, out, _ = run(capsys, "eval", "--json", "-f", str(repo / "pk.py"), "hello.version")
    assert code == 0 and json.loads(out) == "1.0"
    assert not (repo / "__pycache__").exists()


def test_a_package_file_and_an_overlay_file_ignore_a_planted_pyc(tmp_path: Path, capsys, manifests_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``-f FILE`` and the user's own ``overlays`` key: no project, no allow, the source alone."""
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    pk = tmp_path / "pk.py"
    pk.write_text(textwrap.dedent(ALLOWED))
    _plant_unchecked_pyc(pk, tmp_path)
    code, out, err = run(capsys, "eval", "--json", "-f", str(pk), "hello.version")
    assert code == 0 and json.loads(out) == "1.0", err
    config = tmp_path / "config.toml"
    config.write_text(f'overlays = ["{pk}"]\n')
    code, out, err = run(capsys, "eval", "--json", "--config", str(config), "greeting")
    assert code == 0 and json.loads(out) == "allowed", err
    assert not (tmp_path / "RAN").exists()


def test_the_bytes_run_are_the_bytes_allowed(repo: Path, capsys) -> None:
    """The files were hashed by the check and imported a moment later; a write in between ran unallowed code."""
    assert run(capsys, "allow")[0] == 0
    check_allowed(load_project(repo / "cudapkgs.toml"))  # the check done, the import not yet
    (repo / "pk.py").write_text(textwrap.dedent(PLANTED))
    with pytest.raises(UserFileError, match=r"pk\.py: its contents are not the ones you allowed .*nothing of it "
                                            r"was run; review it, then run: cudapkgs allow .*cudapkgs\.toml"):
        package_file_overlay([repo / "pk.py"])
    with pytest.raises(UserFileError, match="not the ones you allowed"):
        load_module("pk.py")  # any spelling of the path
    assert not (repo / "RAN").exists()
    with pytest.raises(UserFileError, match="not the ones you allowed"):
        load_module(repo / "ov.py", sha256="sha256:" + "0" * 64)


def test_the_source_shown_is_the_source_that_ran(tmp_path: Path) -> None:
    """Tracebacks and a Python phase's hashed source text (`inspect.getsource`) come from the bytes run,
    not from the file read again."""
    f = tmp_path / "phases.py"
    f.write_text("def build(attrs, env, work, outputs):\n    return 'first'\n")
    module = load_module(f)
    f.write_text("def build(attrs, env, work, outputs):\n    return 'second, longer than the first'\n")
    assert inspect.getsource(module.build) == "def build(attrs, env, work, outputs):\n    return 'first'\n"
    assert module.build(None, None, None, None) == "first"
    assert load_module(f).build(None, None, None, None) == "second, longer than the first"  # an edit runs again
    with pytest.raises(UserFileError, match=r"big\.py: is larger than"):
        big = tmp_path / "big.py"
        with big.open("wb") as handle:
            handle.truncate((64 << 20) + 1)
        load_module(big)
