#!/usr/bin/env bash
# On the lent H200: substitute the saxpy closure from a file:// binary cache (signature checked), run it,
# check it on the CPU; first show that a tampered narinfo in that cache is refused and registers nothing.
#
# usage: bash bench/device/substitute_saxpy.sh DIR
#   DIR holds cache/ (made here with `cudapkgs copy --to file://DIR/cache --sign-key …`), public.key,
#   saxpy-path and whl/ (cryptography, cffi, pycparser, zstandard wheels for the device's Python 3.12).
# Writes run.log under $OUT (else /tmp/substitute-run).
set -uo pipefail
dir=$(cd "${1:?usage: substitute_saxpy.sh DIR}" && pwd)
out=${OUT:-/tmp/substitute-run}
repo=$(cd "$(dirname "$0")/../.." && pwd)
n=$((1 << 24))

main() {
  [ -n "${NO_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$dir"/whl/*.whl || return 10
  export PYTHONPATH=/tmp/site:$repo/src${PYTHONPATH:+:$PYTHONPATH}
  local saxpy store key cache narinfo
  saxpy=$(cat "$dir/saxpy-path")
  store=$(dirname "$saxpy")
  key=$(cat "$dir/public.key")
  cache="file://$dir/cache"
  narinfo="$dir/cache/$(basename "$saxpy" | cut -c1-32).narinfo"
  echo "== machine"; uname -srm; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv || true
  echo "== the cache"; ls -l "$dir/cache" "$dir/cache/nar"; cat "$narinfo"
  [ ! -e "$store" ] || echo "note: $store already exists here"

  echo "== 1. a tampered narinfo (NarSize changed, the signature kept) is refused"
  cp "$narinfo" /tmp/narinfo.orig
  sed -i -E 's/^NarSize: ([0-9]+)$/NarSize: \18/' "$narinfo"
  grep NarSize "$narinfo"
  python3 -m cudapkgs copy --store "$store" --from "$cache" --trusted-public-key "$key" "$saxpy"
  echo "exit status: $? (expected 1)"
  python3 -m cudapkgs path-info --store "$store" "$saxpy" && return 11
  echo "valid paths in $store after the refusal: $(python3 -c "import sys; sys.path[:0]='$PYTHONPATH'.split(':'); from cudapkgs.store.store import Store; print(len(Store.open('$store').all_paths()))")"
  cp /tmp/narinfo.orig "$narinfo"

  echo "== 2. an untrusted key is refused"
  python3 -m cudapkgs copy --store "$store" --from "$cache" --trusted-public-key "other-1:$(python3 -c 'import base64,os; print(base64.b64encode(os.urandom(32)).decode())')" "$saxpy"
  echo "exit status: $? (expected 1)"

  echo "== 3. the genuine narinfo: substitute the closure (signature checked), then run"
  python3 -m cudapkgs copy --store "$store" --from "$cache" --trusted-public-key "$key" "$saxpy" || return 12
  python3 -m cudapkgs path-info --store "$store" -rsSH "$saxpy" || return 13
  python3 -m cudapkgs verify --store "$store" || return 14
  echo "== dynamic libraries (no LD_LIBRARY_PATH)"
  env -u LD_LIBRARY_PATH ldd "$saxpy/bin/saxpy"
  echo "+ $saxpy/bin/saxpy $n /tmp/saxpy-y.f32"
  env -u LD_LIBRARY_PATH "$saxpy/bin/saxpy" "$n" /tmp/saxpy-y.f32
  local status=$?
  echo "exit status: $status"
  [ "$status" -eq 0 ] || return "$status"
  python3 "$repo/bench/device/check_saxpy.py" /tmp/saxpy-y.f32 "$n" || return 4
}

mkdir -p "$out"
main 2>&1 | tee "$out/run.log"
exit "${PIPESTATUS[0]}"
