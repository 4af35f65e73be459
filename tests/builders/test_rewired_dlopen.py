"""The rewiring JAX's and CuPy's wheels get, on small synthetic wheels: a library that only dlopens the
set's library (no DT_NEEDED, as every ``.so`` of jax-cuda13-pjrt/plugin) finds it through the appended
RUNPATH, and the real substitutions (jax.py's nvidia/ preload, cupy.py's pathfinder calls) apply to
files shaped as the wheels' and leave working Python."""

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
from cudapkgs.pkgs.python_modules import cupy as cupy_module
from cudapkgs.pkgs.python_modules import jax as jax_module
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent))  # the demo wheel helpers
sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))  # elf_builders
from elf_builders import shared_lib  # noqa: E402
from test_rewired_wheel import _bar_package, _cache_wheel, _python311, make_wheel  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc", path="/usr/bin:/bin") is None, reason="needs gcc in /usr/bin")

# As xla_cuda_plugin.so: no DT_NEEDED but libc; the CUDA library is dlopened by soname.
PROBE_C = """\
#include <dlfcn.h>
int probe(void) {
    void *h = dlopen("libbar.so.1", RTLD_NOW);
    if (!h) return -1;
    int (*bar)(int) = (int (*)(int))dlsym(h, "bar");
    return bar ? bar(1) : -2;
}
"""
# jax_plugins/xla_cuda13/__init__.py's _load (0.10.2), the shape that matters: import nvidia.<module> from
# sys.path and load its libraries first.
PLUGIN_INIT = '''\
import ctypes, importlib, os, pathlib

def _load(module, libraries):
  try:
    m = importlib.import_module(f"nvidia.{module}")
  except ImportError:
    m = None
  for lib in libraries:
    if m is not None:
      ctypes.cdll.LoadLibrary(pathlib.Path(m.__path__[0]) / "lib" / lib)

_load("cu13", ["libbar.so.1"])
PLUGIN = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "xla_cuda_plugin.so"))
'''
METADATA = "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n\n"
WHEEL = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"


def _plugin_wheel(tmp: Path) -> Path:
    so = tmp / "plugin" / "xla_cuda_plugin.so"
    shared_lib(so, PROBE_C, "xla_cuda_plugin.so", "-ldl", "-Wl,--disable-new-dtags",
               "-Wl,-rpath,$ORIGIN/../../nvidia/cu13/lib:$ORIGIN/../nvidia/cu13/lib")
    assert read_elf(so).rpath and not any("bar" in n for n in read_elf(so).needed)
    return make_wheel(tmp / "demo-1.0-cp311-cp311-linux_x86_64.whl", {
        "jax_plugins/xla_cuda13/__init__.py": (PLUGIN_INIT.encode(), 0o644),
        "jax_plugins/xla_cuda13/xla_cuda_plugin.so": (so.read_bytes(), 0o755),
        "demo-1.0.dist-info/METADATA": (METADATA.encode(), 0o644),
        "demo-1.0.dist-info/WHEEL": (WHEEL, 0o644),
    })


@pytest.fixture
def plugin(tmp_path):
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir), "driverLibDir": "/opt/driver/lib"})
    python = _python311(pkgs)
    wheel = _plugin_wheel(tmp_path)
    sha = _cache_wheel(wheel)
    bar = _bar_package(pkgs, tmp_path)
    base = {"pname": "demo", "version": "1.0", "wheel": {"file": wheel.name, "sha256": sha}, "buildInputs": [bar],
            "wheelSubstitutions": [dict(jax_module._INERT)], "pythonImportsCheck": ["jax_plugins"]}
    with Store.open(store_dir) as store:
        yield pkgs, python, store, bar, base


