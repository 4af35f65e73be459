"""builders.rewired_wheel: a synthetic wheel rewired to a "set" library, as torch-bin is.

The wheel is built here: a package whose ``.so`` carries DT_RPATH into ``nvidia/cu13/lib`` (as
torch's do), an ``__init__.py`` that preloads from an ``nvidia/`` tree on sys.path (as torch's
``_preload_cuda_deps``), Requires-Dist lines naming NVIDIA's wheels, a bundled tool to remove.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import signal
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

import sys

import cudapkgs
from cudapkgs.builders.rewired_wheel import rewired_wheel, wheel_suits
from cudapkgs.elf.read import read_elf
from cudapkgs.errors import EvalError, FetchError
from cudapkgs.fetch.wheel_install import WheelContentsError, install_wheel
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store

from cudapkgs.stdenv import mk_derivation

sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))  # tests/, for elf_builders
from elf_builders import BAR_C, FOO_C, shared_lib  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc", path="/usr/bin:/bin") is None, reason="needs gcc in /usr/bin")

# What the package's __init__ does, in the shape of torch's preload: glob nvidia/<x>/lib on sys.path.
INIT = '''\
import glob, os, sys

def _get_cuda_dep_paths(path, lib_folder, lib_name):
    return glob.glob(os.path.join(path, "nvidia", lib_folder, "lib", lib_name))

def preloaded():
    return [p for path in sys.path for p in _get_cuda_dep_paths(path, "cu13", "libbar.so*")]

import ctypes
LIB = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libdemo.so"))
'''
INERT = {"file": "demo/__init__.py", "replace": [[
    "def _get_cuda_dep_paths(path, lib_folder, lib_name):\n",
    "def _get_cuda_dep_paths(path, lib_folder, lib_name):\n    return []\n"]]}
METADATA = """\
Metadata-Version: 2.1
Name: demo
Version: 1.0
Requires-Dist: filelock
Requires-Dist: nvidia-cublas==13.1.1.3; platform_system == "Linux"
Requires-Dist: nvidia_cudnn_cu13==9.24.0.43
Requires-Dist: cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"

A demo: Requires-Dist: nvidia-cublas in the description is not a requirement.
"""


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(path: Path, files: dict[str, tuple[bytes, int]], *, tamper: str | None = None,
               unlisted: str | None = None, dist_info: str = "demo-1.0.dist-info") -> Path:
    """A wheel of `files` (name -> (bytes, mode)) with a RECORD; `tamper`'s row gets a wrong digest,
    `unlisted` is left out of RECORD."""
    record = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
            if name != unlisted:
                record.append(f"{name},{_digest(b'not these bytes' if name == tamper else data)},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return path


def _libdemo(tmp: Path) -> bytes:
    """libdemo.so: DT_NEEDED libbar.so.1, DT_RPATH into an nvidia/ tree (as torch's libraries)."""
    bar = shared_lib(tmp / "bar" / "libbar.so.1", BAR_C, "libbar.so.1")
    out = tmp / "demo" / "libdemo.so"
    shared_lib(out, FOO_C, "libdemo.so", f"-L{bar.parent}", "-l:libbar.so.1", "-Wl,--disable-new-dtags",
               "-Wl,-rpath,$ORIGIN/../../nvidia/cu13/lib:$ORIGIN")
    assert read_elf(out).rpath == ["$ORIGIN/../../nvidia/cu13/lib", "$ORIGIN"]
    return out.read_bytes()


def demo_files(tmp: Path) -> dict[str, tuple[bytes, int]]:
    return {
        "demo/__init__.py": (INIT.encode(), 0o644),
        "demo/lib/libdemo.so": (_libdemo(tmp), 0o755),
        "demo/bin/ptxas": (b"#!/bin/sh\necho bundled ptxas\n", 0o755),
        "demo-1.0.dist-info/METADATA": (METADATA.encode(), 0o644),
        "demo-1.0.dist-info/WHEEL": (b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n", 0o644),
    }


def _cache_wheel(wheel: Path) -> str:
    """Put `wheel` in the (per-test) wheel cache with its sha256 record; return the sha256."""
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "cudapkgs" / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    shutil.copy(wheel, cache / wheel.name)
    (cache / (wheel.name + ".sha256")).write_text(digest + "\n")
    return digest


def _bar_package(pkgs, tmp: Path):
    """A stand-in for a set's library: libbar.so.1 in $out/lib, from a local source tree."""
    src = tmp / "bar-src" / "lib"
    shared_lib(src / "libbar.so.1", BAR_C, "libbar.so.1")
    return mk_derivation(pkgs, {
        "pname": "bar", "version": "1", "stdenvCc": None, "src": src.parent,
        "dontConfigure": True, "dontBuild": True, "installPhase": 'cp -r lib "$out/"',
    })


@pytest.fixture
def rewired(tmp_path):
    """(pkgs, store, the demo package's attrs) with the demo wheel cached and the bar library built."""
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "driverLibDir": "/opt/driver/lib"})
    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", demo_files(tmp_path))
    sha = _cache_wheel(wheel)
    with Store.open(store_dir) as store:
        yield pkgs, store, {
            "pname": "demo", "version": "1.0",
            "wheel": {"file": wheel.name, "sha256": sha},
            "buildInputs": [_bar_package(pkgs, tmp_path)],
            "pythonRemoveDeps": ["nvidia-*", "cuda-toolkit"],
            "wheelSubstitutions": [INERT],
            "wheelRemove": ["demo/bin/ptxas"],
            "wheelLinks": {"demo/bin/ptxas": "/bin/true"},
            "pythonImportsCheck": ["demo"],
        }


