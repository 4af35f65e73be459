"""A shell's own virtual environment (issue 32, item 2): pip installs there, never into the host's or the
store's site-packages, and the host's dist-packages are not on its sys.path.  Offline: the wheel pip
installs is made here."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from cudapkgs.shell_venv import MARK, ShellVenvError, default_venv_dir, ensure_venv, venv_environment
from cudapkgs.pycache_guard import guard_line

PYTHON = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(
    not os.path.exists(PYTHON) or subprocess.run([PYTHON, "-c", "import venv, ensurepip"], capture_output=True).returncode,
    reason="needs /usr/bin/python3 with venv and ensurepip (Debian/Ubuntu: python3-venv)")


def _wheel(directory: Path, name: str = "shelldemo") -> Path:
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
        for p, d in files.items()) + f"{name}-1.0.dist-info/RECORD,,\n"
    path = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in {**files, f"{name}-1.0.dist-info/RECORD": record.encode()}.items():
            z.writestr(p, d)
    return path


def test_the_shell_venv_layers_on_the_store_and_pip_installs_into_it(tmp_path):
    store = tmp_path / "store"
    site = store / "aaaa-demo-1.0" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "storedemo.py").write_text("WHERE = 'store'\n")
    python = PYTHON
    venv = ensure_venv(tmp_path / "venv", python, [str(site)], str(store))
    assert json.loads((venv / MARK).read_text())["python"] == python
    assert not (venv / ".cudapkgs-shell-venv-unfinished").exists()
    env = venv_environment({"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:/mine", "HOME": str(tmp_path)}, venv, [str(site)])
    assert env["PATH"].startswith(f"{venv}/bin:") and env["VIRTUAL_ENV"] == str(venv) and env["PYTHONPATH"] == "/mine"

    probe = subprocess.run(["python3", "-c", "import sys, storedemo; print(sys.prefix); print(storedemo.WHERE); "
                            "print(any('dist-packages' in p for p in sys.path))"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert probe.stdout.split() == [str(venv), "store", "False"], probe.stderr

    # pip asked to install into the store says so and installs into the venv.
    wheel = _wheel(tmp_path)
    pip = subprocess.run(["pip", "install", "--no-index", "--disable-pip-version-check", "--target",
                          f"{store}/bbbb-mine", str(wheel)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert pip.returncode == 0, pip.stderr
    assert f"is in the store ({store}), which is read-only; installing into this shell's environment {venv}" in pip.stderr
    assert not (store / "bbbb-mine").exists()
    assert list(venv.glob("lib/python3.*/site-packages/shelldemo/__init__.py"))
    imported = subprocess.run(["python3", "-c", "import shelldemo, os; print(shelldemo.__file__)"],
                              capture_output=True, text=True, env=env, cwd=tmp_path)
    assert imported.stdout.startswith(f"{venv}/lib/")

    # Entering again reuses it (what pip installed stays); another store layer rewrites the .pth only.
    other = store / "cccc-other" / "lib" / "python3.11" / "site-packages"
    other.mkdir(parents=True)
    again = ensure_venv(tmp_path / "venv", python, [str(other)], str(store))
    assert again == venv and list(venv.glob("lib/python3.*/site-packages/shelldemo"))
    assert list(venv.glob("lib/python3.*/site-packages/cudapkgs-shell.pth"))[0].read_text() == guard_line(str(store)) + f"{other}\n"

    with pytest.raises(ShellVenvError, match="another interpreter"):
        ensure_venv(tmp_path / "venv", "/usr/bin/python3.99", [str(site)], str(store))


def test_a_planted_link_or_a_foreign_directory_is_refused_and_kept(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(ShellVenvError, match="symbolic link"):
        ensure_venv(tmp_path / "link", PYTHON, [], str(tmp_path / "store"))
    assert list(target.iterdir()) == []
    mine = tmp_path / "myvenv"
    mine.mkdir()
    (mine / "pyvenv.cfg").write_text("home = /usr/bin\n")
    with pytest.raises(ShellVenvError, match="not a shell environment cudapkgs made"):
        ensure_venv(mine, PYTHON, [], str(tmp_path / "store"))
    assert (mine / "pyvenv.cfg").read_text() == "home = /usr/bin\n"


def _killed_while_making(tmp_path, monkeypatch) -> Path:
    """A venv whose making the process died in (nothing cleaned up): its unfinished mark is left."""
    import types

    import cudapkgs.shell_venv as shell_venv

    venv = tmp_path / "venv"

    def killed(*args, **kwargs):
        raise SystemExit("killed")

    with monkeypatch.context() as patched:
        patched.setattr(shell_venv.subprocess, "run", killed)
        patched.setattr(shell_venv, "shutil", types.SimpleNamespace(rmtree=lambda *a, **kw: None))
        with pytest.raises(SystemExit):
            ensure_venv(venv, PYTHON, [], str(tmp_path / "store"))
    return venv


def test_an_unfinished_venv_is_made_again(tmp_path, monkeypatch):
    venv = _killed_while_making(tmp_path, monkeypatch)
    assert (venv / ".cudapkgs-shell-venv-unfinished").is_file()
    (venv / "half").write_text("")
    made = ensure_venv(venv, PYTHON, [], str(tmp_path / "store"))
    assert (made / MARK).is_file() and not (made / "half").exists()
    assert not list(Path(os.environ["XDG_DATA_HOME"]).glob("cudapkgs/shell-venv-making/*"))  # finished: no record


@pytest.mark.parametrize("mark", ["", "cudapkgs is making this shell environment\n" + "0" * 32 + "\n"])
def test_a_planted_unfinished_mark_deletes_nothing(tmp_path, mark):
    """A cloned repository names its own directory with ``--venv``: an unfinished mark it planted there
    (before: any regular file of that name) made cudapkgs remove the whole directory."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "precious.py").write_text("work\n")
    (repo / ".cudapkgs-shell-venv-unfinished").write_text(mark)
    with pytest.raises(ShellVenvError, match=r"not a shell environment cudapkgs made \(its unfinished mark is not one "
                                             r"this user's cudapkgs wrote, so nothing there is deleted\)"):
        ensure_venv(repo, PYTHON, [], str(tmp_path / "store"))
    assert (repo / "src" / "precious.py").read_text() == "work\n"


