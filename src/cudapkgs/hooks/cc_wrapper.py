"""cc-wrapper / ld-wrapper: the host compiler wrapped so that linked store libraries get a RUNPATH.

Nixpkgs: pkgs/build-support/cc-wrapper/ and pkgs/build-support/bintools-wrapper/
(ld-wrapper.sh adds ``-rpath DIR`` for each ``-L DIR`` holding a library it links).

The wrapper is a small bash script per compiler name (``cc``, ``c++``, ``gcc``,
``g++``; ``clang``, ``clang++`` for Clang) that calls the real compiler with the
arguments it was given, plus ``-Wl,-rpath,DIR`` ones.  It first reads the
arguments as the compiler will: each ``@FILE`` is replaced by the words of that
response file (GCC's syntax: whitespace between words, ``'…'``/``"…"`` quotes and
backslash escapes, nested ``@FILE`` up to 10 deep, at most 2000 response files read in
all, as GCC's expandargv (libiberty/argv.c, whose ``iteration_limit`` is 2000: GCC 12 stops
with "too many @-files encountered"), and 16 MiB read in all), as Nixpkgs'
expandResponseParams does (pkgs/build-support/wrapper-common/utils.bash and
expand-response-params.c @1666f82b5d4eaeebab97fad801823d56febe5f3f), so a CMake
link through ``@linkLibs.rsp`` is seen in full; a ``@FILE`` that is not a
readable regular file is left as it is (GCC then takes it as a plain argument).
On a link (no ``-c``/``-S``/``-E``/``-M``), for every ``-lNAME`` (or a ``.so``
given by path) it finds the first directory holding ``libNAME.so`` among the
``-L`` arguments, ``NIX_LDFLAGS``'s ``-L`` entries and ``LIBRARY_PATH``, and adds
the directory it was found in when that is under ``$NIX_STORE``; a library found
inside a joined toolkit root (`hooks.cudatoolkit_root`, marked at its top) gets the
directory of its real file instead (links followed, one ``readlink`` for the link):
the program needs the library's own output, not the tree.  A ``stubs``
directory (``…/stubs`` or inside a ``…-stubs`` output, as found or as resolved)
is never added: a library linked from there is the driver's at run time, so
``$CUDAPKGS_DRIVER_DIR`` is added in its place.  So a program linked in
`cudapkgs shell` runs outside it too, with no LD_LIBRARY_PATH.  In builds the
fixup's autoPatchelf then trims each RUNPATH to the directories actually needed.
``NIX_DEBUG=1`` prints the arguments read and the run paths added on stderr.

Run paths given on the command line (``-Wl,-rpath,DIR[:DIR]``, ``-Wl,-rpath=DIR``, ``-Wl,-rpath
-Wl,DIR``, ``-Xlinker -rpath -Xlinker DIR``) are kept only where they name the store, the build's
own tree (``$NIX_BUILD_TOP``, ``$CUDAPKGS_BUILD_TREE`` (a shell's directory), ``$out``), ``$ORIGIN``
or the driver's directory; any other host directory is dropped with a warning on stderr, as
Nixpkgs' ld-wrapper drops run paths outside the store when ``NIX_ENFORCE_PURITY`` is on
(pkgs/build-support/bintools-wrapper/ld-wrapper.sh@6e369ff7, ``badPath``).  torch's CMake config, for one,
adds MKL's directories with an empty root (``/lib/intel64:/lib/intel64_win:/lib/win-x64``; Nixpkgs
patches torch's source instead, disable-cmake-mkl-rpath.patch): a program linked in a shell must
find its libraries in the store, not in whatever the host has there.  Response files are not
rewritten (CMake puts libraries there, not run paths).

useLibsFrom (Nixpkgs' backendStdenv: nvcc's older host compiler linking the default compiler's
C++ runtime, pkgs/development/cuda-modules/packages/backendStdenv.nix@c10e8fecb9071c4d786f84d2ee04a11122476e36):
the wrapper of such a compiler adds ``-L`` for the default compiler's libstdc++ directories to every
link, after the caller's arguments, and ``-Wl,-rpath`` for the one outside the loader's default
directories to every C++ link (`wrapper_script`'s `libs_from`), with or without ``NIX_STORE``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .cudatoolkit_root import JOINED_MARKER

__all__ = ["MARKER", "libs_from_run_path", "names", "setup", "wrapper_script"]

#: A cc-wrapper output holds this file (JSON: the wrapped compiler).
MARKER = "nix-support/cc-wrapper.json"

_SCRIPT = r"""#!/bin/bash
# cudapkgs cc-wrapper for @DESC@: a run path for every store library directory linked from.
real=@REAL@
if [ $# -eq 0 ] || [ -z "${NIX_STORE:-}" ]; then
  exec "$real" "$@"
fi
# Not a link, and no response file that could say otherwise: nothing to add (before the rest is read).
rsp=0 link=1
for a in "$@"; do
  case "$a" in
    @?*) rsp=1 ;;
    -c|-S|-E|-M|-MM|-fsyntax-only|-v|--version|-dumpversion|-dumpfullversion|-dumpmachine|-print-*|--print-*) link=0 ;;
  esac