def _python311(pkgs):
    python = pkgs.python3
    if not str(python.version).startswith("3.11"):
        pytest.skip(f"the demo wheel is cp311; python3 here is {python.version}")
    return python


def test_wheel_rewired_to_the_set_and_the_driver(rewired, tmp_path):
    pkgs, store, attrs = rewired
    python = _python311(pkgs)
    pkg = rewired_wheel(pkgs.config, python, attrs)
    realise(store, [pkg.derivation])
    site = Path(pkg.out) / "lib" / "python3.11" / "site-packages"
    lib = site / "demo" / "lib" / "libdemo.so"
    info = read_elf(lib)
    bar = attrs["buildInputs"][0]
    # DT_RPATH -> a RUNPATH of exactly the library's provider, $ORIGIN and the driver dir: no nvidia/ entry.
    assert info.rpath == []
    assert info.runpath == [f"{bar.out}/lib", "$ORIGIN", "/opt/driver/lib"]
    # Requirements the set stands in for are gone, the others and the description kept.
    metadata = (site / "demo-1.0.dist-info" / "METADATA").read_text()
    assert "Requires-Dist: filelock" in metadata
    assert "Requires-Dist: nvidia" not in metadata.split("\n\n")[0]
    assert "Requires-Dist: cuda-toolkit" not in metadata
    assert "Requires-Dist: nvidia-cublas in the description" in metadata
    # The bundled tool replaced by a link; the preload inert even with a decoy nvidia/cu13/lib on sys.path.
    assert os.readlink(site / "demo" / "bin" / "ptxas") == "/bin/true"
    decoy = tmp_path / "decoy"
    (decoy / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    shutil.copy(tmp_path / "bar" / "libbar.so.1", decoy / "nvidia" / "cu13" / "lib" / "libbar.so.1")
    run = subprocess.run(
        ["env", "-i", f"PYTHONPATH={site}:{decoy}", python.hostPaths["python3"], "-c",
         "import demo; print(demo.preloaded(), demo.LIB.foo(7))"],
        capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["[]", "42"]
    # RECORD is true again: every row's digest is the file's now.
    record = (site / "demo-1.0.dist-info" / "RECORD").read_text().splitlines()
    rows = {line.split(",")[0]: line.split(",")[1] for line in record}
    assert rows["demo/lib/libdemo.so"] == _digest(lib.read_bytes())
    assert rows["demo/__init__.py"] == _digest((site / "demo" / "__init__.py").read_bytes())
    assert rows["demo-1.0.dist-info/METADATA"] == _digest(metadata.encode())
    assert rows["demo/bin/ptxas"] == ""  # a link into another path: no digest
    assert any(name.endswith(".pyc") for name in rows)  # byte code compiled after the fixup, and recorded


def test_a_wheel_with_a_wrong_record_is_refused_with_both_digests(tmp_path):
    files = demo_files(tmp_path)
    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", files, tamper="demo/__init__.py")
    with pytest.raises(WheelContentsError) as error:
        install_wheel(wheel, site=tmp_path / "site", prefix=tmp_path / "prefix")
    message = str(error.value)
    assert "demo/__init__.py does not match its RECORD hash" in message
    assert _digest(b"not these bytes") in message and _digest(INIT.encode()) in message


def test_a_wheel_unlike_its_pin_is_refused_with_both_hashes(tmp_path):
    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", demo_files(tmp_path))
    actual = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with pytest.raises(WheelContentsError) as error:
        install_wheel(wheel, site=tmp_path / "site", prefix=tmp_path / "prefix", sha256="ab" * 32)
    assert "ab" * 32 in str(error.value) and actual in str(error.value)


@pytest.mark.parametrize("bad", [
    {"unlisted": "demo/__init__.py"},  # a member RECORD does not vouch for
    {"extra": ("../escape.py", b"x")},  # a path climbing out of site-packages
    {"extra": ("/abs.py", b"x")},
])
def test_hostile_wheels_are_refused_before_writing(tmp_path, bad):
    files = demo_files(tmp_path)
    if "extra" in bad:
        name, data = bad["extra"]
        files[name] = (data, 0o644)
    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", files, unlisted=bad.get("unlisted"))
    with pytest.raises(WheelContentsError):
        install_wheel(wheel, site=tmp_path / "site", prefix=tmp_path / "prefix")
    assert not (tmp_path / "escape.py").exists() and not Path("/abs.py").exists()


def test_a_symlink_member_is_refused(tmp_path):
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        info = zipfile.ZipInfo("demo/link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
        archive.writestr("demo-1.0.dist-info/RECORD", f"demo/link,{_digest(b'/etc/passwd')},11\n")
    with pytest.raises(WheelContentsError, match="not a regular file"):
        install_wheel(wheel, site=tmp_path / "site", prefix=tmp_path / "prefix")


def test_surgery_that_matches_nothing_fails_the_build(rewired):
    pkgs, store, attrs = rewired
    python = _python311(pkgs)
    pkg = rewired_wheel(pkgs.config, python, {**attrs, "pythonRemoveDeps": ["nvidia-*", "jax-cuda13-plugin"]})
    with pytest.raises(BuildError, match="jax-cuda13-plugin match"):
        realise(store, [pkg.derivation])


def test_wheel_tags_are_checked_against_the_interpreter(rewired):
    pkgs, _store, attrs = rewired
    python = pkgs.python3
    other = "cp312" if not str(python.version).startswith("3.12") else "cp311"
    pkg = rewired_wheel(pkgs.config, python, {**attrs, "wheel": {"file": f"demo-1.0-{other}-{other}-linux_x86_64.whl",
                                                                  "sha256": "0" * 64}})
    with pytest.raises(EvalError, match="is not for CPython"):
        pkg.drvPath
    assert wheel_suits("x-1-py3-none-any.whl", "3.12") and wheel_suits("x-1-cp311-cp311-linux_x86_64.whl", "3.11")
    assert not wheel_suits("x-1-cp311-cp311-linux_x86_64.whl", "3.12")


def test_pinned_wheel_cache_entry_with_another_hash_is_not_used(tmp_path):
    from cudapkgs.fetch.pinned_wheels import PinnedWheel, cached_pinned_wheel

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "demo-1.0-py3-none-any.whl").write_bytes(b"PK")
    (cache / "demo-1.0-py3-none-any.whl.sha256").write_text("cd" * 32 + "\n")
    assert cached_pinned_wheel(PinnedWheel("demo-1.0-py3-none-any.whl", "ab" * 32), cache) is None
    assert cached_pinned_wheel(PinnedWheel("demo-1.0-py3-none-any.whl", "cd" * 32), cache) is not None
    with pytest.raises(FetchError, match="not a wheel file name"):
        PinnedWheel("../../etc/passwd", "ab" * 32)


def test_a_link_to_a_file_its_input_lacks_fails_the_build(rewired):
    # A ptxas link into an input that has no ptxas (an nvcc without it) is a build error, not a dangling link.
    pkgs, store, attrs = rewired
    python = _python311(pkgs)
    pkg = rewired_wheel(pkgs.config, python, {**attrs, "wheelLinks": {"demo/bin/ptxas": "/nonexistent/bin/ptxas"}})
    with pytest.raises(BuildError, match="the target does not exist"):
        realise(store, [pkg.derivation])


def _nvcc_wheel_package(pkgs, tmp_path, files):
    """NVIDIA's nvcc-cu12 wheel, synthetic (`files` below nvidia/cuda_nvcc/), as `nvidia_wheel` builds it."""
    from cudapkgs.builders.rewired_wheel import nvidia_wheel

    names = {f"nvidia/cuda_nvcc/{k}": (v, 0o755 if k.startswith("bin/") else 0o644) for k, v in files.items()}
    wheel = make_wheel(tmp_path / "nvidia_cuda_nvcc_cu12-12.9.86-py3-none-manylinux2014_x86_64.whl", names)
    _cache_wheel(wheel)
    return nvidia_wheel(pkgs.config, {
        "pname": "cuda_nvcc_wheel", "version": "12.9.86", "outputs": ["out"],
        "nvidiaWheel": {"project": "nvidia-cuda-nvcc-cu12", "version": "12.9.86", "cudaMajor": 12},
        "wheelRequire": ["bin/ptxas", "nvvm/libdevice/libdevice.10.bc"],
        "meta": {"platforms": ["x86_64-linux"]},
    })


NVCC12 = {"bin/ptxas": b"#!/bin/sh\necho ptxas\n", "nvvm/libdevice/libdevice.10.bc": b"BC",
          "include/crt/host_config.h": b"/* crt */\n"}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the synthetic wheel is tagged x86_64")
def test_the_nvcc_wheel_is_laid_out_as_a_prefix_and_must_have_ptxas(tmp_path):
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    with Store.open(store_dir) as store:
        good = _nvcc_wheel_package(pkgs, tmp_path, NVCC12)
        realise(store, [good.derivation])
        out = Path(good.out)
        assert (out / "bin" / "ptxas").read_bytes() == NVCC12["bin/ptxas"] and os.access(out / "bin" / "ptxas", os.X_OK)
        assert (out / "include" / "crt" / "host_config.h").is_file() and not (out / "bin" / "nvcc").exists()
    # The same derivation from a wheel without ptxas (a fresh store: the first is valid in the other).
    shutil.rmtree(Path(os.environ["XDG_CACHE_HOME"]) / "cudapkgs" / "wheels")
    (tmp_path / "nvidia_cuda_nvcc_cu12-12.9.86-py3-none-manylinux2014_x86_64.whl").unlink()
    other_dir = tmp_path / "other-store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(other_dir)})
    with Store.open(other_dir) as store:
        lacking = _nvcc_wheel_package(pkgs, tmp_path, {k: v for k, v in NVCC12.items() if k != "bin/ptxas"}
                                      | {"bin/other": b"x"})
        with pytest.raises(BuildError, match="wheelRequire: .* lacks bin/ptxas"):
            realise(store, [lacking.derivation])


def test_the_import_check_runs_beside_the_record_rewrite(rewired, monkeypatch):
    """torch's 2 s import and its RECORD rewrite overlap; a failing import still fails the build."""
    import threading

    from cudapkgs.builders import rewired_wheel_steps as steps
    from cudapkgs.hooks import python_record

    pkgs, store, attrs = rewired
    pkg = rewired_wheel(pkgs.config, _python311(pkgs), attrs)
    importing = threading.Event()
    seen: list[bool] = []
    check, rewrite = steps._import_check, python_record.rewrite_record

    def slow_check(*args):
        importing.set()
        check(*args)

    def waiting_rewrite(*args):
        seen.append(importing.wait(20))  # the sequential order would wait here in vain
        return rewrite(*args)

    monkeypatch.setattr(steps, "_import_check", slow_check)
    monkeypatch.setattr(python_record, "rewrite_record", waiting_rewrite)
    realise(store, [pkg.derivation])
    assert seen == [True]


def test_a_failing_import_check_fails_the_build(rewired):
    pkgs, store, attrs = rewired
    pkg = rewired_wheel(pkgs.config, _python311(pkgs), {**attrs, "pythonImportsCheck": ["demo.nothing_here"]})
    with pytest.raises(BuildError, match="pythonImportsCheck: import demo.nothing_here failed"):
        realise(store, [pkg.derivation])


def test_a_packages_own_post_fixup_keeps_the_finish_phase(rewired):
    """The run-path check, RECORD rewrite, byte code and import check were the rewired wheel's postFixup,
    which a package's own postFixup (given, or by override_attrs) replaced: the wheel was registered
    unchecked (issue 30 follow-up, item 5). They are a phase of their own after the fixup
    (preDistPhases), and the package's postFixup runs too."""
    from cudapkgs.builders.rewired_wheel import FINISH_PHASE
    from cudapkgs.realise import install_ahead

    assert install_ahead._FINISH_PHASE == FINISH_PHASE
    pkgs, store, attrs = rewired
    python = _python311(pkgs)
    mine = 'echo mine > "$out/post-fixup-ran"'
    given = rewired_wheel(pkgs.config, python, {**attrs, "pythonImportsCheck": ["demo.nothing_here"], "postFixup": mine})
    overridden = rewired_wheel(pkgs.config, python, {**attrs, "pythonImportsCheck": ["demo.nothing_here"]}
                               ).override_attrs({"postFixup": mine})
    for pkg in (given, overridden):
        assert pkg.derivation.attrs["preDistPhases"] == [FINISH_PHASE]
        with pytest.raises(BuildError, match="pythonImportsCheck: import demo.nothing_here failed"):
            realise(store, [pkg.derivation])
        assert not store.is_valid(pkg.out)
    good = rewired_wheel(pkgs.config, python, {**attrs, "postFixup": mine})
    realise(store, [good.derivation])
    site = Path(good.out) / "lib" / "python3.11" / "site-packages"
    assert Path(good.out, "post-fixup-ran").read_text() == "mine\n"
    assert any(row.split(",")[0].endswith(".pyc")
               for row in (site / "demo-1.0.dist-info" / "RECORD").read_text().splitlines())


def test_the_imports_check_does_not_import_a_module_of_the_working_directory(tmp_path, monkeypatch):
    """``python3 -c "import m"`` puts the working directory first on sys.path: a module of that name
    there (the user's checkout) passed the check of a package that does not have it."""
    from cudapkgs.builders.rewired_wheel_steps import RewireError, _import_check

    site = tmp_path / "out" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "notinsite.py").write_text("")
    monkeypatch.chdir(cwd)
    env = {"PATH": os.path.dirname(sys.executable)}
    with pytest.raises(RewireError, match="import notinsite failed"):
        _import_check("notinsite", site, env, io.StringIO())


def test_tree_state_lists_every_entry_once_without_following_links(tmp_path):
    """`_tree_state` (what `PreparedInstall.changed_since` compares): every entry by its path relative to the
    root, a directory reached through a link not entered, a change deep down seen."""
    from cudapkgs.builders.rewired_wheel_steps import _tree_state

    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "m.py").write_text("x = 1\n")
    (root / "top.txt").write_text("t")
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    os.symlink(outside, root / "a" / "linked")
    state = _tree_state(root)
    assert sorted(state) == [".", "a", "a/b", "a/b/m.py", "a/linked", "top.txt"]
    reference = {os.path.relpath(os.path.join(d, n), root): os.lstat(os.path.join(d, n))
                 for d, dirs, files in os.walk(root) for n in (*dirs, *files)}
    assert {rel: state[rel][0] for rel in reference} == {rel: st.st_ino for rel, st in reference.items()}
    (root / "a" / "b" / "new.py").write_text("")
    after = _tree_state(root)
    assert set(after) - set(state) == {"a/b/new.py"} and after["a/b"] != state["a/b"]


