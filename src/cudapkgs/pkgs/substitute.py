"""Shell helpers that from-source package expressions put in their patch phases.

`SUBSTITUTE_IN_PLACE` defines `substituteInPlace FILE --replace-fail OLD NEW ...`
with Nixpkgs' meaning (pkgs/stdenv/generic/setup.sh, `substituteInPlace` /
`substitute --replace-fail`): every OLD must occur in FILE, else the step fails
saying which pattern was missing; each occurrence is replaced. Expressions
prepend it to their `postPatch` text so that an upstream change that moves a
pattern fails the build instead of silently skipping the patch.
"""

SUBSTITUTE_IN_PLACE = r'''
substituteInPlace() {
  local file=$1; shift
  [ -f "$file" ] || { echo "substituteInPlace: $file does not exist" >&2; return 1; }
  while [ $# -gt 0 ]; do
    case $1 in
      --replace-fail)
        local old=$2 new=$3; shift 3
        OLD=$old NEW=$new python3 - "$file" <<'PY' || return 1
import os, sys
path = sys.argv[1]
old, new = os.environ["OLD"], os.environ["NEW"]
with open(path, encoding="utf-8", errors="surrogateescape") as f:
    text = f.read()
if old not in text:
    sys.exit(f"substituteInPlace: pattern {old!r} was not found in {path}")
with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
    f.write(text.replace(old, new))
PY
        ;;
      *) echo "substituteInPlace: unknown option $1" >&2; return 1 ;;
    esac
  done
}
'''
