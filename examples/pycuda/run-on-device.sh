#!/bin/bash
# issue 9, parts 7(b)/8(b): pycuda from a cudapkgs closure on the H200, no LD_LIBRARY_PATH.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")"
set -x
uname -m; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cat closure.txt; grep -c -- "-cuda13" closure.txt; ls -la closure.tar.xz; sha256sum closure.tar.xz axpy.sm_90.cubin axpy.compute_90.ptx
tar -xJf closure.tar.xz -P
E=$(cat env.path)
cat "$E/bin/python3"
D=$(ls "$(grep -o '/tmp/i9d/store/[a-z0-9]*-pycuda-[^/]*' closure.txt)"/lib/python3.12/site-packages/pycuda/_driver*.so)
readelf -d "$D" | grep -E 'NEEDED|RUNPATH'
env -i ldd "$D"
ldconfig -p | grep 'libcuda.so.1'
PY=/opt/torch/.venv/bin/python3; [ -x "$PY" ] || PY=$(command -v python3)
"$PY" --version
# The env's PYTHONPATH (the closure's site-packages), the device's own CPython 3.12 with -S (no site dirs), env -i: no LD_LIBRARY_PATH.
LINE=$(grep '^PYTHONPATH=' "$E/bin/python3")
env -i PATH=/usr/bin:/bin NCCL_NVLS_ENABLE=0 sh -c "$LINE; export PYTHONPATH; exec $PY -S check_pycuda.py axpy.sm_90.cubin axpy.compute_90.ptx"
echo "exit status $?"
