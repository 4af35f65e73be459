#!/usr/bin/env bash
# On the lent GPU machine (16 cores, sm_90): build OpenCV with cudapkgs from the pieces pack_opencv.py
# made, then check cv2.cuda against the CPU from the store's Python under env -i.
#
# usage, one device call per piece first (each call carries one piece, .carry/opencv/opencv.tar.zst.partNN):
#   bash bench/device/run_opencv.sh stash          # copies the carried pieces (and SHA256SUMS, manifest,
#                                                  #   pywheels/) into /tmp/ocv-pieces; run with each piece
#   bash bench/device/run_opencv.sh build          # reassemble, check sha256, import, build (16 cores)
#   bash bench/device/run_opencv.sh check          # env -i: cv2.cuda vs CPU, speed, one libcudart
#   bash bench/device/run_opencv.sh start          # `build` in its own session (setsid), so that it outlives
#                                                  #   the call; the machine keeps it running while warm
#   bash bench/device/run_opencv.sh wait [SECONDS] # wait for that build (default 540 s), copy its logs to $OUT
# `all` = build then check in the foreground. Results under $OUT: build.log, build.time, check.json,
# check.log, machine.txt (also kept in /tmp/ocv-out between calls: $OUT is emptied before each).
set -uo pipefail
step=${1:-all}
pieces=/tmp/ocv-pieces
carry=${CARRY:-.carry/opencv}   # CARRY=.carry/opencv-no-cublas for that variant
keep=/tmp/ocv-out
out=${OUT:-$keep}
mkdir -p "$pieces" "$out" "$keep"

if [ "$step" = start ]; then
  rm -f "$keep/status"
  setsid nohup bash -c "OUT=$keep bash bench/device/run_opencv.sh build > $keep/run.log 2>&1; echo \$? > $keep/status" \
    > /dev/null 2>&1 < /dev/null &
  echo "started build in the background (pid $!); logs in $keep"
  exit 0
fi
if [ "$step" = wait ]; then
  limit=${2:-540}
  for ((i = 0; i < limit; i += 10)); do [ -f "$keep/status" ] && break; sleep 10; done
  cp "$keep"/*.log "$keep"/*.time "$keep"/*.txt "$out"/ 2>/dev/null
  tail -n 25 "$keep/run.log"
  if [ -f "$keep/status" ]; then echo "build exit status $(cat "$keep/status")"; exit "$(cat "$keep/status")"; fi
  echo "still building after ${limit}s"; exit 75
fi
manifest() { sed -n "s/^$1=//p" "$pieces/manifest.txt" | head -n 1; }

if [ "$step" = stash ]; then
  cp -v "$carry"/opencv.tar.zst.part* "$pieces"/ 2>/dev/null
  for f in SHA256SUMS manifest.txt; do [ -f "$carry/$f" ] && cp "$carry/$f" "$pieces/"; done
  [ -d "$carry/pywheels" ] && mkdir -p "$pieces/pywheels" && cp "$carry"/pywheels/*.whl "$pieces/pywheels/"
  ls -la "$pieces"; df -h /tmp | tail -n 1
  exit 0
fi

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
store=$(manifest store)
attr=$(manifest attr)
# cudapkgs runs on the image's python3 (3.12) with its own dependencies from the carried wheels.
py=${PY:-python3}
# (SKIP_WHEELS=1 PY=.venv/bin/python: a trial run where cudapkgs' dependencies are installed already)
[ -n "${SKIP_WHEELS:-}" ] || [ -d /tmp/site/elftools ] \
  || $py -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$pieces"/pywheels/*.whl || exit 2
export PYTHONPATH=$PWD/src:/tmp/site
# The interpreter python3Packages is built for: a plain CPython 3.12 (not the torch venv, whose
# site-packages would come along); the pinned numpy wheel is cp312.
host_py=
for p in /usr/bin/python3.12 /usr/local/bin/python3.12 "$(command -v python3.12)" /usr/bin/python3 "$(command -v python3)" \
         /opt/torch/.venv/bin/python3; do
  # 3.12 (numpy's pinned cp312 wheel) with its headers (Python.h: OpenCV builds cv2 only then)
  [ -n "$p" ] && [ -x "$p" ] && "$p" -c 'import os, sys, sysconfig
sys.exit(sys.version_info[:2] != (3, 12) or not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    2>/dev/null && host_py=$p && break
done
[ -n "$host_py" ] || host_py=$(command -v python3)  # another version: its pinned numpy (python_modules.WHEELS)

if [ "$step" = build ] || [ "$step" = all ]; then
  { uname -srm; nproc; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; "$host_py" --version; } \
    > "$out/machine.txt" 2>&1
  cat "$out/machine.txt"
  (cd "$pieces" && cat opencv.tar.zst.part* > /tmp/opencv.tar.zst && sha256sum -c --ignore-missing SHA256SUMS \
     && sha256sum /tmp/opencv.tar.zst | grep -q "$(sed -n 's/  opencv.tar.zst$//p' SHA256SUMS)") || { echo "sha256 mismatch" >&2; exit 3; }
  echo "== import into $store"
  $py - /tmp/opencv.tar.zst "$store" <<'PY' || exit 4
import sys
from cudapkgs.store.store import Store
from cudapkgs.store.transfer import import_closure
with Store.open(sys.argv[2]) as store:
    added = import_closure(store, sys.argv[1])
print(f"imported {len(added)} paths (NAR hashes and references checked)")
PY
  rm -f /tmp/opencv.tar.zst
  echo "== build $attr with cudapkgs ($(nproc) cores)"
  /usr/bin/time -v -o "$out/build.time" $py -m cudapkgs build --set "storeDir=$store" --set allowUnfree=true \
    --set 'fetchers=["wheels"]' --set "python3Executable=$host_py" --no-substitute ${DRY:+--dry-run} \
    -f bench/device/opencv_packages.py "$attr" -o /tmp/ocv-result 2>&1 | tee "$out/build.log"
  status=${PIPESTATUS[0]}
  grep -E "Elapsed|Maximum resident" "$out/build.time"
  [ "$status" = 0 ] || { tail -n 60 "$store"/.logs/*opencv-4.11.0.log > "$out/opencv-build-tail.log"; exit 5; }
fi

if [ "$step" = check ] || [ "$step" = all ]; then
  env_py=$(readlink -f /tmp/ocv-result)/bin/python3
  echo "== env -i $env_py bench/device/check_opencv.py"
  env -i "$env_py" bench/device/check_opencv.py --json "$out/check.json" 2>&1 | tee "$out/check.log"
  exit "${PIPESTATUS[0]}"
fi
