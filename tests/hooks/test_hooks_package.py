"""`cudapkgs.hooks` re-exports the hooks' names, importing each hook module on first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    return done.stdout.strip()


def test_importing_the_package_imports_no_hook_and_no_elf_reader():
    out = _run("import sys, cudapkgs.hooks; print(sorted(m for m in sys.modules if m.startswith(('cudapkgs.hooks.', 'cudapkgs.elf'))))")
    assert out == "[]"


def test_a_name_is_the_hook_whether_or_not_its_module_was_imported_first():
    out = _run("import cudapkgs.hooks.fixup, cudapkgs.hooks.split_outputs\n"
               "from cudapkgs import hooks\n"
               "from cudapkgs.hooks import auto_patchelf, HOST_LIBS\n"
               "print(callable(hooks.fixup), type(hooks.fixup).__name__, type(hooks.split_outputs).__name__,\n"
               "      auto_patchelf.__module__, type(HOST_LIBS).__name__ != 'module', 'strip_stubs' in dir(hooks))")
    assert out == "True function function cudapkgs.hooks.auto_patchelf True True"


def test_every_name_of_all_resolves():
    out = _run("from cudapkgs import hooks\nprint(all(getattr(hooks, n) is not None for n in hooks.__all__), len(hooks.__all__))")
    assert out.startswith("True ")


# A build thread imports a hook module while another asks the package for one of its names:
# the module is in sys.modules from the start of its execution, so the name must wait for the
# import, not be looked up on the half-made module (a realisation with -j auto failed once with
# "partially initialized module 'cudapkgs.hooks.no_fhs_references' has no attribute
# 'check_no_fhs_references'"). The module's execution is held half way here until the second
# thread has either failed or is waiting.
_HALF_IMPORTED = r"""
import importlib.abc, importlib.machinery, sys, threading
NAME = "cudapkgs.hooks.no_fhs_references"
started, go = threading.Event(), threading.Event()

class Held(importlib.abc.Loader):
    def __init__(self, real):
        self.real = real
    def create_module(self, spec):
        return self.real.create_module(spec)
    def exec_module(self, module):
        started.set()
        go.wait()
        self.real.exec_module(module)

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = Held(spec.loader)
        return spec

sys.meta_path.insert(0, Finder())
from cudapkgs import hooks
importer = threading.Thread(target=lambda: __import__(NAME))
importer.start()
started.wait()
result = []
def ask():
    try:
        result.append(callable(hooks.check_no_fhs_references))
    except AttributeError as error:
        result.append(f"AttributeError: {error}")
asker = threading.Thread(target=ask)
asker.start()
asker.join(0.5)  # failed at once on the half-made module, or waiting for the import
go.set()
importer.join()
asker.join()
print(result)
"""


def test_a_name_asked_for_while_another_thread_imports_its_module_waits_for_the_import():
    assert _run(_HALF_IMPORTED) == "[True]"
