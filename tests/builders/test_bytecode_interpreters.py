"""Each Python package set's packages carry byte code compiled by their own interpreter.

Python >= 3.12's compileall starts its workers through multiprocessing's forkserver, whose socket
lives under ``$TMPDIR``; the build's long ``$TMPDIR`` made it fail ("AF_UNIX path too long"), so
every python312/313 package had no ``.pyc`` and Python wrote them into the store when imported as
root.  These tests build a package of each set into a private store whose path is long, then import
it as the store's user: it has a ``.pyc`` for each module, and the store is unchanged after.
"""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from wheel_builders import pure_wheel
from cudapkgs.builders.python_bytecode import SMALL_MODULES, compile_tree, compiler_env

_VERSIONS = {"3.10": "3.10.13", "3.12": "3.12.1", "3.13": "3.13.0"}


def _pyenv_python(version: str) -> str:
    path = os.path.expanduser(f"~/.pyenv/versions/{_VERSIONS[version]}/bin/python{version}")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no Python {version} installed here ({path})")
    return path


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """relative path -> (mode, size, mtime_ns) of everything under `root`."""
    state = {}
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            st = os.lstat(os.path.join(directory, name))
            state[os.path.relpath(os.path.join(directory, name), root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return state


def _magic(python: str) -> bytes:
    out = subprocess.run([python, "-I", "-c", "import importlib.util, sys; sys.stdout.write(importlib.util.MAGIC_NUMBER.hex())"],
                         capture_output=True, text=True, check=True).stdout
    return bytes.fromhex(out)


@pytest.mark.parametrize("modules", [8, SMALL_MODULES + 1], ids=["small tree, -j 1", "process pool, -j 0"])
@pytest.mark.parametrize("version", sorted(_VERSIONS))
def test_the_compiler_works_with_a_long_temporary_directory(version: str, modules: int, tmp_path: Path) -> None:
    """compile_tree with the build's ``$TMPDIR`` 120 characters long compiles every module, checked-hash
    (a tree past the small ones: through compileall's process pool, whose forkserver socket failed)."""
    python = _pyenv_python(version)
    long_tmp = tmp_path / ("t" * 100)
    long_tmp.mkdir()
    site = tmp_path / "out" / "site"
    (site / "pkg").mkdir(parents=True)
    for name in ("__init__", *(f"m{i}" for i in range(modules))):
        (site / "pkg" / f"{name}.py").write_text(f"X = {{'a', 'b', {name!r}}}\n")
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(long_tmp), "TMP": str(long_tmp)}
    log = io.StringIO()
    assert compile_tree(site, tmp_path / "out", env, log, python), log.getvalue()
    tag = {"3.10": "cpython-310", "3.12": "cpython-312", "3.13": "cpython-313"}[version]
    pycs = sorted(p.name for p in (site / "pkg" / "__pycache__").iterdir())
    assert pycs == sorted(f"{n}.{tag}.pyc" for n in ("__init__", *(f"m{i}" for i in range(modules))))
    data = (site / "pkg" / "__pycache__" / f"m0.{tag}.pyc").read_bytes()
    assert data[:4] == _magic(python)
    assert int.from_bytes(data[4:8], "little") == 3  # checked hash-based (PEP 552)
    assert os.listdir(long_tmp) == []  # nothing left in the build's temporary directory


def test_compiler_env_names_the_private_temporary_directory() -> None:
    env = compiler_env({"PATH": "/bin", "TMPDIR": "/long/build", "PYTHONPATH": "/x"}, "/tmp/short")
    assert env == {"PATH": "/bin", "PYTHONHASHSEED": "0", "TMPDIR": "/tmp/short", "TMP": "/tmp/short",
                   "TEMP": "/tmp/short", "TEMPDIR": "/tmp/short"}


def test_a_stopped_compiler_says_why_in_the_log(tmp_path: Path) -> None:
    """A compiler stopping part way (here: its compileall replaced by one that raises) names the error in the log."""
    python = _pyenv_python("3.12")
    site = tmp_path / "site"
    site.mkdir()
    (site / "a.py").write_text("A = 1\n")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "compileall.py").write_text("raise OSError('AF_UNIX path too long')\n")
    log = io.StringIO()
    # PYTHONPATH is dropped by compiler_env, so the fake comes in through the interpreter's own site dir:
    # a wrapper script puts it first.
    wrapper = tmp_path / "python3"
    wrapper.write_text(f"#!/bin/sh\nexport PYTHONPATH={fake}\nexec {python} \"$@\"\n")
    wrapper.chmod(0o755)
    assert not compile_tree(site, tmp_path, {"PATH": "/usr/bin:/bin"}, log, str(wrapper))
    assert "exit status 3: OSError: AF_UNIX path too long" in log.getvalue()


@pytest.mark.parametrize("version", sorted(_VERSIONS))
def test_a_package_of_each_python_set_has_byte_code_and_importing_it_writes_nothing(version: str, tmp_path: Path) -> None:
    """python310/312/313Packages.buildPythonPackage into a private store (a long path, as the shared
    store's ``.tmp`` work directories): a ``.pyc`` of the set's interpreter for each module; importing
    it as this user (root here) writes nothing into the store, and `Store.verify` finds nothing."""
    import cudapkgs
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    _pyenv_python(version)
    store_dir = tmp_path / ("s" * 40) / "store"
    wheel = pure_wheel(tmp_path / "tinyset-1.0-py3-none-any.whl", "tinyset", "1.0",
                       {"tinyset/__init__.py": b"from . import a, b\nNAMES = {'x', 'y'}\n",
                        "tinyset/a.py": b"A = 1\n", "tinyset/b.py": b"B = 2\n"})
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    ps = getattr(pkgs, "python" + version.replace(".", "") + "Packages")
    pkg = ps.buildPythonPackage({"pname": "tinyset", "version": "1.0", "format": "wheel", "src": wheel,
                                 "pythonImportsCheck": ["tinyset"]})
    with Store.open(store_dir) as store:
        realise(store, [pkg.derivation])
    out = Path(pkg.out)
    site = out / "lib" / f"python{version}" / "site-packages"
    tag = "cpython-" + version.replace(".", "")
    assert sorted(p.name for p in (site / "tinyset" / "__pycache__").iterdir()) == \
        [f"__init__.{tag}.pyc", f"a.{tag}.pyc", f"b.{tag}.pyc"]
    python = _pyenv_python(version)
    assert (site / "tinyset" / "__pycache__" / f"a.{tag}.pyc").read_bytes()[:4] == _magic(python)
    before = _tree(out)
    subprocess.run([python, "-s", "-c", "import tinyset; assert tinyset.a.A == 1"], check=True, cwd=tmp_path,
                   env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    assert _tree(out) == before
    with Store.open(store_dir) as store:
        assert store.verify(paths=[str(out)]) == []
