"""pycuda on a GPU from a cudapkgs closure: init, device, memory round trip, a kernel launch checked on the CPU.

Usage: python3 -S check_pycuda.py KERNEL.cubin [KERNEL.ptx]
(-S: only PYTHONPATH, i.e. the closure's site-packages, is importable; no LD_LIBRARY_PATH:
libcuda.so.1 must come from the driver through the loader's cache.)
The kernel is examples/pycuda/axpy.cu compiled by the set's nvcc (``-cubin -arch=sm_90``,
``-ptx -arch=compute_90``): y = a*x + y.  Exit status 0 only when every check passes.
"""

from __future__ import annotations

import os
import sys


def loaded(name: str) -> list[str]:
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if name in line and "/" in line})


def main() -> int:
    import numpy as np
    import pycuda
    import pycuda.driver as drv

    print("python", sys.version.split()[0], sys.executable)
    print("LD_LIBRARY_PATH", repr(os.environ.get("LD_LIBRARY_PATH")))
    print("pycuda", pycuda.VERSION_TEXT, pycuda.__file__)
    print("numpy", np.__version__, np.__file__)
    drv.init()
    print("libcuda loaded from", loaded("libcuda.so"))
    print("driver version", drv.get_driver_version(), "devices", drv.Device.count())
    dev = drv.Device(0)
    print("device 0:", dev.name(), "compute capability", dev.compute_capability(),
          "memory", dev.total_memory() // 2**20, "MiB")
    ctx = dev.make_context()
    ok = True
    try:
        n = 1 << 22
        x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        y = np.random.default_rng(1).standard_normal(n).astype(np.float32)
        dx, dy = drv.mem_alloc(x.nbytes), drv.mem_alloc(y.nbytes)
        drv.memcpy_htod(dx, x)
        back = np.empty_like(x)
        drv.memcpy_dtoh(back, dx)
        same = bool(np.array_equal(back, x))
        print(f"memory round trip of {x.nbytes} bytes: {'equal' if same else 'DIFFERENT'}")
        ok &= same
        for path in sys.argv[1:]:
            drv.memcpy_htod(dy, y)
            with open(path, "rb") as handle:
                image = handle.read()
            module = drv.module_from_buffer(image)
            axpy = module.get_function("axpy")
            a = np.float32(2.5)
            axpy(a, dx, dy, np.int32(n), block=(256, 1, 1), grid=((n + 255) // 256, 1))
            ctx.synchronize()
            got = np.empty_like(y)
            drv.memcpy_dtoh(got, dy)
            want = a * x + y
            err = float(np.max(np.abs(got - want)))
            good = err <= 1e-5 * float(np.max(np.abs(want)))
            print(f"axpy from {os.path.basename(path)}: n={n} max|err|={err:.3g} {'PASS' if good else 'FAIL'}")
            ok &= good
    finally:
        ctx.pop()
    print("ALL PASS" if ok else "SOME CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
