"""cv2.cuda against OpenCV's CPU path: equal results within a stated tolerance, then the speed of each.

usage: env -i <store python with cv2>/bin/python3 bench/device/check_opencv.py [--json FILE] [--size 4096]
                                                                                 [--rounds 7] [--no-gpu-ok]

Checks, each on a --size x --size image (uint8 for cvtColor; float32 elsewhere; gemm on a
--size/2 square, OpenCV's CPU gemm having no BLAS here):

| op | GPU | CPU | tolerance |
| upload/download | GpuMat.upload + download | (the array) | exact |
| add | cv2.cuda.add | cv2.add | exact (float32 a+b rounds the same) |
| gaussian | createGaussianFilter(CV_32F, 5x5, sigma 1.5).apply | cv2.GaussianBlur (BORDER_REFLECT_101) | max abs 1e-4 |
| resize | cv2.cuda.resize to half, INTER_LINEAR | cv2.resize | max abs 1e-3 (pixel centres as CPU) |
| cvtColor | cv2.cuda.cvtColor BGR2GRAY (uint8) | cv2.cvtColor | max abs 1 (rounding) |
| gemm | cv2.cuda.gemm (cuBLAS) | cv2.gemm | relative Frobenius 1e-4 |

Speed: for each op, --rounds alternating CPU and GPU runs after one warm-up of each; the GPU
time is the op on data already on the device, synchronised (cv2.cuda.Stream.waitForCompletion
on the null stream: OpenCV's default calls are synchronous); medians and their ratio.
Also: every libcudart mapped into this process (/proc/self/maps): exactly one, from the store; and
every CUDA library mapped (cudart, cuBLAS, NPP, …) lies in the store cv2 comes from (one CUDA,
nothing of a host toolkit such as /usr/local/cuda).
Exit status 0 when every check holds; without a GPU, 0 only with --no-gpu-ok (the import and
`getCudaEnabledDeviceCount() == 0` are the check then).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def cudart_maps() -> list[str]:
    """The distinct files named libcudart* mapped into this process."""
    paths = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6 and "libcudart" in os.path.basename(parts[5].strip()):
                paths.add(parts[5].strip())
    return sorted(paths)


CUDA_LIBS = ("libcudart", "libcublas", "libcublasLt", "libnpp", "libcufft", "libnvrtc", "libnvJitLink", "libcudnn")


def cuda_maps() -> list[str]:
    """The distinct CUDA toolkit libraries (cudart, cuBLAS, NPP, cuFFT, nvrtc, nvJitLink, cuDNN) mapped here."""
    paths = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6 and os.path.basename(parts[5].strip()).startswith(CUDA_LIBS):
                paths.add(parts[5].strip())
    return sorted(paths)


def timed(fn, sync=None) -> float:
    start = time.perf_counter()
    fn()
    if sync is not None:
        sync()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-gpu-ok", action="store_true")
    args = parser.parse_args()

    import numpy as np
    import cv2

    report: dict = {"cv2": cv2.__version__, "numpy": np.__version__, "python": sys.version.split()[0],
                    "cv2_file": cv2.__file__}
    count = cv2.cuda.getCudaEnabledDeviceCount()
    report["cuda_devices"] = count
    cuda_info = [line.strip() for line in cv2.getBuildInformation().splitlines()
                 if any(k in line for k in ("NVIDIA CUDA", "NVIDIA GPU arch", "NVIDIA PTX", "cuBLAS", "cuFFT"))]
    report["build_cuda"] = cuda_info
    report["libcudart"] = cudart_maps()
    # One CUDA: every CUDA library this process mapped comes from the store cv2 comes from.
    store_dir = os.path.dirname(os.path.dirname(os.path.realpath(cv2.__file__)).split("/lib/python")[0])
    report["store_dir"] = store_dir
    report["cuda_libraries"] = cuda_maps()
    foreign = [p for p in report["cuda_libraries"] if not p.startswith(store_dir + "/")]
    report["cuda_libraries_outside_the_store"] = foreign
    print(json.dumps(report, indent=1), flush=True)
    if foreign or len(report["libcudart"]) > 1:
        print("CUDA libraries from outside the store, or more than one libcudart: WRONG", foreign)
        return 3
    if count == 0:
        ok = args.no_gpu_ok
        print("no CUDA device: " + ("import and device count checked" if ok else "the GPU checks need one"))
        return 0 if ok else 2
    cv2.cuda.printShortCudaDeviceInfo(cv2.cuda.getDevice())
    rng = np.random.default_rng(0)
    n = args.size
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    bgr = rng.integers(0, 256, (n, n, 3), dtype=np.uint8)
    m = n // 2
    ga, gb, gbgr = cv2.cuda.GpuMat(), cv2.cuda.GpuMat(), cv2.cuda.GpuMat()
    ga.upload(a)
    gb.upload(b)
    gbgr.upload(bgr)
    gm1, gm2 = cv2.cuda.GpuMat(), cv2.cuda.GpuMat()
    m1, m2 = a[:m, :m].copy(), b[:m, :m].copy()
    gm1.upload(m1)
    gm2.upload(m2)
    gauss = cv2.cuda.createGaussianFilter(cv2.CV_32FC1, cv2.CV_32FC1, (5, 5), 1.5)
    sync = cv2.cuda.Stream.Null().waitForCompletion

    ops = {
        "upload_download": (lambda: (ga.upload(a), ga.download())[1],
                            lambda: a.copy(), 0.0, "exact"),
        "add": (lambda: cv2.cuda.add(ga, gb), lambda: cv2.add(a, b), 0.0, "max_abs"),
        "gaussian": (lambda: gauss.apply(ga), lambda: cv2.GaussianBlur(a, (5, 5), 1.5, borderType=cv2.BORDER_REFLECT_101),
                     1e-4, "max_abs"),
        # INTER_AREA: at an exact 2x reduction cv2.cuda.resize's INTER_LINEAR samples a[::2, ::2] while the
        # CPU's averages each 2x2 block (seen on the H100, 2026-12-06: 0.71 apart on data in [0, 1)), OpenCV's
        # own two conventions; INTER_AREA is the same 2x2 mean on both (6e-8 apart).
        "resize": (lambda: cv2.cuda.resize(ga, (n // 2, n // 2), interpolation=cv2.INTER_AREA),
                   lambda: cv2.resize(a, (n // 2, n // 2), interpolation=cv2.INTER_AREA), 1e-3, "max_abs"),
        "cvtColor": (lambda: cv2.cuda.cvtColor(gbgr, cv2.COLOR_BGR2GRAY), lambda: cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY),
                     1.0, "max_abs"),
        "gemm": (lambda: cv2.cuda.gemm(gm1, gm2, 1.0, None, 0.0), lambda: cv2.gemm(m1, m2, 1.0, None, 0.0),
                 1e-4, "rel_fro"),
    }
    results = {}
    failed = []
    try:  # the package elides getBuildInformation() (nvcc's path), so ask cv2.cuda.gemm itself
        cv2.cuda.gemm(cv2.cuda_GpuMat(np.ones((2, 2), np.float32)), cv2.cuda_GpuMat(np.ones((2, 2), np.float32)),
                      1.0, None, 0.0)
        has_cublas = True
    except cv2.error:  # "The library is compiled without CUBLAS support"
        has_cublas = False
    if not has_cublas:  # opencv_gpu_proof_no_cublas
        del ops["gemm"]
        results["gemm"] = "skipped: built without cuBLAS"
    for name, (gpu, cpu, tol, kind) in ops.items():
        got = gpu()
        got = got.download() if isinstance(got, cv2.cuda.GpuMat) else got
        want = cpu()
        if kind == "rel_fro":
            err = float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want.astype(np.float64)))
        else:
            err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        good = got.shape == want.shape and err <= tol
        cpu_times, gpu_times = [], []
        timed(cpu)
        timed(gpu, sync)
        for _ in range(args.rounds):
            cpu_times.append(timed(cpu))
            gpu_times.append(timed(gpu, sync))
        c, g = statistics.median(cpu_times), statistics.median(gpu_times)
        results[name] = {"error": err, "tolerance": tol, "metric": kind, "equal": good,
                         "cpu_median_ms": c * 1e3, "gpu_median_ms": g * 1e3, "speedup": c / g if g else None,
                         "shape": list(want.shape)}
        print(f"{name:16s} err {err:.3g} (tol {tol:g}, {kind}) {'OK' if good else 'WRONG'}  "
              f"cpu {c * 1e3:8.3f} ms  gpu {g * 1e3:8.3f} ms  x{c / g:.1f}", flush=True)
        if not good:
            failed.append(name)
    report["ops"] = results
    report["libcudart"] = cudart_maps()
    report["cuda_libraries"] = cuda_maps()
    report["threads_cpu"] = cv2.getNumThreads()
    one = len(report["libcudart"]) == 1
    print("libcudart mapped:", report["libcudart"], "OK" if one else "WRONG (want exactly one)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=1)
    return 0 if not failed and one else 1


if __name__ == "__main__":
    sys.exit(main())
