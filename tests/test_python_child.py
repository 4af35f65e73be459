"""Every Python child process cudapkgs starts imports nothing from the user's working directory.

``python -m M`` and ``python -c CODE`` put the working directory first on sys.path, and so does an
empty ``PYTHONPATH`` entry; a cloned repository's ``pip/``, ``distributed/``, ``cudapkgs/``,
``runpy.py`` or ``resource.py`` ran in place of the real one (issue 30, item 1).  Each test plants
such a module, which writes a marker file when imported, in the working directory of a command
that starts Python, and asserts that the marker is never written and the real module ran.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wheel_builders import pure_wheel
from cudapkgs.python_child import own_python, private_directory

try:  # imported here, before a test stands in a directory holding a distributed/ of its own
    import distributed
    import distributed.cli.dask_worker  # noqa: F401
except ImportError:  # pragma: no cover - the [test] extra installs it
    distributed = None

#: An empty entry in PYTHONPATH names the working directory, even under -P.
_LEAKY_PYTHONPATH = ":"


def _plant(directory: Path, module: str, marker: Path) -> None:
    """A module (a package when `module` has no ``.py``) in `directory` that writes `marker` when imported."""
    body = f"open({str(marker)!r}, 'a').write({module!r} + '\\n')\nraise RuntimeError('planted module ran')\n"
    if module.endswith(".py"):
        (directory / module).write_text(body)
    else:
        (directory / module).mkdir()
        (directory / module / "__init__.py").write_text(body)


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A working directory holding pip/, distributed/, cudapkgs/, runpy.py and resource.py that write `marker`."""
    cwd = tmp_path / "clone"
    cwd.mkdir()
    marker = tmp_path / "planted-code-ran"
    for module in ("pip", "distributed", "cudapkgs", "runpy.py", "resource.py", "compileall.py"):
        _plant(cwd, module, marker)
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PYTHONPATH", _LEAKY_PYTHONPATH)
    return cwd, marker


