"""cudapkgs: Nixpkgs' CUDA package sets as a Python library.

    >>> import cudapkgs
    >>> pkgs = cudapkgs.import_pkgs(config={"cudaCapabilities": ["8.9"]}, system="x86_64-linux")
    >>> pkgs.cudaPackages_12_8.flags.gencode
    ['-gencode=arch=compute_89,code=sm_89', '-gencode=arch=compute_89,code=compute_89']

The Python API is `cudapkgs.api` (``from cudapkgs.api import mk_derivation, lazy``); its
names are also attributes of this package (``cudapkgs.mk_derivation``).  Imports are lazy,
so that `cudapkgs eval` starts fast: importing this package imports no other module.  The
import paths of before the layout move are answered by `cudapkgs.old_paths`, through a
finder this package puts last on `sys.meta_path`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    from .api import *

#: The Python API (documented in `cudapkgs.api`): name -> the module that defines it (where the
#: module is ``cudapkgs.NAME``, the name is that module).  Here, so that ``cudapkgs.NAME`` is answered
#: without importing `cudapkgs.api`, and a submodule name probed by ``from . import x`` costs nothing.
_API: dict[str, str] = {
    "import_pkgs": "cudapkgs.top_level",
    "Scope": "cudapkgs.lib.customisation",
    "AttrSet": "cudapkgs.lib.lazy",
    "lazy": "cudapkgs.lib.lazy",
    "Package": "cudapkgs.package",
    "mk_derivation": "cudapkgs.stdenv",
    "build_python_package": "cudapkgs.builders.python",
    "with_packages": "cudapkgs.builders.python",
    "fetchurl": "cudapkgs.fetch.fetchurl",
    "fetch_from_github": "cudapkgs.fetch.github",
    "fetch_pypi": "cudapkgs.fetch.pypi",
    **dict.fromkeys(("get_output", "get_dev", "get_lib", "get_bin", "get_include", "get_static"),
                    "cudapkgs.build_inputs"),
    "version_older": "cudapkgs.lib.versions",
    "version_at_least": "cudapkgs.lib.versions",
    "licenses": "cudapkgs.licenses",
    "Store": "cudapkgs.store.store",
    "open_store": "cudapkgs.store",
    "realise": "cudapkgs.realise.realise",
    "open_cache": "cudapkgs.store.caches",
    "SecretKey": "cudapkgs.store.caches.signing",
    "PublicKey": "cudapkgs.store.caches.signing",
    **dict.fromkeys(("CudapkgsError", "UsageError", "ConfigError", "EvalError", "AttributeMissingError",
                     "InfiniteRecursionError", "MissingArgumentError", "FailedAssertionsError",
                     "UnfreeLicenseError", "UnavailablePackageError", "ManifestError", "FetchError",
                     "HashMismatchError", "StoreError"), "cudapkgs.errors"),
    "BuildError": "cudapkgs.realise.errors",
    "BuildFailed": "cudapkgs.realise.errors",
    "UserFileError": "cudapkgs.user_files",
}

#: names that are `cudapkgs.api`'s only: ``cudapkgs.realise`` is a package of cudapkgs
_NOT_AT_TOP = frozenset({"realise"})



def _api_value(name: str) -> Any:
    """The object `_API` names (imported on first use)."""
    module = _API[name]
    __import__(module)
    loaded = sys.modules[module]
    return loaded if module == f"cudapkgs.{name}" else getattr(loaded, name)


def __getattr__(name: str) -> Any:
    if name in _API and name not in _NOT_AT_TOP:
        return _api_value(name)
    raise AttributeError(f"module 'cudapkgs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | (set(_API) - _NOT_AT_TOP))


class _OldPathFinder:
    """Last on `sys.meta_path`, so asked only about a module no other finder found: a
    ``cudapkgs.*`` name is handed to `cudapkgs.old_paths` (imported then, not at start-up)."""

    cudapkgs_old_paths = True  # marks it, so that it is installed once per process

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith("cudapkgs."):
            return None
        from .old_paths import find_spec

        return find_spec(fullname)


def _leave() -> None:
    """Takes the finder off `sys.meta_path` at exit: held there, it keeps this package's globals
    (and through them every module of the evaluation) alive into the interpreter's shutdown,
    which then took about 1 ms longer at the end of every `cudapkgs eval` (docs/bench-startup.md)."""
    for finder in [f for f in sys.meta_path if getattr(f, "cudapkgs_old_paths", False)]:
        sys.meta_path.remove(finder)


if not any(getattr(finder, "cudapkgs_old_paths", False) for finder in sys.meta_path):
    import atexit  # built in: nothing to read

    sys.meta_path.append(_OldPathFinder)
    atexit.register(_leave)
