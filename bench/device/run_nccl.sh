#!/usr/bin/env bash
# On the lent two-GPU H200: import the nccl-tests closure built here, run all_reduce_perf on both GPUs
# against cudapkgs' NCCL, then the same binary against the NCCL of the machine's own Python
# environment (nvidia/nccl/lib, NVIDIA's wheel) by putting that directory first on the library path.
#
# usage: bash bench/device/run_nccl.sh [DIR]  (DIR: what build_nccl.py wrote; default .dev-i10)
# Writes machine.txt, ours-N.log, nvidia-N.log, allgather-ours.log under $OUT. Exit status: 0 when every run says "#wrong 0"-clean.
set -uo pipefail
dir=${1:-.dev-i10}
out=${OUT:-/tmp/nccl-run}
mkdir -p "$out"
# The store directory the closure was built in (its RUNPATHs name it): taken from nccl-paths.txt.
store=$(dirname "$(sed -n 's/^nccl-tests=//p' "$dir/nccl-paths.txt")")
export NCCL_NVLS_ENABLE=0   # NVLink multicast stays off on these machines (device KINDS.md)
args=(-b 8M -e 1G -f 2 -g 2)
{
  uname -srm
  nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total --format=csv
  nvidia-smi topo -m || true
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

echo "== import the closure into $store"
PYTHONPATH=$PWD/src python3 - "$dir/nccl-closure.tar.gz" "$store" <<'PY' || exit 3
import sys
from cudapkgs.store.store import Store
from cudapkgs.store.transfer import import_closure
with Store.open(sys.argv[2]) as store:
    added = import_closure(store, sys.argv[1])
print(f"imported {len(added)} paths (NAR hashes checked)")
PY
exe=$(sed -n 's/^nccl-tests=//p' "$dir/nccl-paths.txt")/bin/all_reduce_perf
ours=$(sed -n 's/^nccl=//p' "$dir/nccl-paths.txt")/lib
nvlib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
echo "ours: $ours"; echo "nvidia: $nvlib"; ls "$nvlib" 2>&1
echo "== libraries, no LD_LIBRARY_PATH"; env -u LD_LIBRARY_PATH ldd "$exe" | grep -E "nccl|cudart|libcuda"
echo "== libraries, NVIDIA's NCCL first"; LD_LIBRARY_PATH=$nvlib ldd "$exe" | grep -E "nccl|cudart|libcuda"
status=0
for round in 1 2; do
  echo "== round $round: ours"
  env -u LD_LIBRARY_PATH NCCL_DEBUG=VERSION "$exe" "${args[@]}" 2>&1 | tee "$out/ours-$round.log" || status=4
  echo "== round $round: NVIDIA's (python env)"
  LD_LIBRARY_PATH=$nvlib NCCL_DEBUG=VERSION "$exe" "${args[@]}" 2>&1 | tee "$out/nvidia-$round.log" || status=5
done
# The unrestricted NCCL has every collective's kernels: one other collective, ours only, as a check.
echo "== ours: all_gather_perf (kernels other than AllReduce)"
env -u LD_LIBRARY_PATH NCCL_DEBUG=VERSION "$(dirname "$exe")/all_gather_perf" -b 8M -e 64M -f 2 -g 2 2>&1 \
  | tee "$out/allgather-ours.log" || status=7
for f in "$out"/ours-*.log "$out"/nvidia-*.log "$out"/allgather-ours.log; do
  grep -q "Out of bounds values : 0 OK" "$f" || { echo "$f: wrong values" >&2; status=6; }
done
exit $status