def _ran(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""


def test_private_directory_is_empty_private_and_removed() -> None:
    with private_directory() as cwd:
        assert os.listdir(cwd) == []
        assert os.stat(cwd).st_mode & 0o777 == 0o700
        Path(cwd, "left").write_text("by a child")
    assert not os.path.exists(cwd)


@pytest.mark.parametrize("python", ["<this>", "<3.10>"])
def test_start_up_imports_nothing_from_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             python: str) -> None:
    """What `python_child` relies on: ``site`` (sitecustomize, usercustomize, .pth files) and the codecs
    are imported before the working directory is put on sys.path, in 3.10 as in this interpreter."""
    interpreters = _interpreters()
    if python == "<3.10>" and len(interpreters) < 2:
        pytest.skip("no Python 3.10 installed here (~/.pyenv/versions/3.10.13 or /usr/bin/python3.10)")
    executable = interpreters[0] if python == "<this>" else interpreters[1]
    marker = tmp_path / "ran"
    cwd = tmp_path / "clone"
    cwd.mkdir()
    for module in ("sitecustomize.py", "usercustomize.py", "encodings", "codecs.py", "site.py", "abc.py", "io.py"):
        _plant(cwd, module, marker)
    (cwd / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'a').write('pth')\n")
    monkeypatch.chdir(cwd)
    done = subprocess.run([executable, "-c", "import sys; print(sys.path[0] == '')"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "True\n", done.stderr
    assert _ran(marker) == ""


def test_own_python_drops_the_working_directory(planted: tuple[Path, Path]) -> None:
    cwd, marker = planted
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(own_python("-m", "pip", "--version"), env=env, capture_output=True, text=True)  # in `cwd`
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pip ")
    assert _ran(marker) == ""
    # An empty PYTHONPATH entry names the working directory under -P too: hence the private one.
    done = subprocess.run(own_python("-m", "pip", "--version"), capture_output=True, text=True)
    assert "planted module ran" in done.stderr and _ran(marker) == "pip\n"
    marker.unlink()
    with private_directory() as private:
        done = subprocess.run(own_python("-m", "pip", "--version"), cwd=private, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _ran(marker) == ""


def test_pip_download_of_a_wheel_does_not_run_a_planted_pip(planted: tuple[Path, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`cudapkgs build` of a redist package fetches NVIDIA's wheel with pip (fetch/wheels.py)."""
    from cudapkgs.errors import FetchError
    from cudapkgs.fetch.wheels import WheelSource

    cwd, marker = planted
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the real pip finds nothing, at once, with no network
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-links"))
    (tmp_path / "no-links").mkdir()
    with pytest.raises(FetchError, match="pip download nvidia-nothing-cu12==1.0 failed"):
        WheelSource(cache_dir=tmp_path / "wheels").download_wheel("nvidia-nothing-cu12", "1.0", "x86_64")
    assert _ran(marker) == ""


def test_fetch_pypi_pip_download_does_not_run_a_planted_pip(planted: tuple[Path, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from cudapkgs.errors import FetchError
    from cudapkgs.fetch.pypi import _PipDownload

    cwd, marker = planted
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(FetchError, match="pip download nothing==1.0 failed"):
        _PipDownload("nothing", "1.0", "0" * 64)(scratch)
    assert _ran(marker) == ""


def test_a_wheel_left_to_pip_is_installed_by_the_real_pip(planted: tuple[Path, Path], tmp_path: Path) -> None:
    """builders/python_install.py: two wheels in dist/ go to ``python3 -m pip install``."""
    from cudapkgs.builders.python_install import install

    cwd, marker = planted
    work = tmp_path / "work"
    (work / "dist").mkdir(parents=True)
    pure_wheel(work / "dist" / "one-1.0-py3-none-any.whl", "one", "1.0", {"one.py": b"A = 1\n"})
    pure_wheel(work / "dist" / "two-1.0-py3-none-any.whl", "two", "1.0", {"two.py": b"B = 2\n"})
    out = tmp_path / "out"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    log = io.StringIO()
    install({"pythonVersion": version}, env, work, {"out": out}, log)
    site = out / "lib" / f"python{version}" / "site-packages"
    assert (site / "one.py").read_text() == "A = 1\n" and (site / "two.py").read_text() == "B = 2\n"
    assert "installing with pip (not one wheel in dist/)" in log.getvalue()
    assert _ran(marker) == ""


def _interpreters() -> list[str]:
    """This interpreter, and a Python 3.10 (no -P there) when one is installed."""
    found = [sys.executable]
    for candidate in (os.path.expanduser("~/.pyenv/versions/3.10.13/bin/python3.10"), "/usr/bin/python3.10"):
        if os.access(candidate, os.X_OK):
            found.append(candidate)
            break
    return found


@pytest.mark.parametrize("python", _interpreters(), ids=lambda p: os.path.basename(p))
def test_byte_compilation_does_not_run_a_planted_resource_or_runpy(planted: tuple[Path, Path], tmp_path: Path,
                                                                   python: str) -> None:
    """builders/python_bytecode.py: its boot code imported resource and runpy before it dropped the
    working directory from sys.path (runpy is frozen from 3.11 on; resource.py ran on any)."""
    from cudapkgs.builders.python_bytecode import compile_tree

    cwd, marker = planted
    out = tmp_path / "out"
    site = out / "lib" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    assert compile_tree(site, out, dict(os.environ), io.StringIO(), python=python) is True
    assert _ran(marker) == ""
    (pyc,) = (site / "pkg" / "__pycache__").glob("__init__.*.pyc")
    tag = subprocess.run([python, "-I", "-c", "import sys; print(sys.implementation.cache_tag)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert pyc.name == f"__init__.{tag}.pyc"


def test_a_python_package_build_in_a_planted_directory(planted: tuple[Path, Path], tmp_path: Path,
                                                       manifests_dir: Path) -> None:
    """The whole build of a Python package (install, byte code, import check) into a private store,
    run from a directory holding resource.py, runpy.py, compileall.py and pip/ (as `cudapkgs build
    python3Packages.mpmath` in a cloned repository)."""
    import cudapkgs
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    cwd, marker = planted
    wheel = pure_wheel(tmp_path / "tiny-1.0-py3-none-any.whl", "tiny", "1.0", {"tiny.py": b"VALUE = 3\n"})
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    ps = pkgs.python3Packages
    pkg = ps.buildPythonPackage({"pname": "tiny", "version": "1.0", "format": "wheel", "src": wheel,
                                 "pythonImportsCheck": ["tiny"]})
    with Store.open(store_dir) as store:
        realise(store, [pkg.derivation])
    site = Path(pkg.out, "lib", f"python{ps.pythonVersion}", "site-packages")
    assert list((site / "__pycache__").glob("tiny.*.pyc"))
    assert _ran(marker) == ""
    assert sorted(os.listdir(cwd)) == ["compileall.py", "cudapkgs", "distributed", "pip", "resource.py", "runpy.py"]


def test_the_remote_build_child_does_not_import_a_planted_cudapkgs(planted: tuple[Path, Path]) -> None:
    """realise/remote_build.py: the worker's child, ``python -m cudapkgs.realise.remote_build``."""
    from cudapkgs.realise.remote_build import worker_command

    cwd, marker = planted
    argv = worker_command("/nix/store", None)
    with private_directory() as private:
        done = subprocess.run(argv, input=b"", capture_output=True, cwd=private)
    assert done.returncode != 0 and b"EOFError" in done.stderr  # the real child: no payload on stdin
    assert _ran(marker) == ""
    # Started where the worker stands (the user's directory), -P alone keeps it off sys.path.
    done = subprocess.run(argv, input=b"", capture_output=True, env={**os.environ, "PYTHONPATH": ""})
    assert b"EOFError" in done.stderr
    assert _ran(marker) == ""


def test_a_local_dask_worker_does_not_import_a_planted_distributed(planted: tuple[Path, Path], tmp_path: Path) -> None:
    """realise/dask_local.py: ``python -m distributed.cli.dask_worker``."""
    if distributed is None:
        pytest.skip("distributed is not installed (the [test] extra)")
    from cudapkgs.realise.dask_local import LocalBuildCluster

    cwd, marker = planted
    with LocalBuildCluster(tmp_path / "stores", worker_death_timeout=30) as cluster:
        cluster.start_worker("w1")
        cluster.wait_for(1, timeout=60)
        directory = cluster._cwd
        assert directory is not None and os.path.isdir(directory)
    assert not os.path.exists(directory)
    assert _ran(marker) == ""


def test_the_cdi_hook_without_a_cudapkgs_script_runs_isolated(planted: tuple[Path, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """containers/generate.py: ``python -m cudapkgs cdi hook`` when no cudapkgs script is installed; a
    runtime runs it as root, in the bundle's directory, with the spec's env only."""
    from cudapkgs.containers import generate

    cwd, marker = planted
    monkeypatch.setenv("PATH", "")
    beside = os.path.join(os.path.dirname(sys.executable), "cudapkgs")
    real_access = os.access
    monkeypatch.setattr(generate.os, "access", lambda path, mode: path != beside and real_access(path, mode))
    program = generate.HookProgram.at(None)
    monkeypatch.setattr(generate.os, "access", real_access)
    assert program.path == sys.executable and program.prefix[1:] == ("-I", "-m", "cudapkgs", "cdi", "hook")
    done = subprocess.run([program.path, *program.prefix[1:], "--help"], env={"PYTHONPATH": _LEAKY_PYTHONPATH},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "hook" in done.stdout
    assert _ran(marker) == ""


def test_the_cdi_service_without_a_cudapkgs_script_runs_isolated(planted: tuple[Path, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from cudapkgs.containers.service import cudapkgs_command

    cwd, marker = planted
    monkeypatch.setenv("PATH", "")
    command = cudapkgs_command()
    assert command[0] == sys.executable
    done = subprocess.run([*command, "cdi", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _ran(marker) == ""


def test_the_import_check_finds_the_package_through_pythonpath_alone(tmp_path: Path, manifests_dir: Path) -> None:
    """pythonImportsCheck ran ``python3 -c "import M"`` in ``$out`` (as Nixpkgs' hook does), where
    ``cudapkgs develop`` puts ./outputs/out in the user's directory: a module left there passed the
    check of a package without it (and ran).  It now runs in an empty directory of its own."""
    import cudapkgs
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    wheel = pure_wheel(tmp_path / "tiny-1.0-py3-none-any.whl", "tiny", "1.0", {"tiny.py": b"VALUE = 3\n"})
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    ps = pkgs.python3Packages
    marker = tmp_path / "leftbehind-ran"
    pkg = ps.buildPythonPackage({
        "pname": "tiny", "version": "1.0", "format": "wheel", "src": wheel, "pythonImportsCheck": ["tiny", "leftbehind"],
        "preInstall": f'mkdir -p "$out"; echo "open({str(marker)!r}, \'w\')" > "$out/leftbehind.py"',
    })
    with Store.open(store_dir) as store, pytest.raises(Exception) as raised:
        realise(store, [pkg.derivation])
    log = Path(str(raised.value).rsplit("(log: ", 1)[1].split(")")[0]).read_text()
    assert "pythonImportsCheck: tiny" in log and "No module named 'leftbehind'" in log
    assert not marker.exists()
