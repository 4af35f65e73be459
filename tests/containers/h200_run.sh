#!/bin/bash
# One batched run on the lent H200 (see docs/cdi.md, "H200 record"): generate the real spec,
# validate it, check its host paths, time it, and collect nvidia-smi.  Results go to $OUT.
exec > >(tee "$OUT/log.txt") 2>&1
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . || export PYTHONPATH=/tmp/site:$PWD/src
python3 --version; which cudapkgs
python3 -c "import pynvml, importlib.metadata as m; print('nvidia-ml-py', m.version('nvidia-ml-py'))"
python3 -c "import jsonschema, referencing; print('jsonschema ok')"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
nvidia-smi -q | grep -E "Driver Version|CUDA Version|Product Name|Minor Number|MIG|Current|Bus Id|Persistence" | head -30
uname -r; cat /proc/driver/nvidia/version; cat /proc/driver/nvidia/gpus/*/information
ls -la /dev/nvidia* /dev/dri /dev/nvidia-caps 2>&1
ls /sys/bus/pci/devices/*/drm 2>&1 | head; ls -la /dev/dri/by-path 2>&1
ldconfig -p | grep -E "libcuda\.|libnvidia-ml\." ; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ls /run/nvidia-persistenced /run/nvidia-fabricmanager /tmp/nvidia-mps /lib/firmware/nvidia 2>&1
C="cudapkgs"; command -v cudapkgs || C="python3 -m cudapkgs"
mkdir -p /tmp/cdi
time $C cdi generate -o /tmp/cdi/nvidia.json; echo "generate rc=$?"
cp /tmp/cdi/nvidia.json "$OUT/spec.json"
$C cdi validate /tmp/cdi/nvidia.json; echo "validate rc=$?"
$C cdi validate --check-host --json /tmp/cdi/nvidia.json > "$OUT/validate-host.json"; echo "check-host rc=$?"
python3 - <<'PY'
import json, os
doc = json.load(open("/tmp/cdi/nvidia.json"))
paths = []
for e in [doc["containerEdits"]] + [d["containerEdits"] for d in doc["devices"]]:
    paths += [n.get("hostPath") or n["path"] for n in e.get("deviceNodes", [])]
    paths += [m["hostPath"] for m in e.get("mounts", [])]
    paths += [h["path"] for h in e.get("hooks", [])]
missing = sorted({p for p in paths if not os.path.exists(p)})
print(f"host paths: {len(set(paths))} distinct, missing: {missing}")
PY
$C cdi generate --gpu-discovery proc -o /tmp/cdi-proc/nvidia.json; echo "proc rc=$?"
python3 -c "import json,sys; a=json.load(open('/tmp/cdi/nvidia.json')); b=json.load(open('/tmp/cdi-proc/nvidia.json')); print('nvml == proc fallback:', a==b)"
$C cdi generate --format yaml -o "$OUT/spec.yaml" --hook-path /usr/bin/nvidia-cdi-hook; $C cdi validate "$OUT/spec.yaml"
$C cdi list --spec-dir /tmp/cdi
$C cdi snippet docker
python3 bench/bench_cdi.py --real -n 21 > "$OUT/bench-real.txt" 2>&1; cat "$OUT/bench-real.txt"
python3 bench/bench_cdi.py -n 21 > "$OUT/bench-fake.txt" 2>&1; cat "$OUT/bench-fake.txt"