done
if [ "$link" = 0 ]; then exec "$real" "$@"; fi
# Response files (@FILE, as CMake links with @linkLibs.rsp) are expanded for the decisions below,
# with GCC's syntax (Nixpkgs: wrapper-common/utils.bash expandResponseParams); the compiler still
# gets the arguments as they came.  One that cannot be read stays as it is, as GCC leaves it.
params=()
rsp_limit=16777216  # bytes left to read, over every response file
rsp_files=2000  # response files left to read (GCC's expandargv stops after 2000)
rsp_head=$'^([^\'"\\\\]*)[\'"\\\\]'
rsp_plain=$'^[^[:space:]\'"\\\\]+'
rsp_space='^[[:space:]]+'
rsp_escape=$'^\\\\(.)'
rsp_single=$'^\'(([^\'\\\\]|\\\\.)*)\''
rsp_double=$'^"(([^"\\\\]|\\\\.)*)"'
rsp_unescape=$'^([^\\\\]*)\\\\(.)(.*)$'
rsp_unquote() {  # $1: quoted text without its quotes -> REPLY, each \X read as X
  local rest=$1
  REPLY=
  while [[ $rest =~ $rsp_unescape ]]; do
    REPLY+=${BASH_REMATCH[1]}${BASH_REMATCH[2]}
    rest=${BASH_REMATCH[3]}
  done
  REPLY+=${rest%\\}  # a last lone backslash escapes nothing
}
rsp_words() {  # $1 text, $2 depth: its words (GCC's buildargv) -> expand_args
  local s=$1 depth=$2 head word n quote words=() IFS=$' \t\n\r\v\f' LC_ALL=C
  while [ -n "$s" ]; do
    if ! [[ $s =~ $rsp_head ]]; then  # no quote or backslash left: plain word splitting
      set -f; words+=($s); set +f
      break
    fi
    head=${BASH_REMATCH[1]}
    # The words before the first quote or backslash; the last of them if it runs into it is read below.
    word=
    [[ $head =~ [[:space:]]$ ]] || word=${head##*[[:space:]]}
    head=${head:0:${#head}-${#word}}
    set -f; words+=($head); set +f
    s=${s:${#head}}
    word=
    while [ -n "$s" ]; do
      if [[ $s =~ $rsp_plain ]]; then n=${#BASH_REMATCH[0]}; word+=${BASH_REMATCH[0]}
      elif [[ $s =~ $rsp_escape ]]; then n=${#BASH_REMATCH[0]}; word+=${BASH_REMATCH[1]}
      elif [[ $s =~ $rsp_single ]] || [[ $s =~ $rsp_double ]]; then
        n=${#BASH_REMATCH[0]}; rsp_unquote "${BASH_REMATCH[1]}"; word+=$REPLY
      elif [[ $s =~ $rsp_space ]]; then break
      else  # an unclosed quote or a last backslash: the rest, as GCC reads it
        quote=${s:0:1}
        [ "$quote" = '\' ] || { rsp_unquote "${s:1}"; word+=$REPLY; }
        s=; break
      fi
      s=${s:n}
    done
    words+=("$word")
  done
  if [[ $1 =~ @ ]]; then expand_args "$depth" "${words[@]}"; else params+=("${words[@]}"); fi
}
expand_args() {  # $1 depth, then arguments: each readable @FILE replaced by its words -> params
  local depth=$1 a f fd text
  shift
  for a in "$@"; do
    f=${a#@}
    if [ "$f" != "$a" ] && [ -n "$f" ] && [ "$depth" -lt 10 ] && [ "$rsp_files" -gt 0 ] && [ -f "$f" ] \
        && exec {fd}<"$f"; then
      # Counted and bounded in all, not per file: "@self @self @self" nested ten deep would
      # otherwise be 3^10 reads (the wrapper hung where GCC stops at once).
      rsp_files=$((rsp_files - 1))
      text=
      IFS= read -r -N "$rsp_limit" -u "$fd" text
      exec {fd}<&-
      if [ "${#text}" -lt "$rsp_limit" ]; then
        rsp_limit=$((rsp_limit - ${#text}))
        rsp_words "$text" $((depth + 1))
        continue
      fi
      rsp_limit=0
    fi
    params+=("$a")
  done
} 2>/dev/null
if [ "$rsp" = 1 ]; then expand_args 0 "$@"; else params=("$@"); fi
dirs=()
libs=()
files=()
prev=
for a in "${params[@]}"; do
  case "$prev" in
    -L) dirs+=("$a"); prev=; continue ;;
    -l) libs+=("$a"); prev=; continue ;;
  esac
  case "$a" in
    -c|-S|-E|-M|-MM|-fsyntax-only|-v|--version|-dumpversion|-dumpfullversion|-dumpmachine|-print-*|--print-*)
      exec "$real" "$@" ;;  # no link
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
found=()
for l in "${libs[@]}"; do
  case "$l" in :*) f=${l#:} ;; *) f=lib$l.so ;; esac
  for d in "${dirs[@]}"; do
    if [ -n "$d" ] && [ -e "$d/$f" ]; then found+=("$d/$f"); break; fi
  done
done
found+=("${files[@]}")
# Each library's real file decides its run path: one linked through a tree of links (a merged
# toolkit root) gets the directory it lives in, so the program needs the library, not the tree.
# Only a library found in a joined tree (marked at its top) is followed, with one readlink for all
# of them (the store's own real path first, for a store reached through a link).
real_files=("${found[@]}")
joined=0
for f in "${found[@]}"; do
  case "$f" in "$NIX_STORE"/?*/*) top=${f#"$NIX_STORE"/}; [ -e "$NIX_STORE/${top%%/*}/@JOINED@" ] && joined=1 ;; esac
done
if [ "$joined" = 1 ]; then
  mapfile -t resolved < <(readlink -f -- "$NIX_STORE" "${found[@]}" 2>/dev/null)
  if [ ${#resolved[@]} -eq $((${#found[@]} + 1)) ]; then
    for i in "${!found[@]}"; do
      r=${resolved[$((i + 1))]}
      case "$r" in "${resolved[0]}"/*) r=$NIX_STORE/${r#"${resolved[0]}"/} ;; esac
      real_files[$i]=$r
    done
  fi
fi
rpaths=()
in_store() { case "$1" in "$NIX_STORE"/*) return 0 ;; esac; return 1; }
is_stubs() { case "$1/" in */stubs/*|*-stubs/*) return 0 ;; esac; return 1; }
add_rpath() {
  local d=$1 r
  for r in "${rpaths[@]}"; do [ "$r" = "$d" ] && return 0; done
  rpaths+=("$d")
}
for i in "${!found[@]}"; do
  given=${found[$i]%/*}
  resolved=${real_files[$i]%/*}
  if is_stubs "$given" || is_stubs "$resolved"; then
    in_store "$given" || in_store "$resolved" || continue
    [ -n "${CUDAPKGS_DRIVER_DIR:-}" ] && add_rpath "$CUDAPKGS_DRIVER_DIR"
  elif in_store "$resolved"; then add_rpath "$resolved"
  elif in_store "$given"; then add_rpath "$given"
  fi
done
case ${NIX_DEBUG:-} in
  [1-9]*) { echo "cudapkgs cc-wrapper: arguments read (response files expanded):"; printf '  %q\n' "${params[@]}"
            echo "cudapkgs cc-wrapper: run paths added:"; printf '  %s\n' "${rpaths[@]}"; } >&2 ;;
esac
extra=()
for r in "${rpaths[@]}"; do extra+=("-Wl,-rpath,$r"); done
# Run paths asked for on the command line stay when they name the store, the build's own tree
# (NIX_BUILD_TOP, CUDAPKGS_BUILD_TREE, $out), $ORIGIN or the driver's directory; any other host
# directory (torch's CMake config adds MKL's /lib/intel64 with an empty root) is dropped, saying so.
rp_keep() {
  local t
  case "$1" in
    '$ORIGIN'|'$ORIGIN/'*|'${ORIGIN}'|'${ORIGIN}/'*|"$NIX_STORE"/*) return 0 ;;
  esac
  [ -n "${CUDAPKGS_DRIVER_DIR:-}" ] && [ "$1" = "$CUDAPKGS_DRIVER_DIR" ] && return 0
  for t in "${NIX_BUILD_TOP:-}" "${CUDAPKGS_BUILD_TREE:-}" "${out:-}"; do
    t=${t%/}
    [ -n "$t" ] || continue
    case "$1" in "$t"|"$t"/*) return 0 ;; esac
  done
  return 1
}
dropped=()
rp_filter() {  # $1: a colon-separated run path -> REPLY: the entries kept
  local e kept=() parts
  IFS=: read -r -a parts <<< "$1"
  for e in "${parts[@]}"; do
    [ -n "$e" ] || continue
    if rp_keep "$e"; then kept+=("$e"); else dropped+=("$e"); fi
  done
  local IFS=:
  REPLY="${kept[*]}"
}
join_commas() { local IFS=,; REPLY="$*"; }
args=()
pending=0  # a -Wl,...,-rpath whose directory is the next -Wl argument's first item
xl=0       # -Xlinker -rpath seen: the next -Xlinker's argument is the directory
skip=0
for ((i = 1; i <= $#; i++)); do
  a=${!i}
  if [ "$skip" -gt 0 ]; then skip=$((skip - 1)); continue; fi
  case "$a" in
    -Wl,*)
      IFS=, read -r -a items <<< "${a#-Wl,}"
      out_items=()
      for ((j = 0; j < ${#items[@]}; j++)); do
        it=${items[$j]}
        if [ "$pending" = 1 ]; then
          pending=0; rp_filter "$it"
          if [ -n "$REPLY" ]; then args+=("-Wl,-rpath"); out_items+=("$REPLY"); fi
          continue
        fi
        case "$it" in
          -rpath|--rpath)
            if [ $((j + 1)) -lt ${#items[@]} ]; then
              j=$((j + 1)); rp_filter "${items[$j]}"
              [ -n "$REPLY" ] && out_items+=("$it" "$REPLY")
            else
              pending=1
            fi ;;
          -rpath=*|--rpath=*)
            rp_filter "${it#*=}"
            [ -n "$REPLY" ] && out_items+=("${it%%=*}=$REPLY") ;;
          *) out_items+=("$it") ;;
        esac
      done
      if [ ${#out_items[@]} -gt 0 ]; then join_commas "${out_items[@]}"; args+=("-Wl,$REPLY"); fi
      ;;
    -Xlinker)
      n=$((i + 1)); next=${!n:-}
      if [ "$xl" = 1 ]; then
        xl=0; rp_filter "$next"; skip=1
        [ -n "$REPLY" ] && args+=(-Xlinker -rpath -Xlinker "$REPLY")
      elif [ "$next" = -rpath ] || [ "$next" = --rpath ]; then
        xl=1; skip=1
      else
        args+=("$a")
      fi ;;
    *) args+=("$a") ;;
  esac
done
[ "$pending" = 1 ] && args+=("-Wl,-rpath")
[ "$xl" = 1 ] && args+=(-Xlinker -rpath)
if [ ${#dropped[@]} -gt 0 ]; then
  echo "cudapkgs cc-wrapper: dropped run path entries outside the store and this build's tree: ${dropped[*]} (a program linked here finds its libraries in the store; CUDAPKGS_BUILD_TREE names the build's tree)" >&2
fi
exec "$real" "${args[@]}" "${extra[@]}"
"""

# useLibsFrom's part of the wrapper (`wrapper_script` with `libs_from`): the template above, lines of its
# head and its last line replaced, so a wrapper without useLibsFrom is byte for byte what it was (no rebuild of
# every package built with the host's default compiler).
_START = 'real=@REAL@\nif [ $# -eq 0 ] || [ -z "${NIX_STORE:-}" ]; then\n  exec "$real" "$@"\nfi\n'
_LINK_TEST = 'if [ "$link" = 0 ]; then exec "$real" "$@"; fi\n'
_LIBS_FROM_START = r"""real=@REAL@
# useLibsFrom (backendStdenv): another compiler's C++ runtime, given to every link after the
# arguments; its run path on links of C++ (this is a C++ driver, or -lstdc++ is named).
libs_from=(@LIBSFROM@)
libs_from_rpath=(@LIBSFROMRPATH@)
cxx_driver=@CXXDRIVER@
if [ $# -eq 0 ]; then exec "$real"; fi
"""
_LIBS_FROM_LINK = r"""[ "$cxx_driver" = 1 ] && libs_from+=("${libs_from_rpath[@]}")
if [ -z "${NIX_STORE:-}" ]; then exec "$real" "$@" "${libs_from[@]}"; fi
"""
_EXEC = 'exec "$real" "${args[@]}" "${extra[@]}"\n'
_LIBS_FROM_EXEC = 'exec "$real" "${args[@]}" "${extra[@]}" "${libs_from[@]}"\n'
assert _START in _SCRIPT and _LINK_TEST in _SCRIPT and "    @?*) rsp=1 ;;\n" in _SCRIPT and _SCRIPT.endswith(_EXEC)
_SCRIPT_LIBS_FROM = (_SCRIPT.replace(_START, _LIBS_FROM_START, 1)
                     .replace("    @?*) rsp=1 ;;\n", "    @?*) rsp=1 ;;\n    -lstdc++) cxx_driver=1 ;;\n", 1)
                     .replace(_LINK_TEST, _LINK_TEST + _LIBS_FROM_LINK, 1)[: -len(_EXEC)] + _LIBS_FROM_EXEC)


def names(kind: str) -> tuple[tuple[str, bool], ...]:
    """(file name, is C++) for the wrapper scripts of a compiler family ("gcc" or "clang")."""
    base = (("cc", False), ("c++", True))
    if kind == "clang":
        return (*base, ("clang", False), ("clang++", True))
    return (*base, ("gcc", False), ("g++", True))


def wrapper_script(real: str, description: str, *, libs_from: Mapping[str, Sequence[str]] | None = None,
                   cxx: bool = False) -> str:
    """The wrapper's bash text around the compiler at `real` (an absolute path).

    `libs_from` is useLibsFrom's C++ runtime (`cudapkgs.host.compiler.cxx_runtime`: ``libDirs``,
    ``runPath``, absolute directories): every link gets ``-L DIR`` for each of ``libDirs`` after
    its own arguments (Nixpkgs' cc-wrapper puts ``nix-support/cc-ldflags`` there, so a ``-L``
    the caller gives still comes first, and both come before the compiler's own directories), and a
    link of C++ (`cxx`: the ``c++``/``g++``/``clang++`` script, or ``-lstdc++`` named) gets
    ``-Wl,-rpath,DIR`` for each of ``runPath``. Raises ValueError for a relative `real` or
    directory, or one holding a comma (``-Wl,`` splits there)."""
    if not os.path.isabs(real):
        raise ValueError(f"cc-wrapper: the wrapped compiler must be an absolute path, got {real!r}")
    lib_dirs = list((libs_from or {}).get("libDirs") or ())
    run_path = list((libs_from or {}).get("runPath") or ())
    for directory in lib_dirs + run_path:
        if not isinstance(directory, str) or not os.path.isabs(directory) or "," in directory:
            raise ValueError(f"cc-wrapper: useLibsFrom's directories must be absolute paths without commas, "
                             f"got {directory!r}")
    flags = " ".join(shlex.quote(f"-L{d}") for d in lib_dirs)
    rpath = " ".join(shlex.quote(f"-Wl,-rpath,{d}") for d in run_path)
    template = _SCRIPT_LIBS_FROM if lib_dirs or run_path else _SCRIPT
    values = {"REAL": shlex.quote(real), "DESC": description.replace("\n", " "), "JOINED": JOINED_MARKER,
              "LIBSFROM": flags, "LIBSFROMRPATH": rpath, "CXXDRIVER": "1" if cxx else "0"}
    # One pass: a value (a path, the description) holding "@NAME@" is not substituted again.
    return re.sub(r"@(REAL|DESC|JOINED|LIBSFROMRPATH|LIBSFROM|CXXDRIVER)@", lambda m: values[m[1]], template)


def find_wrapper(paths: list[str]) -> str | None:
    """The first of `paths` that is a cc-wrapper output."""
    return next((p for p in paths if os.path.isfile(os.path.join(p, MARKER))), None)


def libs_from_run_path(paths: list[str]) -> list[str]:
    """The ``useLibsFrom.runPath`` directories the first cc-wrapper among `paths` (store paths) links
    with: the fixup searches them after the inputs' lib dirs, so the C++ runtime a program was linked
    against keeps its RUNPATH entry (without it autoPatchelf leaves libstdc++.so.6 to the host's
    loader, which finds the older one). Empty for no wrapper, no useLibsFrom, or a record that is
    not ours (larger than 64 KiB, not JSON, relative paths)."""
    import json

    wrapper = find_wrapper(paths)
    if wrapper is None:
        return []
    try:
        with open(os.path.join(wrapper, MARKER), "rb") as handle:
            data = handle.read(65537)
        info = json.loads(data) if len(data) <= 65536 else None
    except (OSError, ValueError):
        return []
    run_path = ((info or {}).get("useLibsFrom") or {}).get("runPath") if isinstance(info, dict) else None
    if not isinstance(run_path, list):
        return []
    return [d for d in run_path if isinstance(d, str) and os.path.isabs(d)]


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
