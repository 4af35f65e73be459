"""python3 / python3Packages and python310 … python313 (…Packages): which interpreter each is, pins per CPython,
and the evaluation errors of a missing interpreter or a package with no wheel for one (issue 31, part 1)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.errors import EvalError
from cudapkgs.pkgs import python_interpreters
from cudapkgs.pkgs.python_interpreters import ask, default_python3, find_interpreter

REAL = os.path.realpath(sys.executable)  # the interpreter running the tests (a venv's python resolves to it)
VERSION = "%d.%d" % sys.version_info[:2]
FULL = "%d.%d.%d" % sys.version_info[:3]


def _base() -> str:
    """The base interpreter of the one running the tests (outside any venv)."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _link(directory: Path, name: str, target: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).symlink_to(target)
    return directory / name


def _config(tmp_path: Path, **extra) -> dict:
    return {"storeDir": str(tmp_path / "store"), "fetchers": ["wheels"], "allowUnfree": True,
            "prebuiltWheels": ["nccl", "libnvshmem"], **extra}


def test_default_python3_is_the_real_interpreter_behind_path_a_venv_link_or_a_shim(tmp_path, monkeypatch):
    # A venv's bin/python3 is a link to its base interpreter: resolved, not the venv's.
    venv = tmp_path / "venv"
    _link(venv / "bin", "python3", _base())
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(_base())}\n")
    monkeypatch.setenv("PATH", f"{venv / 'bin'}:/usr/bin:/bin")
    assert default_python3() == _base()
    # A script (pyenv's shim is one) is asked which interpreter it runs: its answer, not the script.
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").write_text(f"#!/bin/sh\nexec {_base()} \"$@\"\n")
    (shims / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")
    assert default_python3() == _base()
    # A relative PATH entry is the working directory (a cloned repository, say): never looked at, never run.
    here = tmp_path / "repo"
    here.mkdir()
    marker = tmp_path / "ran"
    (here / "python3").write_text(f"#!/bin/sh\ntouch {marker}\nexec {_base()} \"$@\"\n")
    (here / "python3").chmod(0o755)
    monkeypatch.chdir(here)
    monkeypatch.setenv("PATH", f".::{shims}")
    assert default_python3() == _base() and not marker.exists()


def test_python3packages_follow_path_and_python3executable_as_given(tmp_path, monkeypatch, manifests_dir):
    venv = tmp_path / "venv"
    _link(venv / "bin", "python3", _base())
    monkeypatch.setenv("PATH", f"{venv / 'bin'}:/usr/bin:/bin")
    pkgs = cudapkgs.import_pkgs(config=_config(tmp_path))
    assert pkgs.python3.hostPaths["python3"] == _base()
    assert pkgs.python3Packages.pythonVersion == VERSION
    # python3XY of python3's version is python3 (Nixpkgs' python3 is one of them), with the same packages.
    same = pkgs[f"python{VERSION.replace('.', '')}Packages"]
    assert same.python is pkgs.python3 and same.numpy.drvPath == pkgs.python3Packages.numpy.drvPath
    # The user's python3Executable is taken as given (it is their choice), not resolved.
    given = _link(tmp_path / "mine", "python3", _base())
    chosen = cudapkgs.import_pkgs(config=_config(tmp_path, python3Executable=str(given)))
    assert chosen.python3.hostPaths["python3"] == str(given)


def test_an_interpreter_is_found_in_pyenv_newest_micro_first_and_a_missing_one_says_how_to_get_it(tmp_path, monkeypatch):
    root = tmp_path / "pyenv"
    older, newer = f"{VERSION}.0", FULL if FULL != f"{VERSION}.0" else f"{VERSION}.1"
    _link(root / "versions" / older / "bin", f"python{VERSION}", "/bin/false")
    _link(root / "versions" / newer / "bin", f"python{VERSION}", _base())
    _link(root / "versions" / "3.9.18" / "bin", "python3.9", _base())  # another version's tree: not looked at
    env = {"PYENV_ROOT": str(root), "HOME": str(tmp_path / "home")}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("PYENV_ROOT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(python_interpreters, "_FIXED_DIRS", ())  # this machine's /usr/bin/python3.X aside
    found = find_interpreter(VERSION, environ=env)
    assert found.executable == _base() and found.version == FULL and found.major_minor == VERSION
    # uv's managed interpreters too
    uv = tmp_path / "uv"
    _link(uv / f"cpython-{FULL}-linux-x86_64-gnu" / "bin", f"python{VERSION}", _base())
    assert find_interpreter(VERSION, environ={"UV_PYTHON_INSTALL_DIR": str(uv), "HOME": env["HOME"]}).executable == _base()
    with pytest.raises(EvalError, match=r"python30: no CPython 3\.0 on this machine .*`uv python install 3\.0`"):
        find_interpreter("3.0", environ=env)


def test_a_missing_interpreter_is_an_evaluation_error_of_its_package_set(tmp_path, monkeypatch, manifests_dir):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    if any(os.path.exists(f"{d}/python3.13") for d in ("/usr/bin", "/usr/local/bin", "/bin")):
        pytest.skip("this machine has a CPython 3.13 in a system directory")
    pkgs = cudapkgs.import_pkgs(config=_config(tmp_path, python3Executable=_base()))
    with pytest.raises(EvalError, match=r"python313: no CPython 3\.13 on this machine.*uv python install 3\.13"):
        pkgs.python313Packages.numpy.drvPath


@pytest.mark.parametrize(("attr", "version", "why"), [
    ("python39Packages", "3.9", "PEP 596"), ("python38Packages", "3.8", "PEP 569"), ("python39", "3.9", "PEP 596"),
    ("python314Packages", "3.14", "pinned for cp310-cp313 only"), ("python314", "3.14", "cp310-cp313")])
def test_an_unsupported_cpython_says_which_are_supported_why_and_how_to_get_one(tmp_path, manifests_dir, attr,
                                                                              version, why):
    # not "attribute missing … did you mean python3Packages": the versions, the reason and how to get one
    from cudapkgs.lib.attrpath import parse_attrpath, resolve

    for top in (cudapkgs.import_pkgs(config=_config(tmp_path)), cudapkgs.import_pkgs(config=_config(tmp_path)).pkgsCuda):
        with pytest.raises(EvalError) as raised:
            resolve(top, parse_attrpath(f"{attr}.torch" if attr.endswith("Packages") else attr))
        message = str(raised.value)
        assert message.startswith(f"{attr}: CPython {version} is not supported (") and why in message
        assert "python310Packages … python313Packages (CPython 3.10-3.13)" in message
        assert "uv python install 3.12" in message and "did you mean" not in message


def test_ask_bounds_a_python_that_hangs_or_lies(tmp_path):
    liar = tmp_path / "python3"
    liar.write_text('#!/bin/sh\necho \'{"executable": "/nonexistent/python", "version": "3.12.1", '
                    '"implementation": "cpython"}\'\n')
    liar.chmod(0o755)
    with pytest.raises(EvalError, match="says its interpreter is '/nonexistent/python', which is no executable"):
        ask(str(liar))
    pypy = tmp_path / "pypy3"
    pypy.write_text(f'#!/bin/sh\necho \'{{"executable": "{_base()}", "version": "3.10.14", "implementation": "pypy"}}\'\n')
    pypy.chmod(0o755)
    with pytest.raises(EvalError, match="is pypy 3.10.14, not CPython 3"):
        ask(str(pypy))
    noisy = tmp_path / "noisy"
    noisy.write_text("#!/bin/sh\nhead -c 100000000 /dev/zero | tr '\\0' x\n")
    noisy.chmod(0o755)
    with pytest.raises(EvalError, match="not what a Python 3 prints"):
        ask(str(noisy))


def test_ask_gives_up_on_an_interpreter_that_never_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(python_interpreters, "_TIMEOUT", 0.5)
    hang = tmp_path / "python3"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    with pytest.raises(EvalError, match="did not answer"):
        ask(str(hang))


def _python(version: str) -> str | None:
    try:
        return find_interpreter(version).executable
    except EvalError:
        return None


@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_every_pinned_ml_wheel_has_its_cpython_pin(tmp_path, manifests_dir, version):
    python = _python(version)
    if python is None:
        pytest.skip(f"no CPython {version} here (uv python install {version})")
    tag = "cp" + version.replace(".", "")
    pkgs = cudapkgs.import_pkgs(config=_config(tmp_path, python3Executable=python))
    for set_name, torch_version, triton_version in (("cudaPackages_13_0", "2.14.1", "3.8.0"),
                                                    ("cudaPackages_12_9", "2.9.1", "3.5.1")):
        ps = pkgs[set_name].pkgs.pkgsCuda.python3Packages
        assert ps.torch.drvAttrs["wheel"]["file"] == f"torch-{torch_version}-{tag}-{tag}-manylinux_2_28_x86_64.whl"
        assert ps.triton.drvAttrs["wheel"]["file"].startswith(f"triton-{triton_version}-{tag}-{tag}-")
        assert ps.numpy.src.name.startswith("numpy-") and f"-{tag}-" in ps.numpy.src.name
    ps13 = pkgs.cudaPackages_13_0.pkgs.pkgsCuda.python3Packages
    assert f"-{tag}-" in ps13.cupy.drvAttrs["wheel"]["file"]
    if version == "3.10":  # jax 0.10.2 requires Python >= 3.11: the error names it and where it is
        with pytest.raises(EvalError, match=r"python3Packages.jax(lib)? 0.10.2: no pinned wheel for CPython 3.10 "
                           r"\(pinned for CPython 3.11, 3.12, 3.13 on x86_64-linux: use python311Packages, "
                           r"python312Packages or python313Packages"):
            ps13.jax.drvPath
    else:
        assert f"-{tag}-" in ps13["jax-cuda13-plugin"].drvAttrs["wheel"]["file"]
        assert f"-{tag}-" in ps13.jaxlib.src.name and f"-{tag}-" in ps13.scipy.src.name


def test_a_lock_records_the_interpreters_version_not_its_path(tmp_path, manifests_dir):
    """The same CPython at two paths (a link and its target) gives the same lock identities, though
    the store paths differ; another version gives other identities."""
    from cudapkgs.derivation import derivation_of
    from cudapkgs.project_lock import lock_ids

    elsewhere = _link(tmp_path / "other" / "bin", "python3", _base())
    drvs = []
    for python in (_base(), str(elsewhere)):
        pkgs = cudapkgs.import_pkgs(config=_config(tmp_path, python3Executable=python))
        env = pkgs.python3Packages.withPackages(lambda ps: [ps.numpy])
        drvs.append(derivation_of(env, "env"))
    assert drvs[0].drv_path != drvs[1].drv_path
    (ids_a, _), (ids_b, _) = lock_ids([drvs[0]]), lock_ids([drvs[1]])
    assert ids_a[drvs[0].drv_path] == ids_b[drvs[1].drv_path]
    other = next((p for v in ("3.12", "3.13", "3.10", "3.11") if v != VERSION and (p := _python(v))), None)
    if other is not None:
        pkgs = cudapkgs.import_pkgs(config=_config(tmp_path, python3Executable=other))
        third = derivation_of(pkgs.python3Packages.withPackages(lambda ps: [ps.numpy]), "env")
        assert lock_ids([third])[0][third.drv_path] != ids_a[drvs[0].drv_path]


def test_python3packages_on_an_unsupported_cpython_names_the_package_asked_for(tmp_path, manifests_dir):
    """`python3Executable` = a CPython 3.9: asking for torch says torch and why 3.9 is out (it named markupsafe,
    a dependency of a dependency, as "no pinned wheel for CPython 3.9"); the set's own builders still work."""
    fake = tmp_path / "py39" / "python3"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Python 3.9.18'\n")
    fake.chmod(0o755)
    pkgs = cudapkgs.import_pkgs(config=_config(tmp_path, python3Executable=str(fake)))
    with pytest.raises(EvalError) as caught:
        _ = pkgs.pkgsCuda.python3Packages.torch.drvPath
    message = str(caught.value)
    assert message.startswith("python3Packages.torch: python3Packages runs CPython 3.9.18 "), message
    assert f"python3Executable = {fake}" in message and "end of life" in message
    assert "python312Packages" in message and "uv python install 3.12" in message
    assert pkgs.python3Packages.pythonVersion == "3.9"  # the set itself evaluates
