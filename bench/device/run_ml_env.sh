#!/usr/bin/env bash
# On the lent GPU machine, after assemble_closure.sh: the ML environment from the store against the machine's own.
# usage: bash bench/device/run_ml_env.sh PYTHON [ROUNDS] [SKIP]
#   PYTHON: the store's withPackages interpreter (torch, torchvision, torchaudio, onnxruntime, jax, cupy);
#   SKIP: parts to leave out, e.g. "jax,cupy". Writes $OUT/ml-env/*.json and *.log.
# 1. Every run of the machine's own CUDA tools (/usr/local/cuda/bin/{ptxas,nvlink,fatbinary}) is logged: each is
#    bind-mounted over by a copy that appends to host-tools.log before running the real one (the store's
#    environment must never start one: XLA and Triton look for ptxas at run time).
# 2. check: ours in env -i (no LD_LIBRARY_PATH, no PYTHONPATH, no CUDA_HOME), then the peer (the machine's python3).
# 3. speed: ROUNDS alternating rounds, ours then peer; compare prints the medians and ours/peer.
set -uo pipefail
ours=${1:?the store interpreter}; rounds=${2:-3}; skip=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp}/ml-env; rm -rf "$out"; mkdir -p "$out"
store=${STORE:-$(dirname "$(dirname "$(dirname "$ours")")")}
off=(NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1)
clean=(env -i HOME=/tmp/home-ours PATH=/usr/bin:/bin "${off[@]}")
mkdir -p /tmp/home-ours
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader | tee "$out/machine.txt"
: > /tmp/host-tools.log
for tool in ptxas nvlink fatbinary; do
  real=$(readlink -f "/usr/local/cuda/bin/$tool" 2>/dev/null) || continue
  [ -x "$real" ] || continue
  cp "$real" "/tmp/real-$tool"
  printf '#!/bin/sh\necho "$$ %s $*" >> /tmp/host-tools.log\nexec /tmp/real-%s "$@"\n' "$real" "$tool" > "/tmp/decoy-$tool"
  chmod +x "/tmp/decoy-$tool"
  mount --bind "/tmp/decoy-$tool" "$real" && echo "logging runs of $real"
done
status=0
echo "== check: ours (env -i)"
"${clean[@]}" "$ours" "$here/ml_env_gpu.py" check --store "$store" --skip "$skip" --out "$out/check-ours.json" \
  > "$out/check-ours.log" 2>&1 || status=3
cat "$out/check-ours.log"
cp /tmp/host-tools.log "$out/host-tools-ours.log"
if [ -s /tmp/host-tools.log ]; then echo "FAIL: the store's environment ran the machine's CUDA tools:"; cat /tmp/host-tools.log; status=4; fi
echo "== check: peer (the machine's python3)"
python3 "$here/ml_env_gpu.py" check --skip "$skip" --out "$out/check-peer.json" > "$out/check-peer.log" 2>&1
tail -n 12 "$out/check-peer.log"
echo "(the peer ran the machine's tools $(wc -l < /tmp/host-tools.log) time(s))"
for tool in ptxas nvlink fatbinary; do real=$(readlink -f "/usr/local/cuda/bin/$tool" 2>/dev/null) && umount "$real" 2>/dev/null; done
echo "== speed: $rounds alternating rounds"
for round in $(seq 1 "$rounds"); do
  "${clean[@]}" "$ours" "$here/ml_env_gpu.py" speed --skip "$skip" --out "$out/speed-ours-$round.json" > "$out/speed-ours-$round.log" 2>&1 || { status=5; tail "$out/speed-ours-$round.log"; }
  python3 "$here/ml_env_gpu.py" speed --skip "$skip" --out "$out/speed-peer-$round.json" > "$out/speed-peer-$round.log" 2>&1 || { status=6; tail "$out/speed-peer-$round.log"; }
done
python3 "$here/ml_env_gpu.py" compare "$out" | tee "$out/speed-compare.txt"
cat /proc/loadavg > "$out/loadavg.txt"
exit $status
