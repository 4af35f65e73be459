#!/usr/bin/env bash
# On the lent H200: unpack the saxpy closure at its store path, run it, check it on the CPU.
#
# usage: bash bench/device/run_saxpy.sh [DIR]   (DIR: what pack_saxpy.py wrote; default build/saxpy-h200)
# Writes run.log and closure.txt under $OUT (else /tmp/saxpy-run). Exit status: saxpy's, else the check's.
set -uo pipefail
dir=${1:-build/saxpy-h200}
out=${OUT:-/tmp/saxpy-run}
here=$(cd "$(dirname "$0")" && pwd)
n=$((1 << 24))

main() {
  echo "== machine"
  uname -srm
  nvidia-smi || true
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv || true
  echo "== closure"
  cat "$dir/closure.txt"
  cp "$dir/closure.txt" "$out/closure.txt"
  local store
  store=$(dirname "$(head -n1 "$dir/closure.txt")")
  [ ! -e "$store" ] || echo "note: $store already exists here"
  tar -xzf "$dir/closure.tar.gz" -C / || return 3
  local saxpy
  saxpy="$(cat "$dir/saxpy-path")/bin/saxpy"
  ls -l "$saxpy"
  echo "== dynamic libraries (no LD_LIBRARY_PATH)"
  env -u LD_LIBRARY_PATH ldd "$saxpy"
  echo "== run"
  echo "+ $saxpy $n /tmp/saxpy-y.f32"
  env -u LD_LIBRARY_PATH "$saxpy" "$n" /tmp/saxpy-y.f32
  local status=$?
  echo "exit status: $status"
  [ "$status" -eq 0 ] || return "$status"
  echo "== check against the CPU"
  python3 "$here/check_saxpy.py" /tmp/saxpy-y.f32 "$n" || return 4
  echo "== wall time of the whole program, 3 runs"
  TIMEFORMAT='%R s'
  for _ in 1 2 3; do time env -u LD_LIBRARY_PATH "$saxpy" "$n" - >/dev/null; done
}

mkdir -p "$out"
main 2>&1 | tee "$out/run.log"
exit "${PIPESTATUS[0]}"
