"""Import paths from before the layout of issue 19, and where they went.

Released modules (the evaluation language a package file imports: ``from cudapkgs.fixpoint
import lazy``) still import: the old name gives the new module itself, so every object is the
same one, with a `DeprecationWarning` naming the new path.  Moved internal modules (the
command line's, ELF work, the host probes) fail with an `ImportError` that names the
module to import instead.  The public Python API is `cudapkgs.api` (also ``cudapkgs.NAME``).

``cudapkgs/__init__`` puts a finder last on `sys.meta_path` that hands this module's
`find_spec` a ``cudapkgs.*`` name no other finder found: an import that works costs nothing
more, and this module is imported only then.  It imports no cudapkgs module.  Names that
left a module which is still there (the old ``cudapkgs.elf`` module became a
package) are answered by `moved_name`, from that module's ``__getattr__``.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
if TYPE_CHECKING:  # pragma: no cover
    from types import ModuleType
    from typing import Any

#: Released modules that moved (old dotted name -> new): the old name still imports, with a warning.
RELEASED: dict[str, str] = {
    "cudapkgs.fixpoint": "cudapkgs.lib.fixpoint",
    "cudapkgs.attrpath": "cudapkgs.lib.attrpath",
    "cudapkgs.versions": "cudapkgs.lib.versions",
    "cudapkgs.records": "cudapkgs.lib.records",
}

#: The verbs of the old ``realise/cli.py`` (then ``cli/realise.py``), one module each now.
_REALISE_VERBS = "cudapkgs.cli.build, cudapkgs.cli.shell, cudapkgs.cli.test and cudapkgs.cli.log"

#: Internal modules that moved (old dotted name -> new, or the new ones "A, B and C"): importing
#: the old name fails naming them.
INTERNAL: dict[str, str] = {
    "cudapkgs.elf_edit": "cudapkgs.elf.edit",
    "cudapkgs.link_stub": "cudapkgs.elf.link_stub",
    "cudapkgs.eval_cli": "cudapkgs.cli.eval",
    "cudapkgs.manifests_cli": "cudapkgs.cli.manifests",
    "cudapkgs.doctor_cli": "cudapkgs.cli.doctor",
    "cudapkgs.project_cli": "cudapkgs.cli.project",
    "cudapkgs.realise.cli": _REALISE_VERBS,
    "cudapkgs.cli.realise": _REALISE_VERBS,
    "cudapkgs.realise.whatif": "cudapkgs.cli.whatif",
    "cudapkgs.store.cli": "cudapkgs.cli.store",
    "cudapkgs.store.caches.cli": "cudapkgs.cli.caches",
    "cudapkgs.containers.cli": "cudapkgs.cli.containers",
    "cudapkgs.cuda.package_sets": "cudapkgs.package_sets",
    "cudapkgs.realise.host_compiler": "cudapkgs.host.compiler",
    "cudapkgs.pkgs.meta": "cudapkgs.meta",
    # was a package (cc_wrapper/__init__.py, cc_wrapper/package.py): both are stdenv.cc_wrapper now
    "cudapkgs.pkgs.cc_wrapper": "cudapkgs.stdenv.cc_wrapper",
}

#: Names that left a module still there (module -> name -> the module that holds it now).  Not
#: one may be a submodule's name: ``from cudapkgs.elf import patch`` is the module elf.patch now
#: (the old function is ``cudapkgs.elf.patch.patch``).
NAMES: dict[str, dict[str, str]] = {
    "cudapkgs.elf": {
        **dict.fromkeys(("ELF_MAGIC", "ElfInfo", "NotAnElfError", "is_elf", "iter_elf_files", "read_elf"),
                        "cudapkgs.elf.read"),
        **dict.fromkeys(("PatchelfError", "PatchelfNotFoundError", "patchelf_binary", "patch_many",
                         "set_runpath", "set_interpreter"), "cudapkgs.elf.patch"),
    },
}


def _internal_message(old: str, new: str) -> str:
    what = "the command line's, which is no library" if new.startswith("cudapkgs.cli.") else "an internal module"
    return (f"No module named {old!r}: it moved to {new} ({what}); the Python API for package files "
            "and programs is cudapkgs.api")


class _Alias:
    """The loader of a released old name: the new module, put in the old name's place."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: Any) -> None:
        return None  # a throwaway module; exec_module replaces it

    def exec_module(self, module: ModuleType) -> None:
        import importlib
        import warnings

        new = importlib.import_module(self.new)
        # stacklevel 2 skips the import system's frames: the warning names the importing line
        warnings.warn(f"{module.__name__} is deprecated: import from {self.new} "
                      "(or the public names from cudapkgs.api)", DeprecationWarning, stacklevel=2)
        # the import system returns what sys.modules holds under the name once this returns
        sys.modules[module.__name__] = new


def find_spec(fullname: str) -> Any:
    """The answer of ``cudapkgs/__init__``'s finder for a module no other finder found: a spec
    aliasing a released old name to its new module; an `ImportError` naming the new
    module for an internal one; None for any other name."""
    new = RELEASED.get(fullname)
    if new is not None:
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, _Alias(new))
    new = INTERNAL.get(fullname)
    if new is not None:
        # ImportError, not ModuleNotFoundError: ``from cudapkgs import eval_cli`` would drop the latter's message
        raise ImportError(_internal_message(fullname, new), name=fullname)
    return None


def moved_name(module: str, name: str) -> Exception:
    """The exception for ``module.name`` read and missing: an `ImportError` naming where `NAMES` says
    the name went (it keeps its message through ``from module import name``, which an
    `AttributeError` would not), else Python's own `AttributeError`.  Returned for the caller's
    ``__getattr__`` to raise."""
    new = NAMES.get(module, {}).get(name)
    if new is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    return ImportError(f"cannot import name {name!r} from {module!r}: it moved to {new} "
                       f"(from {new} import {name})", name=module)
