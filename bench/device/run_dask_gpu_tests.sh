#!/usr/bin/env bash
# On the lent H200 x2: a Dask scheduler and one worker per GPU (CUDA_VISIBLE_DEVICES), each worker
# with a store of its own mapped on the client's store directory; the GPU tests saved by
# pack_dask_gpu_tests.py are built (= run) through cudapkgs' Dask executor, their CUDA programs
# substituted by the workers from the carried file:// cache (signatures checked).
# usage: bash bench/device/run_dask_gpu_tests.sh [DIR]   (DIR: what pack_dask_gpu_tests.py wrote)
set -uo pipefail
dir=$(cd "${1:-.dev-i14}" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
py=${PY:-python3}
echo "== machine"; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader
[ -n "${SKIP_WHEELS:-}" ] || $py -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$dir"/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:/tmp/site
$py -c "import distributed, cudapkgs; print('distributed', distributed.__version__)" || exit 2
$py -m distributed.cli.dask_scheduler --host 127.0.0.1 --port 8786 --no-dashboard > /tmp/scheduler.log 2>&1 &
sleep 3
for gpu in 0 1; do
  CUDA_VISIBLE_DEVICES=$gpu CUDAPKGS_WORKER_STORE=/tmp/worker-gpu$gpu CUDAPKGS_SYSTEM_FEATURES="cuda cuda-sm-90" \
    $py -m distributed.cli.dask_worker tcp://127.0.0.1:8786 --name gpu$gpu --nthreads 1 --no-nanny --no-dashboard \
    --host 127.0.0.1 --resources "cuda=1,cuda-sm-90=1" > /tmp/worker-gpu$gpu.log 2>&1 &
done
$py - "$dir" <<'EOF'
import glob, io, json, os, sys, time
from distributed import Client
from cudapkgs.derivation import Derivation
from cudapkgs.realise.dask_executor import DaskBuilders, run_on_dask
from cudapkgs.store.store import Store

d = sys.argv[1]
with Client("tcp://127.0.0.1:8786", timeout=30) as c:
    c.wait_for_workers(2, timeout=60)
    print("workers:", {w["name"]: w["resources"] for w in c.scheduler_info()["workers"].values()})
files = sorted(glob.glob(f"{d}/tests/*.drv.json"))
drvs = [Derivation.from_json(json.load(open(f)), source=f) for f in files]
builders = DaskBuilders(address="tcp://127.0.0.1:8786", cache=f"file://{d}/cache", sign_key_file=f"{d}/secret.key",
                        trusted_keys=[open(f"{d}/public.key").read().strip()], timeout=30)
store_dir = drvs[0].store_dir
start = time.time()
with Store.open(store_dir) as store:
    results = run_on_dask(store, drvs, builders)
    print(f"== {len(drvs)} GPU tests in {time.time() - start:.1f} s")
    for drv in drvs:
        r = results[drv.drv_path]
        print(f"--- {drv.name}: ran on worker {r['worker']}")
        print(open(os.path.join(drv.outputs['out'], 'log')).read().rstrip())
    print("== client store verify:", [p.message for p in store.verify()] or "ok")
EOF
status=$?
echo "== worker logs (tail)"; tail -n 3 /tmp/worker-gpu0.log /tmp/worker-gpu1.log
exit $status
