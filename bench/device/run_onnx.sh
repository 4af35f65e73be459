#!/usr/bin/env bash
# On the lent GPU machine: ONNX Runtime from the store on CUDAExecutionProvider (pack_onnx.py made the pieces).
# usage: bash bench/device/run_onnx.sh stash           # keep what this call carried of .carry/onnx/{extra,wheels}
#        bash bench/device/run_onnx.sh run [ROUNDS]     # assemble once, then ours in env -i, then the peer
# stash: copies the carried .carry/onnx/extra/model/* and .carry/onnx/wheels/* to /tmp/carry/onnx/, and unpacks
#   .carry/onnx/extra/cpython-3.12.1.tar.gz at / (the runtime's bin/python3 links to /root/.pyenv/versions/3.12.1)
#   unless that tree is there already; safe to repeat.
# run: assemble_closure.sh onnx (sha256, import into the same store dir, verify) once; then check_onnx_gpu.py with
#   the runtime's python3 in env -i (no LD_LIBRARY_PATH, PYTHONPATH or CUDA_HOME): CUDAExecutionProvider
#   actually used (no CPU fallback), output equal to torch's within 1e-3, CUDA libraries from the store only;
#   then the peer (/opt/torch/.venv/bin/python, else python3) the same way (its CPU provider if it has no CUDA
#   one). Logs in /tmp/onnx-run and, as one tarball, $OUT/onnx-run.tar.gz.
set -uo pipefail
# NVLink multicast stays off on the lent machines (device KINDS.md), also inside env -i below.
off=(NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1)
export "${off[@]}" PYTHONUNBUFFERED=1
what=${1:?stash or run}; rounds=${2:-50}
carried=.carry/onnx; dest=/tmp/carry/onnx; log=/tmp/onnx-run
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dest/model" "$dest/wheels" "$log"
if [ "$what" = stash ]; then
  for f in "$carried"/extra/model/* ; do [ -f "$f" ] && cp "$f" "$dest/model/" && echo "kept $(basename "$f")"; done
  for f in "$carried"/wheels/*.whl ; do [ -f "$f" ] && cp "$f" "$dest/wheels/"; done
  tarball=$carried/extra/cpython-3.12.1.tar.gz
  if [ -f "$tarball" ] && [ ! -x /root/.pyenv/versions/3.12.1/bin/python3.12 ]; then
    tar -C / -xzf "$tarball" && echo "unpacked CPython 3.12.1 at /root/.pyenv/versions/3.12.1"
  fi
  ls -la "$dest/model" | tail -n +2; echo "wheels: $(ls "$dest/wheels" | wc -l)"
  exit 0
fi
[ "$what" = run ] || { echo "usage: run_onnx.sh stash|run [ROUNDS]" >&2; exit 64; }
finish() { cat /proc/loadavg > "$log/loadavg.txt"; [ -z "${OUT:-}" ] || tar -czf "$OUT/onnx-run.tar.gz" -C "$log" .; }
trap finish EXIT
status=0
if [ ! -f "$dest/imported" ]; then
  echo "== assemble onnx"
  bash "$here/assemble_closure.sh" onnx "$dest/wheels" 2>&1 | grep -v "^WARNING: Running pip" | tee "$log/assemble.log"
  [ "${PIPESTATUS[0]}" = 0 ] && touch "$dest/imported" || { echo "assemble failed"; exit 2; }
fi
store=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["storeDir"])' "$dest/manifest.json")
runtime=$(cat "$dest/model/runtime.txt")
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader | tee "$log/machine.txt"
echo "== ours: $runtime/bin/python3 (env -i)"
env -i HOME=/tmp/home-onnx PATH=/usr/bin:/bin "${off[@]}" "$runtime/bin/python3" "$here/check_onnx_gpu.py" "$dest/model" \
  --label ours --store "$store" --rounds "$rounds" --out "$log/ours.json" > "$log/ours.log" 2>&1 || status=3
cat "$log/ours.log"
peer=/opt/torch/.venv/bin/python; [ -x "$peer" ] || peer=python3
echo "== peer: $peer"
"$peer" "$here/check_onnx_gpu.py" "$dest/model" --label peer --rounds "$rounds" --out "$log/peer.json" \
  > "$log/peer.log" 2>&1
tail -n 30 "$log/peer.log"
python3 - "$log/ours.json" "$log/peer.json" <<'PY' | tee "$log/compare.txt"
import json, sys
try:
    ours, peer = (json.load(open(p)) for p in sys.argv[1:])
except (OSError, ValueError) as e:
    sys.exit(f"no comparison: {e}")
for r in (ours, peer):
    print(f"{r['label']}: onnxruntime {r['onnxruntime']} {r['providers'][0]}, batch {r['batch']}: "
          f"median {r['run_ms_median']} ms, min {r['run_ms_min']} ms; max |diff| vs torch {r['max_abs_diff']:.3g}")
if ours["providers"][0] == peer["providers"][0]:
    print(f"ours/peer median time: {ours['run_ms_median'] / peer['run_ms_median']:.3f}")
else:
    print("different providers: no speed ratio (the peer has no CUDAExecutionProvider)")
PY
exit $status
