#!/usr/bin/env bash
# On a lent machine with two or more GPUs: torch.distributed (NCCL backend, one process per GPU) from the
# store's torch against the machine's own PyTorch, alternating rounds; then the DDP check against a
# one-process run. The store's closure must already be imported (bench/device/assemble_closure.sh).
#
# usage: bash bench/device/run_torch_distributed.sh PYTHON [ROUNDS] [SIZE_MIB]
#   PYTHON: the store's interpreter with torch (a withPackages wrapper: <store>/<hash>-python3-…-env/bin/python3)
#   on a CPU-only machine: BACKEND=gloo DEVICE=cpu NPROC=2 bash … PYTHON 1 16   (the dry run of the same code)
# Writes $OUT/torch-distributed/{ours-N,peer-N}/rank-R.json, reference.json, nccl-info.log, compare.txt.
set -uo pipefail
ours=${1:?the store python (withPackages wrapper) with torch}
rounds=${2:-3}
size=${3:-1024}
backend=${BACKEND:-nccl}
device=${DEVICE:-cuda}
nproc=${NPROC:-2}
peer=${PEER:-python3}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp}/torch-distributed
rm -rf "$out"; mkdir -p "$out"
# the store: three levels above the wrapper (not through its link: bin/python3 links to the interpreter)
store=${STORE:-$(dirname "$(dirname "$(dirname "$ours")")")}
# NVLink multicast stays off on the lent machines (device KINDS.md), also inside env -i.
off=(NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1)
export "${off[@]}"
# env -i: no LD_LIBRARY_PATH, no PYTHONPATH, nothing of the machine's CUDA; PATH for torchrun's helpers only.
clean=(env -i HOME=/tmp/home-ours PATH=/usr/bin:/bin "${off[@]}")
if [ "$device" = cuda ]; then
  nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total --format=csv | tee "$out/machine.txt"
  nvidia-smi topo -m >> "$out/machine.txt" 2>&1 || true
fi
status=0
launch() {  # launch SIDE ROUND PYTHON-COMMAND...
  local side=$1 round=$2; shift 2
  "$@" -m torch.distributed.run --nproc-per-node="$nproc" --master-port=$((29400 + round)) \
    "$here/torch_distributed.py" --backend "$backend" --device "$device" --size-mib "$size" \
    --out "$out/$side-$round" > "$out/$side-$round.log" 2>&1 || { echo "$side round $round failed:"; tail -20 "$out/$side-$round.log"; status=3; }
  grep -E "^all_reduce|^ddp" "$out/$side-$round.log" | sed "s/^/$side-$round: /"
}
for round in $(seq 1 "$rounds"); do
  launch ours "$round" "${clean[@]}" "$ours"
  launch peer "$round" "$peer"
done
echo "== NCCL_DEBUG=INFO, ours (which libnccl, its version)"
"${clean[@]}" NCCL_DEBUG=INFO "$ours" -m torch.distributed.run --nproc-per-node="$nproc" --master-port=29399 \
  "$here/torch_distributed.py" --backend "$backend" --device "$device" --size-mib 16 --iters 2 --steps 1 \
  --out "$out/info" > "$out/nccl-info.log" 2>&1 || status=4
grep -E "NCCL version|NET/|nccl.*\.so" "$out/nccl-info.log" | sort -u | head -20
echo "== one process, full batch (the DDP reference)"
"${clean[@]}" "$ours" "$here/torch_distributed.py" --reference --device "$device" --out "$out" || status=5
python3 "$here/compare_torch_distributed.py" "$out" --store "$store" | tee "$out/compare.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=6
exit $status