def _run(python, site: Path, extra: str = "") -> list[str]:
    code = "import jax_plugins.xla_cuda13 as p; print(p.PLUGIN.probe()); " \
           "print(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libbar' in l}))"
    done = subprocess.run(["env", "-i", f"PYTHONPATH={site}{extra}", python.hostPaths["python3"], "-c", code],
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_a_dlopening_library_finds_the_sets_library_through_the_appended_run_path(plugin, tmp_path):
    pkgs, python, store, bar, base = plugin
    pkg = rewired_wheel(pkgs.config, python, {**base, "appendRunpaths": [f"{bar.out}/lib", "$ORIGIN"]})
    realise(store, [pkg.derivation])
    site = Path(pkg.out) / "lib" / "python3.11" / "site-packages"
    info = read_elf(site / "jax_plugins" / "xla_cuda13" / "xla_cuda_plugin.so")
    assert info.rpath == [] and info.runpath == [f"{bar.out}/lib", "$ORIGIN", "/opt/driver/lib"]
    # A decoy nvidia/cu13/lib on PYTHONPATH whose libbar answers 7, not 6: the inert _load never loads it.
    decoy = tmp_path / "decoy" / "nvidia" / "cu13"
    shared_lib(decoy / "lib" / "libbar.so.1", "int bar(int x) { return x * 7; }\n", "libbar.so.1")
    (decoy / "__init__.py").write_text("")
    (decoy.parent / "__init__.py").write_text("")
    probe, maps = _run(python, site, f":{tmp_path / 'decoy'}")
    assert probe == "6" and maps == repr([f"{bar.out}/lib/libbar.so.1"])
    assert "cudapkgs: the set's libraries come through RUNPATHs" in (site / "jax_plugins/xla_cuda13/__init__.py").read_text()


def test_without_the_appended_run_path_the_dlopen_finds_nothing(plugin):
    # What Nixpkgs' patchelf --add-rpath is for: DT_NEEDED alone gives the fixup no directory to add.
    pkgs, python, store, bar, base = plugin
    pkg = rewired_wheel(pkgs.config, python, base)
    realise(store, [pkg.derivation])
    site = Path(pkg.out) / "lib" / "python3.11" / "site-packages"
    assert f"{bar.out}/lib" not in read_elf(site / "jax_plugins" / "xla_cuda13" / "xla_cuda_plugin.so").runpath
    assert _run(python, site)[0] == "-1"


# The shapes of the CuPy 14.2.0 functions the substitutions edit (cupy_backends/cuda/libs/__init__.py,
# cupy/cuda/__init__.py, cupy/_environment.py), with the exact lines they anchor on.
CUPY_FILES = {
    "cupy_backends/cuda/libs/__init__.py": '''\
import importlib as _importlib
import os as _os
is_hip = False
if not is_hip:
    from cuda import pathfinder as _pathfinder
_submodules = ('cublas',)
def __getattr__(name):
    if not is_hip and name in _submodules:
        try:
            pathfinder_name = name
            _pathfinder.load_nvidia_dynamic_lib(pathfinder_name)
        except _pathfinder.DynamicLibNotFoundError as e:
            raise ImportError(str(e)) from e
        return "loaded " + name
    raise AttributeError(name)
''',
    "cupy/cuda/__init__.py": '''\
def load(key):
    if key == 'cufft':
        if True:
            from cuda import pathfinder
            try:
                pathfinder.load_nvidia_dynamic_lib("cufft")
            except pathfinder.DynamicLibNotFoundError as e:
                raise ImportError(str(e)) from e
        return "cufft"
''',
    "cupy/_environment.py": '''\
import os, shutil
def _get_cuda_path():
    from cuda.pathfinder import (
        load_nvidia_dynamic_lib, DynamicLibNotFoundError)
    try:
        nvrtc = load_nvidia_dynamic_lib('nvrtc')
    except DynamicLibNotFoundError:
        pass
    if os.path.exists('/usr/local/cuda'):
        return '/usr/local/cuda'
    return None
def _get_nvcc_path():
    from cuda.pathfinder import find_nvidia_binary_utility
    nvcc_path = find_nvidia_binary_utility('nvcc')
    return nvcc_path
def _log(msg):
    pass
def _preload_library(lib):
    _log(f'Preloading triggered for library: {lib}')
    from cuda.pathfinder import load_nvidia_dynamic_lib
    return load_nvidia_dynamic_lib(lib)
''',
}


def test_cupys_pathfinder_calls_are_made_inert_and_the_cuda_path_is_the_sets(tmp_path, monkeypatch):
    # No module `cuda` anywhere: before the substitutions each of these raised ModuleNotFoundError.
    monkeypatch.setitem(sys.modules, "cuda", None)
    namespaces = {}
    before = {"cupy_backends/cuda/libs/__init__.py": lambda ns: None,  # fails at import already
              "cupy/cuda/__init__.py": lambda ns: ns["load"]("cufft"),
              "cupy/_environment.py": lambda ns: ns["_get_cuda_path"]()}
    for entry in cupy_module._substitutions("/store/abc-cuda_cudart-13.0.96-include"):
        text = CUPY_FILES[entry["file"]]
        with pytest.raises(ImportError):
            namespace: dict = {}
            exec(compile(text, entry["file"], "exec"), namespace)  # noqa: S102 - our own test text
            before[entry["file"]](namespace)
        for old, new in entry["replace"]:
            assert old in text, (entry["file"], old)
            text = text.replace(old, new)
        namespaces[entry["file"]] = namespace = {}
        exec(compile(text, entry["file"], "exec"), namespace)  # noqa: S102
    assert namespaces["cupy_backends/cuda/libs/__init__.py"]["__getattr__"]("cublas") == "loaded cublas"
    assert namespaces["cupy/cuda/__init__.py"]["load"]("cufft") == "cufft"
    environment = namespaces["cupy/_environment.py"]
    assert environment["_get_cuda_path"]() == "/store/abc-cuda_cudart-13.0.96-include"
    monkeypatch.setenv("PATH", os.fspath(tmp_path))  # no nvcc on PATH: None, never a guess
    assert environment["_get_nvcc_path"]() is None
    assert environment["_preload_library"]("cublas") is None
