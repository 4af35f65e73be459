"""Bash functions every shell step of a build can call: substituteInPlace and patchShebangs.

Nixpkgs: pkgs/stdenv/generic/setup.sh (``substitute``, ``substituteInPlace`` with
``--replace-fail`` / ``--replace-warn`` / ``--replace-quiet`` / ``--subst-var``) and
pkgs/build-support/setup-hooks/patch-shebangs.sh.  ``--replace-fail`` (and the old
``--replace``, which here fails too) stops the build when the pattern is absent, naming the
file and the pattern.  patchShebangs rewrites ``#!/usr/bin/env NAME`` and ``#!/any/dir/NAME``
in executable files to NAME as found on the build's PATH (a store tool first), keeping the
arguments.
"""

from __future__ import annotations

__all__ = ["FUNCTIONS"]

FUNCTIONS = r"""
substituteInPlace() {
  local file="$1"; shift
  if [ ! -f "$file" ]; then echo "substituteInPlace: $file does not exist" >&2; return 1; fi
  local content; content="$(cat "$file"; printf x)"; content="${content%x}"
  while [ $# -gt 0 ]; do
    local mode="$1"
    case "$mode" in
      --replace-fail|--replace|--replace-warn|--replace-quiet)
        local old="$2" new="$3"; shift 3
        if [[ "$content" != *"$old"* ]]; then
          case "$mode" in
            --replace-warn) echo "substituteInPlace: warning: '$old' not found in $file" >&2 ;;
            --replace-quiet) ;;
            *) echo "substituteInPlace: '$old' not found in $file (--replace-fail)" >&2; return 1 ;;
          esac
        fi
        content="${content//"$old"/"$new"}" ;;
      --subst-var)
        local var="$2"; shift 2
        if [ -z "${!var+x}" ]; then echo "substituteInPlace: --subst-var $var: $var is not set" >&2; return 1; fi
        content="${content//"@$var@"/"${!var}"}" ;;
      *) echo "substituteInPlace: unknown argument $mode" >&2; return 1 ;;
    esac
  done
  printf '%s' "$content" > "$file"
}

patchShebangs() {
  local target f first interp args name found
  for target in "$@"; do
    while IFS= read -r -d '' f; do
      [ -x "$f" ] || continue
      IFS= read -r first < "$f" || true
      [[ "$first" == '#!'* ]] || continue
      read -r interp args <<< "${first#\#!}"
      if [ "${interp##*/}" = env ]; then read -r name args <<< "$args"; else name="${interp##*/}"; fi
      found="$(command -v "$name" || true)"
      if [ -z "$found" ]; then echo "patchShebangs: $f: $name not found on PATH, left as is" >&2; continue; fi
      [ "$found" = "$interp" ] && continue
      local rest; rest="$(tail -n +2 "$f"; printf x)"; rest="${rest%x}"
      printf '#!%s%s\n%s' "$found" "${args:+ $args}" "$rest" > "$f"
      echo "patchShebangs: $f: $first -> #!$found${args:+ $args}"
    done < <(find "$target" -type f -print0)
  done
}
"""
