"""builders.python: buildPythonPackage (PEP 517, no network) with a propagated dependency, and withPackages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cudapkgs
from wheel_builders import pure_wheel
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store

# The interpreter these builds take their build backend from (the default python3, PATH's, may lack wheel)
_BACKEND = "/usr/bin/python3"
_CHECK = [_BACKEND, "-c", "import setuptools, wheel, pip"]


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
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": _BACKEND})
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
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": _BACKEND})
    bad = pkgs.python3Packages.buildPythonPackage({
        "pname": "badpkg", "version": "1.0",
        "src": _project(tmp_path, "badpkg", "import not_a_module_anywhere\n"),
        "pythonImportsCheck": ["badpkg"],
    })
    with Store.open(store_dir) as store:
        with pytest.raises(Exception, match="not_a_module_anywhere"):
            realise(store, [bad.derivation])


def test_python3_executable_picks_the_interpreter_and_a_bad_one_is_one_error(tmp_path, manifests_dir):
    import sys

    from cudapkgs.errors import EvalError

    real = Path(sys.executable).resolve()  # the interpreter running the tests: some CPython 3
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "python3Executable": str(real)})
    assert pkgs.python3.hostPaths["python3"] == str(real)
    assert pkgs.python3Packages.pythonVersion == f"{sys.version_info[0]}.{sys.version_info[1]}"
    bad = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "python3Executable": str(tmp_path / "nope")})
    with pytest.raises(EvalError, match="is not an executable file .config python3Executable"):
        bad.python3Packages.numpy.drvPath
    # An executable that is no Python (a compiler, a script) is named as such, not read as "CPython 12.2";
    # nor is a Python 2 (which prints its version on stderr).
    for name, script, message in (
        ("cc", "echo 'gcc (Debian 12.2.0-14) 12.2.0'", r"cc --version printed 'gcc \(Debian.*not a Python 3 interpreter .config python3Executable"),
        ("python2.7", "echo 'Python 2.7.18' >&2", r"python2.7 --version printed 'Python 2.7.18'.*not a Python 3 interpreter"),
    ):
        fake = tmp_path / name
        fake.write_text(f"#!/bin/sh\n{script}\n")
        fake.chmod(0o755)
        bad = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "python3Executable": str(fake)})
        with pytest.raises(EvalError, match=message):
            bad.python3Packages.numpy.drvPath


def test_format_wheel_installs_a_wheel_and_refuses_one_for_another_python(tmp_path, manifests_dir):
    """buildPythonPackage(format="wheel"): the wheel source is installed as it is (wheelUnpackHook +
    pypaInstallHook); pip refuses a wheel whose tags do not fit the interpreter."""
    src = _project(tmp_path, "wheelpkg", "VALUE = 7\ndef main():\n    print(VALUE)\n")
    dist = tmp_path / "dist"
    subprocess.run(["/usr/bin/python3", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                    "-q", "-w", str(dist), str(src)], check=True, capture_output=True)
    (wheel,) = dist.glob("wheelpkg-1.0-py3-none-any.whl")
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": _BACKEND})
    ps = pkgs.python3Packages
    good = ps.buildPythonPackage({"pname": "wheelpkg", "version": "1.0", "format": "wheel", "src": wheel,
                                  "pythonImportsCheck": ["wheelpkg"]})
    foreign = dist / "wheelpkg-1.0-cp30-cp30-linux_x86_64.whl"  # CPython 3.0: no interpreter here takes it
    foreign.write_bytes(wheel.read_bytes())
    bad = ps.buildPythonPackage({"pname": "wheelpkg", "version": "1.0", "format": "wheel", "src": foreign})
    with Store.open(store_dir) as store:
        realise(store, [good.derivation])
        with pytest.raises(Exception, match="is not a supported wheel on this platform"):
            realise(store, [bad.derivation])
    assert Path(good.out, "lib", f"python{ps.pythonVersion}", "site-packages", "wheelpkg.py").is_file()
    assert Path(good.out, "bin", "wheelpkg-hello").is_file()
    with pytest.raises(Exception, match="format 'egg' is not supported"):
        ps.buildPythonPackage({"pname": "x", "version": "1", "format": "egg", "src": wheel}).drvPath


def test_format_wheel_keeps_any_wheel_name_and_records_no_build_directory(tmp_path, manifests_dir):
    """review r1: (1) wheelUnpackHook's stripHash took any 32 characters and a '-' for a store hash, so
    typing_inspection-0.4.1-py3-none-any.whl (its 33rd character is '-') became any.whl and pip refused
    it; (2) pip wrote dist-info/direct_url.json naming the random work directory, so the output (and
    its NAR hash) differed from build to build and kept a dead /.tmp/work-… path."""
    wheel = pure_wheel(tmp_path / "typing_inspection-0.4.1-py3-none-any.whl", "typing_inspection", "0.4.1",
                            {"typing_inspection.py": b"VALUE = 3\n"})
    assert wheel.name[32] == "-"
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": _BACKEND})
    ps = pkgs.python3Packages
    pkg = ps.buildPythonPackage({"pname": "typing_inspection", "version": "0.4.1", "format": "wheel", "src": wheel,
                                 "pythonImportsCheck": ["typing_inspection"]})
    with Store.open(store_dir) as store:
        realise(store, [pkg.derivation])
    site = Path(pkg.out, "lib", f"python{ps.pythonVersion}", "site-packages")
    assert (site / "typing_inspection.py").read_bytes() == b"VALUE = 3\n"
    info = site / "typing_inspection-0.4.1.dist-info"
    assert not (info / "direct_url.json").exists()
    assert "direct_url.json" not in (info / "RECORD").read_text()
    mentions = [p for p in Path(pkg.out).rglob("*") if p.is_file() and b"/.tmp/work-" in p.read_bytes()]
    assert mentions == []
    # Byte code is compiled, named relative to the output (the import system fixes co_filename).
    (pyc,) = (site / "__pycache__").glob("typing_inspection.cpython-*.pyc")
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") & 1  # hash-based, not mtime-based


def test_python3_executable_in_a_directory_with_a_space_and_one_that_is_no_python(tmp_path, manifests_dir):
    """review r1: the host tool's install linked its executables unquoted (`ln -s /a b/python3 …`
    failed for a directory with a space, and a path could run shell words), and any program
    that printed a version (cmake 3.25.1) was taken for Python 3.25."""
    import sys

    from cudapkgs.errors import EvalError

    spaced = tmp_path / "my python; true" / "bin"
    spaced.mkdir(parents=True)
    (spaced / "python3").symlink_to(Path(sys.executable).resolve())
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": str(spaced / "python3")})
    env = pkgs.python3Packages.withPackages(lambda ps: [])
    with Store.open(store_dir) as store:
        realise(store, [pkgs.python3.derivation, env.derivation])
    assert os.readlink(Path(pkgs.python3.out, "bin", "python3")) == str(spaced / "python3")
    # The env runs that interpreter (it was `exec /…/my python; true/bin/python3 "$@"`) as its own
    # bin/python3 (issue 31: sys.executable was the host's), and leaves PYTHONPATH alone (it was
    # ":$PYTHONPATH": the working directory first).
    done = subprocess.run([f"{env.out}/bin/python3", "-c", "import sys; print(sys.executable); print(sys.path[1])"],
                          capture_output=True, text=True, env={"PYTHONPATH": "/nowhere"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{env.out}/bin/python3", "/nowhere"]
    not_python = tmp_path / "cmake"
    not_python.write_text("#!/bin/sh\necho 'cmake version 3.25.1'\n")
    not_python.chmod(0o755)
    bad = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": str(not_python)})
    with pytest.raises(EvalError, match="not a Python 3 interpreter"):
        bad.python3Packages.pythonVersion


def test_format_wheel_refuses_two_wheels_of_one_name(tmp_path, manifests_dir):
    """A source directory holding the same wheel twice, once under a store-hash prefix: stripping the
    prefix made the second overwrite the first without a word; now the build says so."""
    src = tmp_path / "src"
    src.mkdir()
    pure_wheel(src / "dup-1.0-py3-none-any.whl", "dup", "1.0", {"dup.py": b"VALUE = 1\n"})
    pure_wheel(src / f"{'a' * 32}-dup-1.0-py3-none-any.whl", "dup", "1.0", {"dup.py": b"VALUE = 2\n"})
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": _BACKEND})
    pkg = pkgs.python3Packages.buildPythonPackage({"pname": "dup", "version": "1.0", "format": "wheel", "src": src})
    with Store.open(store_dir) as store, pytest.raises(Exception) as raised:
        realise(store, [pkg.derivation])
    log = Path(str(raised.value).rsplit("(log: ", 1)[1].split(")")[0]).read_text()
    assert "two wheels of the source are both dup-1.0-py3-none-any.whl" in log


def test_the_import_check_does_not_import_the_source_tree(tmp_path, manifests_dir):
    """The check ran in the source directory, first on sys.path: a module there that the package does
    not install passed it (Nixpkgs' hook runs in ``$out``)."""
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": _BACKEND})
    src = _project(tmp_path, "onlypkg", "VALUE = 1\n")
    with (src / "pyproject.toml").open("a") as pyproject:
        pyproject.write("[tool.setuptools]\npy-modules = [\"onlypkg\"]\n")
    (src / "leftbehind.py").write_text("")  # in the source, not installed
    pkg = pkgs.python3Packages.buildPythonPackage({
        "pname": "onlypkg", "version": "1.0", "src": src, "pythonImportsCheck": ["leftbehind"],
    })
    with Store.open(store_dir) as store:
        with pytest.raises(Exception, match="leftbehind"):
            realise(store, [pkg.derivation])


def test_with_packages_is_its_own_interpreter_and_keeps_pythonpath(tmp_path, manifests_dir):
    """issue 31: withPackages' wrapper ran the host's python3 (sys.executable was /usr/bin/python3, so a
    `[sys.executable, ...]` child lost the packages) and set PYTHONPATH for its packages."""
    wheel = pure_wheel(tmp_path / "envpkg-1.0-py3-none-any.whl", "envpkg", "1.0", {"envpkg.py": b"VALUE = 7\n"})
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    ps = pkgs.python3Packages
    pkg = ps.buildPythonPackage({"pname": "envpkg", "version": "1.0", "format": "wheel", "src": wheel})
    env = ps.withPackages([pkg])
    with Store.open(store_dir) as store:
        realise(store, [env.derivation])
    mine = tmp_path / "mine"
    mine.mkdir()
    script = ("import sys, subprocess, envpkg\n"
              "print(sys.executable)\n"
              "print(sys.path.index(sys.argv[1]) < sys.path.index(sys.argv[2]))\n"
              "print(envpkg.VALUE)\n"
              "child = subprocess.run([sys.executable, '-c', 'import envpkg, sys; print(envpkg.VALUE, sys.executable)'],"
              " env={}, capture_output=True, text=True)\n"
              "print(child.stdout.strip() or child.stderr)\n")
    site = f"{pkg.out}/lib/python{ps.pythonVersion}/site-packages"
    done = subprocess.run([f"{env.out}/bin/python3", "-c", script, str(mine), site], capture_output=True, text=True,
                          env={"PYTHONPATH": str(mine)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{env.out}/bin/python3",
        "True",  # the user's PYTHONPATH is kept, before the environment's packages
        "7",
        f"7 {env.out}/bin/python3",  # a child started as sys.executable, with an empty environment, has them too
    ]


def test_a_packages_own_post_install_keeps_the_import_check(tmp_path, manifests_dir):
    """`postInstall` held the import check, so a package setting its own (or an override_attrs adding
    one) built without it: a package that cannot be imported was registered (issue 30 follow-up,
    item 5). The check is its own phase after the fixup, as Nixpkgs' hook appends
    pythonImportsCheckPhase to preDistPhases, and the package's postInstall runs as well."""
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "python3Executable": _BACKEND})
    src = _project(tmp_path, "hookpkg", "import not_a_module_anywhere\n")
    own = pkgs.python3Packages.buildPythonPackage({
        "pname": "hookpkg", "version": "1.0", "src": src, "pythonImportsCheck": ["hookpkg"],
        "postInstall": 'echo mine > "$out/post-install-ran"',
    })
    overridden = pkgs.python3Packages.buildPythonPackage({
        "pname": "hookpkg2", "version": "1.0", "src": src, "pythonImportsCheck": ["hookpkg"],
    }).override_attrs({"postInstall": 'echo mine > "$out/post-install-ran"'})
    for package in (own, overridden):
        with Store.open(store_dir) as store:
            with pytest.raises(Exception, match="not_a_module_anywhere"):
                realise(store, [package.derivation])
            assert not store.is_valid(package.out)
        assert "pythonImportsCheckPhase" in package.derivation.attrs["preDistPhases"]

    good = pkgs.python3Packages.buildPythonPackage({
        "pname": "goodpkg", "version": "1.0", "src": _project(tmp_path, "goodpkg", "VALUE = 1\n"),
        "pythonImportsCheck": ["goodpkg"], "postInstall": 'echo mine > "$out/post-install-ran"',
    })
    with Store.open(store_dir) as store:
        realise(store, [good.derivation])
    assert Path(good.out, "post-install-ran").read_text() == "mine\n"
    unchecked = pkgs.python3Packages.buildPythonPackage({
        "pname": "hookpkg3", "version": "1.0", "src": src, "pythonImportsCheck": ["hookpkg"],
        "dontUsePythonImportsCheck": True})
    assert "preDistPhases" not in unchecked.derivation.attrs


