"""realise.install_ahead: a rewired wheel installed and byte-compiled while its inputs are built.

The synthetic wheel of tests/builders/test_rewired_wheel.py, rewired to a library built in the
same run: the scheduler installs it ahead, and the output must be the one a build without that
makes, file for file; a damaged wheel must still fail the build.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.builders.rewired_wheel import rewired_wheel
from cudapkgs.builders.rewired_wheel_steps import PreparedInstall, RewireError, install_tree, site_packages
from cudapkgs.realise import install_ahead
from cudapkgs.realise.errors import BuildFailed
from cudapkgs.realise.realise import build_one, log_path, realise
from cudapkgs.realise.scheduler import plan, run
from cudapkgs.store.store import Store

sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1] / "builders"))
sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))
from test_rewired_wheel import INERT, _bar_package, _cache_wheel, demo_files, make_wheel  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc", path="/usr/bin:/bin") is None, reason="needs gcc in /usr/bin")


def _setup(tmp_path: Path, *, tamper: str | None = None, **extra):
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "driverLibDir": "/opt/driver/lib"})
    if not str(pkgs.python3.version).startswith("3.11"):
        pytest.skip(f"the demo wheel is cp311; python3 here is {pkgs.python3.version}")
    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", demo_files(tmp_path), tamper=tamper)
    sha = _cache_wheel(wheel)
    attrs = {
        "pname": "demo", "version": "1.0", "wheel": {"file": wheel.name, "sha256": sha},
        "buildInputs": [_bar_package(pkgs, tmp_path)],
        "pythonRemoveDeps": ["nvidia-*", "cuda-toolkit"], "wheelSubstitutions": [INERT],
        "wheelRemove": ["demo/bin/ptxas"], "wheelLinks": {"demo/bin/ptxas": "/bin/true"},
        "pythonImportsCheck": ["demo"], **extra,
    }
    return pkgs, store_dir, rewired_wheel(pkgs.config, pkgs.python3, attrs)


def _tree(root: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = os.fspath(path.relative_to(root))
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_file():
            found[rel] = (path.read_bytes(), os.stat(path).st_mode & 0o777)
        else:
            found[rel] = "dir"
    return found


def _wipe(store_dir: Path) -> None:
    for directory, _, _ in os.walk(store_dir):
        os.chmod(directory, 0o755)
    shutil.rmtree(store_dir)


def test_installed_ahead_while_the_input_builds_and_the_output_is_the_same(tmp_path):
    pkgs, store_dir, pkg = _setup(tmp_path)
    assert install_ahead.eligible(pkg.derivation)
    with Store.open(store_dir) as store:
        realise(store, [pkg.derivation])  # one build after the other: nothing ahead
        plain = _tree(Path(pkg.out))
    assert "(installed ahead" not in log_path(store, pkg.derivation).read_text()
    _wipe(store_dir)
    with Store.open(store_dir) as store:
        realise(store, [pkgs.python3.derivation])  # the interpreter first: the byte code is compiled ahead too
        the_plan = plan(store, [pkg.derivation])
        assert pkg.derivation.drv_path in {d.drv_path for d in the_plan.to_build}
        run(store, the_plan, jobs=1)  # bar builds first; demo's install is done meanwhile
        log = log_path(store, pkg.derivation).read_text()
        ahead = _tree(Path(pkg.out))
        assert not list(store.tmp_dir.glob("work-install-*"))  # the ahead work directory is gone
    assert "(installed ahead, while the inputs were built)" in log
    assert "byte code: compiled ahead by the same interpreter" in log
    assert any(name.endswith(".pyc") for name in ahead)
    assert ahead == plain


def test_a_damaged_wheel_fails_ahead_and_again_in_its_build(tmp_path):
    pkgs, store_dir, pkg = _setup(tmp_path, tamper="demo/__init__.py")
    with Store.open(store_dir) as store:
        realise(store, [pkgs.python3.derivation])
        with pytest.raises(BuildFailed) as failed:
            run(store, plan(store, [pkg.derivation]), jobs=1)
        assert not store.is_valid(pkg.out)
    assert "demo/__init__.py" in str(failed.value) or "RECORD" in log_path(store, pkg.derivation).read_text()
    assert "(installed ahead" not in log_path(store, pkg.derivation).read_text()


def test_byte_code_of_another_interpreter_is_dropped_and_compiled_again(tmp_path):
    """A tree compiled ahead under another key: the build compiles itself, and no .pyc of the other stays."""
    pkgs, store_dir, pkg = _setup(tmp_path)
    drv = pkg.derivation
    with Store.open(store_dir) as store:
        realise(store, list(drv.deps))  # the interpreter and bar
        work = tmp_path / "ahead"
        out = work / "out"
        out.mkdir(parents=True)
        site = site_packages(out, "3.11")
        installed, changed = install_tree(drv.attrs, site, out, io.StringIO())
        stale = site / "demo" / "__pycache__" / "__init__.cpython-399.pyc"
        stale.parent.mkdir()
        stale.write_bytes(b"another interpreter's byte code")
        prepared = PreparedInstall(out, installed, changed, "", "another interpreter", lambda: shutil.rmtree(work))
        build_one(store, drv, prepared=lambda d: prepared if d.drv_path == drv.drv_path else None)
        site = Path(pkg.out) / "lib" / "python3.11" / "site-packages"
        pycs = sorted(p.name for p in (site / "demo" / "__pycache__").iterdir())
        log = log_path(store, drv).read_text()
    assert "(installed ahead" in log and "compiled ahead" not in log
    assert pycs == ["__init__.cpython-311.pyc"]
    assert not work.exists()


@pytest.mark.parametrize("extra", [
    {"postInstall": "touch $out/x"},  # a step between the install and the byte code
    {"wheelLinks": {"demo/extra.py": "/bin/true"}},  # a module linked in after the compilation ahead
    # byte code linked in: the build's compileall replaces that link with its own .pyc, done ahead the
    # link would replace the .pyc compiled ahead (another output)
    {"wheelLinks": {"demo/__pycache__/__init__.cpython-311.pyc": "/bin/true"}},
    {"wheelLinks": {"demo/__pycache__": "/tmp"}},
])
def test_what_is_not_installed_ahead(tmp_path, extra):
    _, _, pkg = _setup(tmp_path, **extra)
    assert not install_ahead.eligible(pkg.derivation)


def test_a_wheel_not_in_the_cache_is_left_to_the_build(tmp_path):
    _, _, pkg = _setup(tmp_path)
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "cudapkgs" / "wheels"
    for entry in cache.glob("*.sha256"):
        entry.unlink()
    assert not install_ahead.eligible(pkg.derivation)


def test_the_largest_work_is_queued_first_whatever_the_start_order(tmp_path, monkeypatch):
    """torch's install (the largest) queued last was still under way when its inputs were done."""
    from cudapkgs.realise import scheduler, unpack_ahead

    pkgs, store_dir, small = _setup(tmp_path)
    files = {**demo_files(tmp_path), "demo/big.bin": (os.urandom(1 << 20), 0o644)}
    wheel = make_wheel(tmp_path / "demobig-1.0-cp311-cp311-linux_x86_64.whl", files)
    big = rewired_wheel(pkgs.config, pkgs.python3, {
        "pname": "demobig", "version": "1.0", "wheel": {"file": wheel.name, "sha256": _cache_wheel(wheel)},
        "buildInputs": [_bar_package(pkgs, tmp_path)], "pythonImportsCheck": ["demo"]})
    queued: list[str] = []

    class Recorder:
        def __init__(self, store, derivations, *args, **kwargs):
            queued.extend(d.name for d in derivations)

    monkeypatch.setattr(unpack_ahead, "UnpackAhead", Recorder)
    with Store.open(store_dir) as store:
        the_plan = plan(store, [small.derivation, big.derivation])
        order = {small.derivation.drv_path: 0, big.derivation.drv_path: 1}  # the small one would start first
        scheduler._unpack_ahead(store, the_plan, [], 1, None, order)
    assert [n for n in queued if n.startswith("demo")] == [big.name, small.name]


