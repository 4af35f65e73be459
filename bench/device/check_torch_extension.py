"""On the GPU: run the cpp_extension kernel built in `cudapkgs shell` against torch tensors and check it.

usage: python3 bench/device/check_torch_extension.py OUT [--n 16777216] [--tolerance 1e-6]

OUT is what bench/device/pack_torch_extension.py wrote (env.json, ext/, closure.txt), with the
closure unpacked at its store paths (``cat OUT/closure.tar.* | tar -x -C /``).  Checks every closure
path is there, then starts the store's python3 isolated (``-I``, in ``env -i``: no PYTHONPATH, no
user site, no host CUDA on any search path) with the store's site-packages and OUT/ext first on
``sys.path``, and there: torch sees the GPU; ``axpy_ext.axpy(x, y, a)`` on CUDA float32 tensors of N
elements equals a float64 reference of a*x + y within TOLERANCE (relative, max(1, |ref|)) and
torch's own ``torch.add(y, x, alpha=a)`` (counted equal elements); a CPU tensor is refused by the
extension's check; every CUDA library in /proc/self/maps (cudart, cuBLAS, torch_cuda, c10_cuda, the
extension) comes from the store or the extension's directory, libcuda from the driver.  Prints one
JSON object; exit status 1 on any failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import json, sys
sys.path[:0] = json.loads(sys.argv[1])
n, tolerance, store, ext_dir = int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
import torch, axpy_ext
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available(),
       "extension": axpy_ext.__file__}
ok = out["available"] and axpy_ext.__file__.startswith(ext_dir)
if out["available"]:
    out["device"] = torch.cuda.get_device_name(0)
    out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(n, device="cuda", generator=g) * 200 - 100
    y = torch.rand(n, device="cuda", generator=g) * 200 - 100
    a = 2.5
    got = axpy_ext.axpy(x, y, a)
    torch.cuda.synchronize()
    ref = a * x.double() + y.double()
    rel = ((got.double() - ref).abs() / ref.abs().clamp(min=1.0)).max().item()
    mine = torch.add(y, x, alpha=a)
    out.update({"n": n, "max_rel_error": rel, "tolerance": tolerance,
                "equal_to_torch_add": int((got == mine).sum().item()), "checksum": float(got.double().sum().item())})
    ok = ok and rel <= tolerance and got.shape == x.shape
try:
    axpy_ext.axpy(torch.ones(4), torch.ones(4), 2.0)
    out["cpu_refused"] = False
except RuntimeError as error:
    out["cpu_refused"] = "must be CUDA tensors" in str(error)
ok = ok and out["cpu_refused"]
libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
cuda_libs = [l for l in libs if any(k in l for k in ("libcudart", "libcublas", "libtorch_cuda", "libc10_cuda",
                                                      "libnvrtc", "libcudnn", "axpy_ext"))]
strays = [l for l in cuda_libs if not (l.startswith(store + "/") or l.startswith(ext_dir))]
out.update({"cuda_libraries": cuda_libs, "outside_store": strays,
            "libcuda": [l for l in libs if "libcuda.so" in l]})
ok = ok and not strays and bool(cuda_libs)
out["ok"] = bool(ok)
print(json.dumps(out))
sys.exit(0 if ok else 1)
"""


def main() -> int:
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(args[0]).resolve()
    n = int(args[args.index("--n") + 1]) if "--n" in args else 1 << 24
    tolerance = float(args[args.index("--tolerance") + 1]) if "--tolerance" in args else 1e-6
    facts = json.loads((out / "env.json").read_text())
    missing = [p for p in (out / "closure.txt").read_text().split() if not os.path.exists(p)]
    if missing:
        print(json.dumps({"ok": False, "error": f"{len(missing)} closure path(s) missing, e.g. {missing[0]}: "
                          "unpack the closure first (cat closure.tar.* | tar -x -C /)"}))
        return 1
    ext_dir = str(out / facts["ext"])
    paths = [ext_dir, *facts["site"]]
    run = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"HOME={out}", "NCCL_NVLS_ENABLE=0",
                          "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1", facts["python"], "-I", "-c", SCRIPT,
                          json.dumps(paths), str(n), str(tolerance), facts["store"], ext_dir],
                         capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    if run.returncode != 0:
        sys.stderr.write(run.stderr[-4000:])
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