def _import_check_site(tmp_path, body: str):
    """A site-packages whose module ``hang`` runs `body` (Python) when imported; the env to check it with."""
    site = tmp_path / "out" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "hang.py").write_text(body)
    return site, {"PATH": os.path.dirname(sys.executable)}


def _ended(pid: int) -> bool:
    import time

    for _ in range(1000):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.01)
    return False


def test_an_import_check_past_its_time_is_killed_with_what_it_started(tmp_path, monkeypatch):
    """The check's process group is killed past `IMPORT_CHECK_TIMEOUT`, a child it started included (the old
    code killed the interpreter alone) and the build fails naming the module."""
    from cudapkgs.builders import rewired_wheel_steps as steps

    pid_file = tmp_path / "child.pid"
    site, env = _import_check_site(tmp_path, (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(120)\n"))
    monkeypatch.setattr(steps, "IMPORT_CHECK_TIMEOUT", 3, raising=False)
    with pytest.raises((steps.RewireError, subprocess.TimeoutExpired)) as raised:
        steps._import_check("hang", site, env, io.StringIO())
    child = int(pid_file.read_text())
    ended = _ended(child)
    if not ended:
        os.kill(child, signal.SIGKILL)
    assert ended, "the check's child outlived the check"
    assert raised.type is steps.RewireError and "import hang did not finish within 3 s" in str(raised.value)


def test_an_import_check_past_its_time_ends_though_an_escaped_child_holds_its_output(tmp_path, monkeypatch):
    """A child the import started in a session of its own (out of the killed group) keeps the output pipe
    open: after the kill, the check read that pipe to its end with no bound, for as long as the child lived."""
    import threading

    from cudapkgs.builders import rewired_wheel_steps as steps

    pid_file = tmp_path / "escaped.pid"
    site, env = _import_check_site(tmp_path, (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(120)\n"))
    monkeypatch.setattr(steps, "IMPORT_CHECK_TIMEOUT", 2)
    monkeypatch.setattr(steps, "_AFTER_KILL_S", 1, raising=False)
    raised: list[BaseException] = []

    def check() -> None:
        try:
            steps._import_check("hang", site, env, io.StringIO())
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            raised.append(error)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    thread.join(30)
    try:
        assert not thread.is_alive(), "the check still waits for the escaped child's end of its output"
        assert raised and isinstance(raised[0], steps.RewireError) and "did not finish within 2 s" in str(raised[0])
    finally:
        if pid_file.is_file():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def _kill_cudapkgs_once_written(site: Path, env: dict[str, str], pid_file: Path) -> None:
    """Run an import check of module ``hang`` in `site` under a cudapkgs process of its own, and SIGKILL
    that process once the module has written `pid_file` (or after 20 s)."""
    import time

    parent = subprocess.Popen([sys.executable, "-c", (
        "import io, sys\n"
        "from pathlib import Path\n"
        "from cudapkgs.builders.rewired_wheel_steps import _import_check\n"
        f"_import_check('hang', Path({str(site)!r}), {env!r}, io.StringIO())\n")],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        for _ in range(2000):
            if pid_file.is_file() and pid_file.read_text().strip():
                break
            time.sleep(0.01)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()


def test_an_import_check_dies_with_cudapkgs(tmp_path):
    """cudapkgs SIGKILLed during ``python3 -c "import torch"``: the check (and what it started) ends with it."""
    pid_file = tmp_path / "check.pid"
    site, env = _import_check_site(tmp_path, (
        "import os, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(120)\n"))
    _kill_cudapkgs_once_written(site, env, pid_file)
    check = int(pid_file.read_text())
    ended = _ended(check)
    if not ended:
        os.kill(check, signal.SIGKILL)
    assert ended, "the import check outlived cudapkgs"


_DAEMON = (  # the import starts a daemon the classic way: double fork, setsid, and returns
    "import os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        open({pid_file!r}, 'w').write(str(os.getpid()))\n"
    "        time.sleep(120)\n"
    "    os._exit(0)\n"
    "for _ in range(1000):\n"
    "    if os.path.exists({pid_file!r}) and open({pid_file!r}).read():\n"
    "        break\n"
    "    time.sleep(0.01)\n")


def _daemon_ended(pid_file) -> bool:
    daemon = int(pid_file.read_text())
    ended = _ended(daemon)
    if not ended:
        os.kill(daemon, signal.SIGKILL)
    return ended


@pytest.mark.parametrize("then", ["returns", "hangs"])
def test_a_daemon_an_import_check_started_ends_with_the_check(tmp_path, monkeypatch, then):
    """A module whose import starts a daemon (double fork, setsid: out of the check's session and group)
    left it running after the check, whether the import returned or was killed past its time (the group
    kill does not reach it).  The checking interpreter is now a child subreaper: the daemon is re-parented
    to it and killed when the import ends or is cut off."""
    from cudapkgs.builders import rewired_wheel_steps as steps

    pid_file = tmp_path / "daemon.pid"
    site, env = _import_check_site(tmp_path, _DAEMON.format(pid_file=str(pid_file))
                                   + ("time.sleep(120)\n" if then == "hangs" else ""))
    monkeypatch.setattr(steps, "IMPORT_CHECK_TIMEOUT", 3)
    monkeypatch.setattr(steps, "_AFTER_KILL_S", 2, raising=False)
    if then == "returns":
        steps._import_check("hang", site, env, io.StringIO())
    else:
        with pytest.raises(steps.RewireError, match="did not finish within 3 s"):
            steps._import_check("hang", site, env, io.StringIO())
    assert _daemon_ended(pid_file), "the daemon the import started outlived the check"


def test_a_process_an_import_check_started_from_a_thread_ends_with_the_check(tmp_path, monkeypatch):
    """The reaper looked first at the main thread's children only (/proc/self/task/<pid>/children): a process
    the import started from another thread, in a session of its own, was taken for nothing left."""
    from cudapkgs.builders import rewired_wheel_steps as steps

    pid_file = tmp_path / "daemon.pid"
    site, env = _import_check_site(tmp_path, (
        "import subprocess, sys, threading\n"
        "def start():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True,\n"
        "                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"    open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "thread = threading.Thread(target=start)\n"
        "thread.start()\n"
        "thread.join()\n"))
    monkeypatch.setattr(steps, "IMPORT_CHECK_TIMEOUT", 20)
    steps._import_check("hang", site, env, io.StringIO())
    assert _daemon_ended(pid_file), "the process started from a thread outlived the check"


def test_a_daemon_an_import_check_started_dies_with_cudapkgs(tmp_path):
    """cudapkgs SIGKILLed while an import check runs: the group's SIGIO did not reach a daemon the import
    started in a session of its own.  The checker's watcher kills it."""
    pid_file = tmp_path / "daemon.pid"
    site, env = _import_check_site(tmp_path, _DAEMON.format(pid_file=str(pid_file)) + "time.sleep(120)\n")
    _kill_cudapkgs_once_written(site, env, pid_file)
    assert _daemon_ended(pid_file), "the daemon the import started outlived cudapkgs"


def test_a_rewired_wheel_loses_its_bin_byte_code_and_keeps_a_bare_pyc(tmp_path):
    """As the source-built install (and Nixpkgs' pythonRemoveBinBytecodePhase): every .pyc under $out/bin goes
    with the shipped __pycache__ ones; a bare .pyc in site-packages stays (pypa/installer keeps it)."""
    import io

    from cudapkgs.builders.rewired_wheel_steps import install_tree

    files = {
        "demo/__init__.py": (b"X = 1\n", 0o644),
        "demo/bare.pyc": (b"\x00" * 16 + b"sourceless", 0o644),
        "demo/__pycache__/__init__.cpython-311.pyc": (b"\x00" * 16 + b"shipped", 0o644),
        "demo-1.0.data/scripts/tool": (b"#!/bin/sh\necho tool\n", 0o755),
        "demo-1.0.data/scripts/helper.pyc": (b"\x00" * 16 + b"in bin", 0o644),
        "demo-1.0.dist-info/METADATA": (b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n", 0o644),
        "demo-1.0.dist-info/WHEEL": (b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n", 0o644),
    }
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", files)
    digest = _cache_wheel(wheel)
    out = tmp_path / "out"
    site = out / "lib" / "python3.11" / "site-packages"
    log = io.StringIO()
    install_tree({"wheel": {"file": wheel.name, "sha256": digest}}, site, out, log)
    assert (out / "bin" / "tool").is_file() and not (out / "bin" / "helper.pyc").exists()
    assert not (site / "demo" / "__pycache__" / "__init__.cpython-311.pyc").exists()
    assert (site / "demo" / "bare.pyc").read_bytes().endswith(b"sourceless")
    assert "2 __pycache__ (or bin/) .pyc file(s) removed" in log.getvalue()


def test_an_import_check_runs_under_the_supervisor_where_o_async_is_missing(tmp_path, monkeypatch):
    """Without O_ASYNC or F_SETOWN (not Linux), popen_group starts the supervisor instead, which keeps the
    lifeline: the check was given the literal placeholder for its descriptor and failed on it."""
    import fcntl

    from cudapkgs.builders import rewired_wheel_steps as steps

    site, env = _import_check_site(tmp_path, "VALUE = 1\n")
    monkeypatch.delattr(fcntl, "F_SETOWN")
    log = io.StringIO()
    steps._import_check("hang", site, env, log)  # the module imports: no error
