"""The ``.pth`` line that keeps Python from writing byte code into the store.

Nix's store is a read-only mount; cudapkgs' store is read-only by its modes alone, which root
ignores.  A module whose ``.pyc`` is missing or stale is compiled when imported, and CPython then
writes ``__pycache__/<module>.<tag>.pyc`` beside the source (``SourceLoader.get_code`` calls
``SourceFileLoader._cache_bytecode``, Lib/importlib/_bootstrap_external.py, 3.10 to 3.13): as root,
into the store path, whose NAR hash no longer matched (`cudapkgs verify`: "hash-mismatch").

The interpreters cudapkgs sets up (``python.withPackages`` environments, `cudapkgs shell`'s venv)
carry `guard_line` in a ``.pth`` file of their own site-packages: ``site`` runs a ``.pth`` line that
starts with ``import`` (Python's documentation of the ``site`` module) before any package is imported.
It wraps ``_cache_bytecode`` so that a ``.pyc`` whose path is under the store is not written (the module
is compiled in memory, as with ``PYTHONDONTWRITEBYTECODE``), while every other ``.pyc`` (the user's own
code) is written as usual and the store's own ``.pyc`` files (compiled at build time,
`builders.python_bytecode`) are read as usual.  Of the alternatives, ``PYTHONDONTWRITEBYTECODE`` would
also stop caching the user's code, and ``PYTHONPYCACHEPREFIX`` / ``sys.pycache_prefix`` would make
Python ignore the store's ``__pycache__`` (it reads byte code only under the prefix then) and compile
every package again into the user's cache.

The guard is wherever ``site`` runs: ``python -I`` (and ``-E``, ``-s``) still runs ``site`` and the
environment's own ``.pth`` files (``-I`` drops the user's site-packages and PYTHON* variables, not
``site``).  Not guarded by it: ``python -S`` (no ``site``: but then the environment's packages are not on
``sys.path`` either, they come through its ``.pth``), an interpreter that reaches the store through
PYTHONPATH (the store's ``python3``, a link to the host's, with PYTHONPATH set to store
site-packages: no ``.pth`` there is run), and a tool writing files itself (``compileall``,
``py_compile``).  For the second, the environments cudapkgs makes with store site-packages on
PYTHONPATH (builds, ``cudapkgs shell --no-venv``) set ``PYTHONDONTWRITEBYTECODE=1`` when run as root
(`hooks.python_path`), the only user the store's modes do not stop; a root shell run by hand with
such a PYTHONPATH is left to its user (docs/security.md, "What a store owner must protect").
"""

from __future__ import annotations

__all__ = ["guard_line"]

# One line (site runs a .pth line as a whole); nothing imported that is not already loaded at startup.
# {store} is the store directory as a Python literal, or None: the parent of sys.prefix (the
# environment's own store path).
_LINE = ("import sys; exec(\"import os, sys\\n"
         "from importlib import _bootstrap_external as b\\n"
         "store = {store}\\n"
         "store = os.path.dirname(sys.prefix) if store is None else store\\n"
         "store = store.rstrip('/') + '/'\\n"
         "old = b.SourceFileLoader._cache_bytecode\\n"
         "if not getattr(old, '_cudapkgs_guard', False):\\n"
         "    def cache(self, source_path, bytecode_path, data, old=old, store=store):\\n"
         "        if not os.fspath(bytecode_path).startswith(store):\\n"
         "            return old(self, source_path, bytecode_path, data)\\n"
         "    cache._cudapkgs_guard = True\\n"
         "    b.SourceFileLoader._cache_bytecode = cache\\n"
         "\", {{}})\n")


def guard_line(store_dir: str | None = None) -> str:
    """The ``.pth`` line (ending in a newline) that keeps byte code out of `store_dir` (an absolute
    path; None: the parent directory of ``sys.prefix``, for an environment that is itself a store path).

    Raises ValueError for a `store_dir` that is not absolute or holds a newline or quote (it is
    written into the line as a Python literal).
    """
    if store_dir is not None and (not store_dir.startswith("/") or any(c in store_dir for c in "\n\r\"'\\")):
        raise ValueError(f"{store_dir!r}: not a store directory the byte code guard can name")
    return _LINE.format(store="None" if store_dir is None else repr(store_dir))