def test_a_compiler_killed_ahead_leaves_the_byte_code_to_the_build(tmp_path, monkeypatch):
    """A compileall killed part way (a signal, the kernel's OOM killer, a worker dying) was taken as
    the whole byte code: the build skipped its own compilation and the output lacked modules' .pyc."""
    from cudapkgs.builders import python_bytecode

    pkgs, store_dir, pkg = _setup(tmp_path)
    # The compiler is started as the resolved interpreter whatever argv[0] says (54ae7ec), so the
    # stand-in is that interpreter killing itself, as the kernel's OOM killer would.
    monkeypatch.setattr(python_bytecode, "_command", lambda python, site, out, jobs: [
        python, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    with Store.open(store_dir) as store:
        realise(store, [pkgs.python3.derivation])
        with pytest.raises(RewireError, match="stopped part way"):
            install_ahead.prepare(pkg.derivation, store)
        assert not list(store.tmp_dir.glob("work-install-*"))  # the half tree is not kept for the build


def test_a_tree_changed_between_prepare_and_take_is_not_taken(tmp_path):
    """The tree waits in the store's temporary area while the inputs build (minutes for torch), and
    its files were never looked at again: one edited meanwhile (size and mtime put back) went into
    the output, RECORD still naming the wheel's digest.  Now the build installs again."""
    pkgs, store_dir, pkg = _setup(tmp_path)
    drv = pkg.derivation
    with Store.open(store_dir) as store:
        realise(store, list(drv.deps))
        prepared = install_ahead.prepare(drv, store)
        module = next(prepared.out.rglob("demo/__init__.py"))
        original = module.read_bytes()
        st = os.stat(module)
        module.write_bytes(original[:-1] + b"#")  # the last newline made a comment: same size, still imports
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
        build_one(store, drv, prepared=lambda d: prepared if d.drv_path == drv.drv_path else None)
        installed = Path(pkg.out) / "lib" / "python3.11" / "site-packages" / "demo" / "__init__.py"
        log = log_path(store, drv).read_text()
        assert installed.read_bytes() == original
    assert "changed since it was installed ahead" in log
    assert not prepared.out.exists()


def test_the_compile_key_is_what_the_compiler_sees(tmp_path):
    """`compile_key` names what the compiler's byte code depends on: the interpreter and the
    variables it is started with (`python_bytecode.compiler_env`), not those it never gets."""
    from cudapkgs.builders.rewired_wheel_steps import compile_key

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    key = compile_key(env)
    # dropped by compiler_env: the same byte code
    assert compile_key({**env, "PYTHONDONTWRITEBYTECODE": "1"}) == key
    assert compile_key({**env, "PYTHONPATH": "/elsewhere", "PYTHONHASHSEED": "7"}) == key
    # what the compiler reads: another key
    assert compile_key({**env, "LANG": "de_DE.UTF-8"}) != key
    other = tmp_path / "bin"
    other.mkdir()
    (other / "python3").symlink_to("/bin/sh")  # another interpreter first on PATH
    assert compile_key({**env, "PATH": f"{other}:{env['PATH']}"}) != key


def test_a_python_input_does_not_make_the_build_compile_again(tmp_path, monkeypatch):
    """A root build of a rewired wheel with a Python input has PYTHONDONTWRITEBYTECODE=1 from the
    Python hook; the compilation ahead has no such input in its environment.  The key differed,
    so torch's and torchaudio's builds compiled their byte code a second time (torch's 2,437
    modules on the ML environment's critical path)."""
    from cudapkgs.hooks import python_path
    from cudapkgs.stdenv import mk_derivation

    monkeypatch.setattr(python_path, "_as_root", lambda: True)  # the hook's root case, whoever runs the test
    probe = tmp_path / "pyinput-src" / "lib" / "python3.11" / "site-packages" / "pyinput"
    probe.mkdir(parents=True)
    (probe / "__init__.py").write_text("")
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "driverLibDir": "/opt/driver/lib"})
    pyinput = mk_derivation(pkgs, {"pname": "pyinput", "version": "1", "stdenvCc": None,
                                   "src": probe.parents[3], "dontConfigure": True, "dontBuild": True,
                                   "installPhase": 'cp -r lib "$out/"'})
    pkgs, store_dir, pkg = _setup(tmp_path, propagatedBuildInputs=[pyinput])
    with Store.open(store_dir) as store:
        realise(store, [pkgs.python3.derivation])
        run(store, plan(store, [pkg.derivation]), jobs=1)
        log = log_path(store, pkg.derivation).read_text()
    assert "(installed ahead, while the inputs were built)" in log
    assert "byte code: compiled ahead by the same interpreter" in log
    assert "compileall" not in log


