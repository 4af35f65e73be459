#!/usr/bin/env bash
# On the lent GPU machine, after substitute_ml_env.sh NAME put the closure in its store and every piece of WHEELS
# arrived (receive_piece.sh; pack_ml_cache.py --bench-wheels WHEELS made them): issue 34 item 1 on its cores,
# bench/bench_substitute_ml.py (copy --from file://, copy --from http:// from cudapkgs serve --compression zstd, and
# uv pip install --offline --no-deps of the same wheels, uv's cache empty each run; alternating rounds, medians).
# usage: bash bench/device/run_substitute_bench.sh WHEELS [ROUNDS] [SETTLE_S]
# Logs: $OUT/substitute-bench.log (else /tmp/substitute-bench.log).
set -uo pipefail
name=${1:?WHEELS}; rounds=${2:-3}; settle=${3:-61}
here=$(cd "$(dirname "$0")" && pwd); repo=$(dirname "$(dirname "$here")")
dest=/tmp/carry/$name; x=$dest/x; log=${OUT:-/tmp}/substitute-bench.log
{
  python3 "$here/check_pieces.py" "$dest" || exit 3
  rm -rf "$x"; mkdir -p "$x"
  tar -C "$x" --no-same-owner -xf "$dest/closure.tar.zst" && rm -f "$dest/closure.tar.zst" || exit 4
  chmod +x "$x/uv"
  store=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["storeDir"])' "$dest/manifest.json")
  tops=$(python3 -c 'import json,sys; print(" ".join("--top " + r for r in json.load(open(sys.argv[1]))["roots"]))' "$dest/manifest.json")
  echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "the work directory's file system: $(findmnt -no FSTYPE,OPTIONS -T /tmp)"
  echo "uv: $("$x/uv" --version); wheels: $(ls "$x/wheels" | wc -l); load: $(cat /proc/loadavg)"
  PATH=$x:$PATH PYTHONPATH=$repo/src:/tmp/site PYTHONUNBUFFERED=1 python3 "$repo/bench/bench_substitute_ml.py" \
    --store "$store" $tops --wheel-dir "$x/wheels" -r "$rounds" --settle "$settle"
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
