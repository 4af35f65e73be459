"""A rewired wheel whose library needs a Python dependency's library (torchvision's _C.so needs torch's
torch/lib/libc10.so) builds with no attribute (Nixpkgs' addAutoPatchelfSearchPath, done for every Python
dependency: hooks/python_lib_dirs); a bundled copy of a set's library under a hashed soname is replaced by
the set's (wheelReplaceNeeded + wheelRemove, as torchvision's libcudart.<hash>.so.13) (issue 31, part 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.builders.rewired_wheel import rewired_wheel
from cudapkgs.elf.read import read_elf
from cudapkgs.errors import CudapkgsError
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent))  # the demo wheel helpers
sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))  # elf_builders
from elf_builders import shared_lib  # noqa: E402
from test_rewired_wheel import _bar_package, _cache_wheel, _python311, make_wheel  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc", path="/usr/bin:/bin") is None, reason="needs gcc in /usr/bin")

WHEEL_TAG = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"


def _wheel(tmp: Path, name: str, files: dict[str, tuple[bytes, int]]) -> Path:
    info = f"{name}-1.0.dist-info"
    return make_wheel(tmp / f"{name}-1.0-cp311-cp311-linux_x86_64.whl", {
        **files,
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n\n".encode(), 0o644),
        f"{info}/WHEEL": (WHEEL_TAG, 0o644),
    }, dist_info=info)


@pytest.fixture
def setup(tmp_path):
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "driverLibDir": "/opt/driver/lib"})
    python = _python311(pkgs)
    # "torch": a library in its site-packages (dep/lib/libdep.so), not in $out/lib
    build = tmp_path / "build"
    libdep = shared_lib(build / "dep" / "libdep.so", "int dep(int x) { return x + 40; }\n", "libdep.so")
    dep_wheel = _wheel(tmp_path, "dep", {"dep/__init__.py": (b"", 0o644), "dep/lib/libdep.so": (libdep.read_bytes(), 0o755)})
    # the set's library (libbar.so.1) and the wheel's bundled copy of it under a hashed soname
    bar = _bar_package(pkgs, tmp_path)
    copy = shared_lib(build / "copy" / "libbar.abc123.so.1", "int bar(int x) { return x * 100; }\n", "libbar.abc123.so.1")
    ext = shared_lib(build / "user" / "_ext.so",
                     "int dep(int); int bar(int);\nint ext(int x) { return dep(x) + bar(x); }\n", "_ext.so",
                     f"-L{libdep.parent}", "-ldep", f"-L{copy.parent}", "-l:libbar.abc123.so.1")
    assert {"libdep.so", "libbar.abc123.so.1"} <= set(read_elf(ext).needed)
    user_wheel = _wheel(tmp_path, "user", {
        "user/__init__.py": (b"import ctypes, os\nEXT = ctypes.CDLL(os.path.join(os.path.dirname(__file__), '_ext.so'))\n",
                             0o644),
        "user/_ext.so": (ext.read_bytes(), 0o755),
        "user.libs/libbar.abc123.so.1": (copy.read_bytes(), 0o755),
    })
    dep = rewired_wheel(pkgs.config, python, {"pname": "dep", "version": "1.0",
                                              "wheel": {"file": dep_wheel.name, "sha256": _cache_wheel(dep_wheel)},
                                              "pythonImportsCheck": ["dep"]})
    base = {"pname": "user", "version": "1.0", "wheel": {"file": user_wheel.name, "sha256": _cache_wheel(user_wheel)},
            "pythonImportsCheck": ["user"]}
    with Store.open(store_dir) as store:
        yield pkgs, python, store, dep, bar, base


def test_a_python_dependencys_library_serves_a_wheels_needed_and_a_bundled_copy_is_the_sets(setup):
    pkgs, python, store, dep, bar, base = setup
    user = rewired_wheel(pkgs.config, python, {
        **base, "dependencies": [dep], "buildInputs": [bar],
        "wheelReplaceNeeded": {"user/_ext.so": {"libbar.abc123.so.1": "libbar.so.1"}},
        "wheelRemove": ["user.libs/libbar.abc123.so.1"]})
    realise(store, [user.derivation])
    site = Path(user.out) / "lib" / "python3.11" / "site-packages"
    info = read_elf(site / "user" / "_ext.so")
    dep_lib = f"{dep.out}/lib/python3.11/site-packages/dep/lib"
    assert "libbar.so.1" in info.needed and "libbar.abc123.so.1" not in info.needed
    assert dep_lib in info.runpath and f"{bar.out}/lib" in info.runpath
    assert not (site / "user.libs").exists() or not any((site / "user.libs").iterdir())
    assert "libbar.abc123" not in (site / "user-1.0.dist-info" / "RECORD").read_text()
    # it runs: libdep from the dependency, libbar the set's (bar(1) = 6 there, 100 in the copy)
    done = subprocess.run(["env", "-i", f"PYTHONPATH={site}:{dep.out}/lib/python3.11/site-packages",
                           python.hostPaths["python3"], "-c", "import user; print(user.EXT.ext(1))"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(41 + 6)


def test_without_the_dependency_the_library_is_unresolved_and_a_wrong_rename_is_refused(setup):
    pkgs, python, store, dep, bar, base = setup
    alone = rewired_wheel(pkgs.config, python, {**base, "buildInputs": [bar]})
    with pytest.raises(CudapkgsError, match="libdep.so"):
        realise(store, [alone.derivation])
    wrong = rewired_wheel(pkgs.config, python, {
        **base, "dependencies": [dep], "buildInputs": [bar],
        "wheelReplaceNeeded": {"user/_ext.so": {"libcudart.zzz.so.13": "libcudart.so.13"}}})
    with pytest.raises(CudapkgsError, match=r"wheelReplaceNeeded: user/_ext.so has no DT_NEEDED libcudart.zzz.so.13"):
        realise(store, [wrong.derivation])
    assert not store.is_valid(wrong.out)