def _planted_pyc() -> bytes:
    """Byte code a wheel ships for demo/__init__.py: CPython 3.11's magic, unchecked-hash (flags 1: the import
    system never compares it with the source), code that is not the source's."""
    import importlib.util
    import marshal

    assert sys.version_info[:2] == (3, 11), "the planted byte code is 3.11's"
    return importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + bytes(8) + marshal.dumps(
        compile("PLANTED = True\n", "demo/__init__.py", "exec"))


@pytest.mark.parametrize("ahead", [False, True])
def test_byte_code_a_wheel_ships_never_stands_in_for_its_source(tmp_path, monkeypatch, ahead):
    """A wheel's own __pycache__ (every optimization level: `python -O` reads opt-1) is not kept: each .pyc
    in the output is the build's checked-hash byte code of the source beside it."""
    import importlib.util

    if sys.version_info[:2] != (3, 11):
        pytest.skip("the planted byte code is made by this interpreter, which must be 3.11 as the demo wheel")
    files = demo_files(tmp_path)
    for tag in ("cpython-311", "cpython-311.opt-1", "cpython-311.opt-2"):
        files[f"demo/__pycache__/__init__.{tag}.pyc"] = (_planted_pyc(), 0o644)
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "driverLibDir": "/opt/driver/lib"})
    if not str(pkgs.python3.version).startswith("3.11"):
        pytest.skip(f"the demo wheel is cp311; python3 here is {pkgs.python3.version}")
    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", files)
    attrs = {
        "pname": "demo", "version": "1.0", "wheel": {"file": wheel.name, "sha256": _cache_wheel(wheel)},
        "buildInputs": [_bar_package(pkgs, tmp_path)],
        "pythonRemoveDeps": ["nvidia-*", "cuda-toolkit"], "wheelSubstitutions": [INERT],
        "wheelRemove": ["demo/bin/ptxas"], "wheelLinks": {"demo/bin/ptxas": "/bin/true"},
        "pythonImportsCheck": ["demo"],
    }
    pkg = rewired_wheel(pkgs.config, pkgs.python3, attrs)
    with Store.open(store_dir) as store:
        if ahead:
            realise(store, [pkgs.python3.derivation])
            run(store, plan(store, [pkg.derivation]), jobs=1)
        else:
            realise(store, [pkg.derivation])
    source = next(Path(pkg.out).rglob("demo/__init__.py"))
    pycs = sorted((source.parent / "__pycache__").glob("*.pyc"))
    assert pycs  # the build's own
    for pyc in pycs:
        data = pyc.read_bytes()
        assert int.from_bytes(data[4:8], "little") == 3, f"{pyc.name}: not checked-hash byte code"
        assert data[8:16] == importlib.util.source_hash(source.read_bytes()), f"{pyc.name}: not the source's"
