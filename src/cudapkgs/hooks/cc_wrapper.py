"""cc-wrapper / ld-wrapper: the host compiler wrapped so that linked store libraries get a RUNPATH.

Nixpkgs: pkgs/build-support/cc-wrapper/ and pkgs/build-support/bintools-wrapper/
(ld-wrapper.sh adds ``-rpath DIR`` for each ``-L DIR`` holding a library it links).

The wrapper is a small bash script per compiler name (``cc``, ``c++``, ``gcc``,
``g++``; ``clang``, ``clang++`` for Clang) that calls the real compiler.  On a
link (no ``-c``/``-S``/``-E``/``-M``), for every ``-lNAME`` (or a ``.so`` given
by path) it finds the first directory holding ``libNAME.so`` among the ``-L``
arguments, ``NIX_LDFLAGS``'s ``-L`` entries and ``LIBRARY_PATH``, and adds
``-Wl,-rpath,DIR`` when DIR is under ``$NIX_STORE``.  A ``stubs`` directory
(``…/stubs`` or inside a ``…-stubs`` output) is never added: a library linked
from there is the driver's at run time, so ``$CUDAPKGS_DRIVER_DIR`` is added in
its place.  So a program linked in `cudapkgs shell` runs outside it too, with
no LD_LIBRARY_PATH.  In builds the fixup's autoPatchelf then trims each RUNPATH
to the directories actually needed.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

__all__ = ["MARKER", "names", "setup", "wrapper_script"]

#: A cc-wrapper output holds this file (JSON: the wrapped compiler).
MARKER = "nix-support/cc-wrapper.json"

_SCRIPT = r"""#!/bin/bash
# cudapkgs cc-wrapper for @DESC@: a run path for every store library directory linked from.
real=@REAL@
link=1
[ $# -eq 0 ] && link=0
for a in "$@"; do
  case "$a" in
    -c|-S|-E|-M|-MM|-fsyntax-only|-v|--version|-dumpversion|-dumpfullversion|-dumpmachine|-print-*|--print-*) link=0 ;;
  esac
done
if [ "$link" = 0 ] || [ -z "${NIX_STORE:-}" ]; then
  exec "$real" "$@"
fi
dirs=()
libs=()
files=()
prev=
for a in "$@"; do
  case "$prev" in
    -L) dirs+=("$a"); prev=; continue ;;
    -l) libs+=("$a"); prev=; continue ;;
  esac
  case "$a" in
    -L|-l) prev=$a ;;
    -L*) dirs+=("${a#-L}") ;;
    -l*) libs+=("${a#-l}") ;;
    /*.so|/*.so.*) files+=("$a") ;;
  esac
done
for w in ${NIX_LDFLAGS:-}; do
  case "$w" in -L?*) dirs+=("${w#-L}") ;; esac
done
IFS=: read -r -a lp <<< "${LIBRARY_PATH:-}"
dirs+=("${lp[@]}")
rpaths=()
add_rpath() {
  local d=$1 r
  case "$d" in "$NIX_STORE"/*) ;; *) return 0 ;; esac
  case "$d/" in
    */stubs/*|*-stubs/*) d=${CUDAPKGS_DRIVER_DIR:-}; [ -n "$d" ] || return 0 ;;
  esac
  for r in "${rpaths[@]}"; do [ "$r" = "$d" ] && return 0; done
  rpaths+=("$d")
}
for l in "${libs[@]}"; do
  case "$l" in :*) f=${l#:} ;; *) f=lib$l.so ;; esac
  for d in "${dirs[@]}"; do
    if [ -n "$d" ] && [ -e "$d/$f" ]; then add_rpath "$d"; break; fi
  done
done
for f in "${files[@]}"; do add_rpath "${f%/*}"; done
extra=()
for r in "${rpaths[@]}"; do extra+=("-Wl,-rpath,$r"); done
exec "$real" "$@" "${extra[@]}"
"""


def names(kind: str) -> tuple[tuple[str, bool], ...]:
    """(file name, is C++) for the wrapper scripts of a compiler family ("gcc" or "clang")."""
    base = (("cc", False), ("c++", True))
    if kind == "clang":
        return (*base, ("clang", False), ("clang++", True))
    return (*base, ("gcc", False), ("g++", True))


def wrapper_script(real: str, description: str) -> str:
    """The wrapper's bash text around the compiler at `real` (an absolute path)."""
    if not os.path.isabs(real):
        raise ValueError(f"cc-wrapper: the wrapped compiler must be an absolute path, got {real!r}")
    return _SCRIPT.replace("@REAL@", shlex.quote(real)).replace("@DESC@", description.replace("\n", " "))


def find_wrapper(paths: list[str]) -> str | None:
    """The first of `paths` that is a cc-wrapper output."""
    return next((p for p in paths if os.path.isfile(os.path.join(p, MARKER))), None)


def setup(env: dict[str, str], closures: Any, *, store_dir: str | None, driver_dir: str | None) -> None:
    """The wrapper's variables: NIX_STORE (which dirs get a run path), the driver dir, CC and CXX."""
    if store_dir and not env.get("NIX_STORE"):
        env["NIX_STORE"] = store_dir
    if driver_dir and not env.get("CUDAPKGS_DRIVER_DIR"):
        env["CUDAPKGS_DRIVER_DIR"] = driver_dir
    wrapper = find_wrapper(closures.native)
    if wrapper is not None:
        env["CC"] = os.path.join(wrapper, "bin", "cc")
        env["CXX"] = os.path.join(wrapper, "bin", "c++")