def test_the_default_venv_is_per_interpreter_and_packages(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path)}
    a = default_venv_dir("/s/python3", ["/s/a/site"], env)
    assert a.parent == tmp_path / "cudapkgs" / "shell-venvs"
    assert a == default_venv_dir("/s/python3", ["/s/a/site"], env)
    assert a != default_venv_dir("/s/python3", ["/s/b/site"], env) != default_venv_dir("/t/python3", ["/s/a/site"], env)


def test_the_shells_pip_imports_nothing_from_the_working_directory(tmp_path):
    """The venv's `pip` was `python -m pip`, which puts the working directory first on sys.path: a
    cloned repository's `pip/` ran when the user typed `pip install` there (issue 30, item 2).  It
    now starts as pip's own console script does, and the venv is made in a private directory."""
    seen = tmp_path / "cwd-seen"
    wrapper = tmp_path / "python3"
    wrapper.write_text(f"#!/bin/sh\npwd >> {seen}\nexec {PYTHON} \"$@\"\n")
    wrapper.chmod(0o755)
    venv = ensure_venv(tmp_path / "venv", str(wrapper), [], str(tmp_path / "store"))
    made_in = seen.read_text().split()
    assert made_in and str(venv) not in made_in and not any(os.path.exists(d) for d in made_in)

    repo = tmp_path / "repo"
    marker = tmp_path / "planted-ran"
    for name in ("pip", "runpy"):
        (repo / name).mkdir(parents=True)
        (repo / name / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
        (repo / name / "__main__.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    env = venv_environment({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, venv, [])
    for command in (["pip", "--version"], ["pip3", "list", "--disable-pip-version-check"]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=repo)
        assert done.returncode == 0, done.stderr
        assert not marker.exists(), (command, marker.read_text())
    assert "pip " in subprocess.run(["pip", "--version"], capture_output=True, text=True, env=env, cwd=repo).stdout


def _returns(call, *fifos: Path) -> bool:
    """Whether `call()` returns (or raises) within 30 s; a FIFO it waits on is then opened for writing
    and closed, so a failing run ends instead of hanging the suite."""
    import threading

    thread = threading.Thread(target=lambda: _swallow(call), daemon=True)
    thread.start()
    thread.join(30)
    hung = thread.is_alive()
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    thread.join(5)
    return not hung


def _swallow(call) -> None:
    try:
        call()
    except ShellVenvError:
        pass


def _vouched_mark(venv: Path) -> None:
    """The mark and the user's record of a venv this user's cudapkgs finished (as `ensure_venv` leaves them)."""
    from cudapkgs.shell_venv import _made_record

    token = os.urandom(16).hex()
    (venv / MARK).write_text(json.dumps({"format": 1, "python": PYTHON, "token": token}))
    record = _made_record(venv)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(token + "\n")


def test_a_planted_mark_naming_this_interpreter_is_not_taken_for_a_venv_cudapkgs_made(tmp_path):
    """`--venv .venv` in a cloned repository whose ``.venv`` holds a mark naming this interpreter: cudapkgs took
    it for its own, wrote its pip guards (which run the repository's ``bin/python``) and layered the shell on
    the repository's site-packages, whose ``.pth`` files run in every ``python`` of the shell.  The mark must
    hold the token recorded in the user's data directory when cudapkgs finished the venv; a venv it makes is
    reused as before."""
    venv = tmp_path / "repo" / ".venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    (site / "evil.pth").write_text("import os; open('ran', 'w')\n")
    for mark in ({"format": 1, "python": PYTHON}, {"format": 1, "python": PYTHON, "token": "0" * 32}):
        (venv / MARK).write_text(json.dumps(mark))
        with pytest.raises(ShellVenvError, match="not a shell environment this user's cudapkgs made"):
            ensure_venv(venv, PYTHON, ["/s/site"], str(tmp_path / "store"))
        assert sorted(p.name for p in (venv / "bin").iterdir()) == [] and not (site / "cudapkgs-shell.pth").exists()
    made = ensure_venv(tmp_path / "mine", PYTHON, [], str(tmp_path / "store"))
    assert ensure_venv(made, PYTHON, ["/s/site"], str(tmp_path / "store")) == made  # reused, its record found
    copy = tmp_path / "copied"
    import shutil

    shutil.copytree(made, copy, symlinks=True)  # the same mark elsewhere: not vouched for at that path
    with pytest.raises(ShellVenvError, match="not a shell environment this user's cudapkgs made"):
        ensure_venv(copy, PYTHON, [], str(tmp_path / "store"))


def test_a_fifo_in_a_named_venv_is_never_waited_on(tmp_path):
    """`--venv DIR` may name a cloned repository's directory: a FIFO at the mark, or at the ``.pth`` of a
    venv that names this interpreter, made `cudapkgs shell` wait for a writer for ever."""
    planted = tmp_path / "planted"
    planted.mkdir()
    os.mkfifo(planted / MARK)
    assert _returns(lambda: ensure_venv(planted, PYTHON, [], str(tmp_path / "store")), planted / MARK)
    with pytest.raises(ShellVenvError, match="not a shell environment cudapkgs made"):
        ensure_venv(planted, PYTHON, [], str(tmp_path / "store"))

    reused = tmp_path / "reused"
    site = reused / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (reused / "bin").mkdir()
    _vouched_mark(reused)  # a venv this user's cudapkgs made, whose .pth became a FIFO
    os.mkfifo(site / "cudapkgs-shell.pth")
    assert _returns(lambda: ensure_venv(reused, PYTHON, ["/s/site"], str(tmp_path / "store")), site / "cudapkgs-shell.pth")
    assert (site / "cudapkgs-shell.pth").read_text() == guard_line(str(tmp_path / "store")) + "/s/site\n"  # the FIFO replaced by the file


@pytest.mark.parametrize("linked", ["bin", "lib"])
def test_a_named_venv_with_a_linked_directory_is_refused_and_nothing_written_there(tmp_path, linked):
    """A repository's ``.venv`` whose mark names this interpreter and whose ``bin`` (or ``lib``) is a link to
    another directory: the ``pip`` guards (running the repository's ``bin/python``) and the ``.pth`` were
    written there (``~/.local/bin/pip``)."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "python3.11" / "site-packages").mkdir(parents=True)
    venv = tmp_path / "repo" / ".venv"
    venv.mkdir(parents=True)
    _vouched_mark(venv)  # even one this user's cudapkgs made (a planted mark alone is refused before: below)
    if linked == "bin":
        (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        (venv / "bin").symlink_to(elsewhere)
    else:
        (venv / "bin").mkdir()
        (venv / "lib").symlink_to(elsewhere)
    before = sorted(p.relative_to(elsewhere) for p in elsewhere.rglob("*"))
    with pytest.raises(ShellVenvError, match=f"{linked} is a symbolic link"):
        ensure_venv(venv, PYTHON, ["/s/site"], str(tmp_path / "store"))
    assert sorted(p.relative_to(elsewhere) for p in elsewhere.rglob("*")) == before


def test_an_unfinished_mark_vouched_for_by_another_users_record_deletes_nothing(tmp_path, monkeypatch, nobody_uid):
    """The token record is what lets cudapkgs delete a directory: one another user wrote (a shared or
    group-writable $XDG_DATA_HOME), with a mark holding the same token, made it remove that directory."""
    venv = _killed_while_making(tmp_path, monkeypatch)
    (venv / "precious").write_text("work\n")
    (record,) = Path(os.environ["XDG_DATA_HOME"]).glob("cudapkgs/shell-venv-making/*")
    os.chown(record, nobody_uid, -1)
    with pytest.raises(ShellVenvError, match="its unfinished mark is not one this user's cudapkgs wrote"):
        ensure_venv(venv, PYTHON, [], str(tmp_path / "store"))
    assert (venv / "precious").read_text() == "work\n"
    os.chown(record, 0, -1)
    made = ensure_venv(venv, PYTHON, [], str(tmp_path / "store"))  # yours: made again
    assert (made / MARK).is_file() and not (made / "precious").exists()


def _store_python(tmp_path: Path) -> tuple[str, Path]:
    """A store directory holding one interpreter package: ``<store>/<hash>-python3/bin/python3`` (a link
    to the host's, as the set's python3 is the host's CPython behind a store path)."""
    store = tmp_path / "store"
    bin_dir = store / "0c6kzph7l0dcbyfpd6qgmmpdkbisaqbx-python3-3.12" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(PYTHON)
    return str(store), bin_dir


def test_an_interpreter_alone_gets_a_venv_so_pip_is_not_the_hosts(tmp_path):
    """`cudapkgs shell python3 cmake`: no Python package, so no PYTHONPATH; the shell got no venv and
    `pip` was the host's (a new user's report: `pip install` went into pyenv's Python, and `--venv DIR`
    was ignored without a word).  Now the store's interpreter alone gets the shell's venv."""
    import argparse

    from cudapkgs.cli.shell import _with_venv

    store, bin_dir = _store_python(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    venv = tmp_path / "venv"
    out = _with_venv(argparse.Namespace(venv=str(venv), no_venv=False), env, store)
    assert out["VIRTUAL_ENV"] == str(venv)
    assert out["PATH"].split(":")[0] == str(venv / "bin")
    assert (venv / "bin" / "pip").is_file() and json.loads((venv / MARK).read_text())["python"] == str(bin_dir / "python3")
    listed = subprocess.run([str(venv / "bin" / "pip"), "--version"], capture_output=True, text=True, env=out, timeout=120)
    assert listed.returncode == 0 and str(venv) in listed.stdout  # the venv's pip, not the host's


def test_venv_dir_without_the_stores_python_is_refused(tmp_path):
    import argparse

    from cudapkgs.cli.shell import _with_venv
    from cudapkgs.errors import UsageError

    store, _ = _store_python(tmp_path)
    env = {"PATH": "/usr/bin:/bin"}  # the host's python3 only
    args = argparse.Namespace(venv=str(tmp_path / "venv"), no_venv=False)
    with pytest.raises(UsageError, match="no python3 from the store"):
        _with_venv(args, env, store)
    assert not (tmp_path / "venv").exists()
    assert _with_venv(argparse.Namespace(venv=None, no_venv=False), env, store) == env  # nothing asked, nothing made


def test_the_pip_guard_runs_no_text_of_the_venvs_path(tmp_path):
    """The venv's path was written raw into the ``pip`` guard (a comment, a double-quoted ``echo``): a
    ``--venv DIR`` named by a cloned repository or an archive ran ``$(...)`` or a line after a newline
    whenever ``pip`` ran.  Quoted now; a path with a newline is refused (pyvenv.cfg takes it raw too)."""
    ran = tmp_path / "ran"
    store = tmp_path / "st@VENV@ $x"
    venv = tmp_path / f"v$(touch {ran}1)`touch {ran}2`@STORE@ \"x"
    made = ensure_venv(venv, PYTHON, [], str(store))
    env = venv_environment({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, made, [])
    done = subprocess.run(["pip", "install", "--no-index", "--disable-pip-version-check", "--target", f"{store}/x",
                           str(_wheel(tmp_path))], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"is in the store ({store}), which is read-only; installing into this shell's environment {made} " in done.stderr
    assert not list(tmp_path.glob("ran*")) and not (store / "x").exists()
    with pytest.raises(ShellVenvError, match="newline"):
        ensure_venv(tmp_path / f"w\ntouch {ran}3\n", PYTHON, [], str(store))
    assert not list(tmp_path.glob("ran*")) and not list(tmp_path.glob("w*"))


def test_a_venv_inside_the_store_is_refused(tmp_path):
    """``--venv $STORE/env``: an entry of the store directory that is no registered store path is junk to
    `cudapkgs gc`, which deleted the venv with what pip had installed there.  Refused, through a link too."""
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "to-store").symlink_to(store)
    for where in (store / "env", tmp_path / "to-store" / "env", store / "a" / "b"):
        with pytest.raises(ShellVenvError, match="inside the store"):
            ensure_venv(where, PYTHON, [], str(store))
    assert list(store.iterdir()) == []


def test_the_pip_guard_sees_the_store_however_it_is_spelled(tmp_path):
    """The guard compared `--target`'s text with the store's: ``--tar DIR`` (optparse takes a prefix),
    ``PIP_TARGET``, a relative path, ``..`` or a link into the store installed there (the store's directory is
    writable: a package landed beside the store paths, junk to `cudapkgs gc`)."""
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "to-store").symlink_to(store)
    venv = ensure_venv(tmp_path / "venv", PYTHON, [], str(store))
    env = venv_environment({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, venv, [])
    wheel = str(_wheel(tmp_path))
    base = ["pip", "install", "--no-index", "--disable-pip-version-check", "--force-reinstall", "-q"]
    for extra, more_env in ((["--tar", str(store)], {}), (["--targe=store/x"], {}), (["-t", "venv/../store/y"], {}),
                            (["--target", "to-store/z"], {}), ([], {"PIP_TARGET": str(store)})):
        done = subprocess.run(base + extra + [wheel], capture_output=True, text=True, env={**env, **more_env}, cwd=tmp_path)
        assert done.returncode == 0, (extra, done.stderr)
        assert "is in the store" in done.stderr, extra
        assert list(store.iterdir()) == [], extra
    assert list(venv.glob("lib/python3.*/site-packages/shelldemo/__init__.py"))
    elsewhere = subprocess.run(base + ["--target", "mine", wheel], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert elsewhere.returncode == 0 and "is in the store" not in elsewhere.stderr
    assert (tmp_path / "mine" / "shelldemo" / "__init__.py").is_file()
