#!/usr/bin/env bash
# On the lent GPU machine: keep what one call carried of .carry/NAME/PART (pack_shell_extras.py) in
# /tmp/carry/NAME/extra/, where run_gpu_proof.sh looks (torch-ext/ or shell/, wheels/, cache/cudapkgs/wheels/);
# a cpython-3.12.1.tar.gz is unpacked at / (the closure's bin/python3 links to /root/.pyenv/versions/3.12.1)
# unless that interpreter is there already. Safe to repeat.
# usage: bash bench/device/stash_extra.sh NAME PART     (carry .carry/NAME/PART)
set -euo pipefail
name=${1:?NAME}; part=${2:?PART}
src=.carry/$name/$part; dest=/tmp/carry/$name/extra
[ -d "$src" ] || { echo "$src was not carried" >&2; exit 2; }
mkdir -p "$dest"
for item in torch-ext shell wheels cache; do
  if [ -d "$src/$item" ] && [ ! -L "$src/$item" ]; then
    cp -R --no-dereference "$src/$item" "$dest/" && echo "kept $item: $(find "$dest/$item" -type f | wc -l) file(s)"
  fi
done
tarball=$src/cpython-3.12.1.tar.gz
if [ -f "$tarball" ] && [ ! -x /root/.pyenv/versions/3.12.1/bin/python3.12 ]; then
  tar -C / --no-same-owner -xzf "$tarball" && echo "unpacked CPython 3.12.1 at /root/.pyenv/versions/3.12.1"
fi
du -sh "$dest"
