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
