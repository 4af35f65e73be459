"""No byte code written into the store by an interpreter that reaches it through PYTHONPATH (issue 31 follow-up).

The `pycache_guard` ``.pth`` line runs only where ``site`` processes the environment's own site-packages.
The store's ``python3`` (a link to the host's) with store site-packages on PYTHONPATH, as builds and
``cudapkgs shell --no-venv`` set it, runs no ``.pth`` of the store, with or without ``-S``: run as root
it wrote ``__pycache__/*.pyc`` into the store path (root ignores the read-only modes).  Now the
environment carries ``PYTHONDONTWRITEBYTECODE=1`` when run as root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cudapkgs.hooks import python_path


def _store_package(tmp_path: Path) -> Path:
    out = tmp_path / "store" / "0123456789abcdfghijklmnpqrsvwxyz-demo-1.0"
    site = out / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    (site / "storedemo.py").write_text("VALUE = 42\n")
    for path in (site / "storedemo.py", site, site.parent, site.parent.parent, out):
        path.chmod(0o444 if path.is_file() else 0o555)  # as the store's modes are
    return out


@pytest.mark.parametrize("root, base, expected", [
    (True, {}, "1"),
    (False, {}, None),                                      # another user cannot write the store
    (True, {"PYTHONDONTWRITEBYTECODE": ""}, None),          # the user's own choice is kept as it is
])
def test_the_python_hook_stops_byte_code_as_root(tmp_path, monkeypatch, root, base, expected):
    out = _store_package(tmp_path)
    monkeypatch.setattr(python_path, "_as_root", lambda: root)
    env: dict[str, str] = {}
    python_path.setup(env, SimpleNamespace(host=[str(out)], native=[]), base=base)
    assert env["PYTHONPATH"].startswith(str(out))
    assert env.get("PYTHONDONTWRITEBYTECODE") == expected


def test_no_site_packages_no_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(python_path, "_as_root", lambda: True)
    env: dict[str, str] = {}
    python_path.setup(env, SimpleNamespace(host=[str(tmp_path)], native=[]), base={})
    assert "PYTHONDONTWRITEBYTECODE" not in env


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can write into a read-only store path")
@pytest.mark.parametrize("flags", [[], ["-S"]])
def test_a_bare_interpreter_as_root_writes_no_byte_code_into_the_store(tmp_path, flags):
    out = _store_package(tmp_path)
    env: dict[str, str] = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    python_path.setup(env, SimpleNamespace(host=[str(out)], native=[]), base={})
    done = subprocess.run([sys.executable, *flags, "-c", "import storedemo; print(storedemo.VALUE)"], env=env,
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.stdout.strip() == "42", done.stderr
    assert not list(out.rglob("__pycache__")), "byte code was written into the store path"


def test_the_shell_venv_drops_the_variable_unless_the_user_set_it(tmp_path):
    """In a venv shell the store leaves PYTHONPATH and the venv's .pth guard keeps byte code out of the store:
    root's own code is cached again (the hook's variable is dropped), a user's own setting is kept."""
    from cudapkgs.shell_venv import venv_environment

    site = str(_store_package(tmp_path) / "lib")
    shell = {"PATH": "/usr/bin", "PYTHONPATH": site, "PYTHONDONTWRITEBYTECODE": "1"}
    assert "PYTHONDONTWRITEBYTECODE" not in venv_environment(shell, tmp_path / "venv", [site], base={})
    kept = venv_environment(shell, tmp_path / "venv", [site], base={"PYTHONDONTWRITEBYTECODE": "1"})
    assert kept["PYTHONDONTWRITEBYTECODE"] == "1" and "PYTHONPATH" not in kept