def test_with_packages_writes_no_byte_code_into_the_store(tmp_path, manifests_dir):
    """A module of the store without a ``.pyc`` (here one postInstall writes after the byte code step),
    imported as root through a withPackages environment, is not cached into the store (the store path
    still matches its NAR hash), while the user's own module is cached as usual (`pycache_guard`)."""
    version = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")}).python3Packages.pythonVersion
    wheel = pure_wheel(tmp_path / "latepkg-1.0-py3-none-any.whl", "latepkg", "1.0", {"latepkg.py": b"VALUE = 7\n"})
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    ps = pkgs.python3Packages
    pkg = ps.buildPythonPackage({"pname": "latepkg", "version": "1.0", "format": "wheel", "src": wheel,
                                 "postInstall": f'echo "LATE = 3" > "$out/lib/python{version}/site-packages/late.py"'})
    env = ps.withPackages([pkg])
    with Store.open(store_dir) as store:
        realise(store, [env.derivation])
    site = Path(pkg.out, "lib", f"python{version}", "site-packages")
    assert not (site / "__pycache__" / f"late.{sys.implementation.cache_tag}.pyc").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "usermod.py").write_text("U = 1\n")
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([f"{env.out}/bin/python3", "-c", "import late, latepkg, usermod; print(late.LATE)"],
                          capture_output=True, text=True, env={**environ, "PYTHONPATH": str(mine)}, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "3\n", done.stderr
    assert os.geteuid() != 0 or os.access(site, os.W_OK)  # root: the modes alone would not have stopped it
    assert not (site / "__pycache__" / f"late.{sys.implementation.cache_tag}.pyc").exists()
    assert [p.name for p in (mine / "__pycache__").iterdir()] == [f"usermod.{sys.implementation.cache_tag}.pyc"]
    with Store.open(store_dir) as store:
        assert store.verify(paths=[pkg.out, env.out]) == []
