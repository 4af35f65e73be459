"""On the GPU machine: run the carried ONNX model (pack_onnx.py) in ONNX Runtime on CUDAExecutionProvider.

usage: python check_onnx_gpu.py MODEL_DIR [--label ours] [--store DIR] [--rounds 50] [--out FILE.json]

Loads ``MODEL_DIR/model.onnx`` with ``providers=["CUDAExecutionProvider"]`` and the session option
``session.disable_cpu_ep_fallback = 1`` (a node the CUDA provider cannot run fails the session instead of
running on the CPU), checks that the session's first provider is CUDAExecutionProvider, runs ``x.npy`` and
compares with torch's output ``y_torch.npy``: max absolute difference at most 1e-3 times max(1, |y|max).
Times ``session.run`` (numpy in and out, so host-device copies included): 5 warm-up runs, then ROUNDS,
median and min in ms. With ``--store``, every CUDA library mapped (``/proc/self/maps``: libcu*, libnv*,
libcudnn*, libonnxruntime_providers_*) must come from that store, except the driver's (libcuda.so,
libnvidia-*), and with the CUDA provider libcudart, libcudnn and libcublasLt must be among them (the model's
convolutions run in cuDNN, its Gemm in cuBLASLt). Without the CUDA provider available (the machine's own CPU-only build), times the CPU provider
and says so. Prints one JSON object (and writes it to ``--out``); exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

DRIVER = ("libcuda.so", "libnvidia-")
CUDA_NAMES = ("libcu", "libnv", "libcudnn", "libonnxruntime_providers_")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--label", default="ours")
    parser.add_argument("--store", default=None, help="every CUDA library mapped must be under it")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import numpy as np
    import onnxruntime as ort

    x = np.load(os.path.join(args.model_dir, "x.npy"))
    want = np.load(os.path.join(args.model_dir, "y_torch.npy"))
    available = ort.get_available_providers()
    result: dict = {"label": args.label, "onnxruntime": ort.__version__, "onnxruntime_file": ort.__file__,
                    "available": available, "python": sys.executable, "failures": []}
    provider = "CUDAExecutionProvider" if "CUDAExecutionProvider" in available else "CPUExecutionProvider"
    options = ort.SessionOptions()
    if provider == "CUDAExecutionProvider":
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    else:
        result["note"] = "no CUDAExecutionProvider in this onnxruntime: timed on the CPU provider"
    start = time.perf_counter()
    session = ort.InferenceSession(os.path.join(args.model_dir, "model.onnx"), options, providers=[provider])
    result["session_s"] = round(time.perf_counter() - start, 3)
    result["providers"] = session.get_providers()
    if session.get_providers()[0] != provider:
        result["failures"].append(f"asked for {provider}, the session uses {session.get_providers()}")
    (got,) = session.run(None, {"x": x})
    diff = float(np.abs(got - want).max())
    tolerance = 1e-3 * max(1.0, float(np.abs(want).max()))
    result.update(shape=list(got.shape), max_abs_diff=diff, tolerance=tolerance,
                  y_abs_max=float(np.abs(want).max()))
    if got.shape != want.shape or not diff <= tolerance:
        result["failures"].append(f"output differs from torch's: max |diff| {diff:.3g} > {tolerance:.3g}")
    for _ in range(5):
        session.run(None, {"x": x})
    times = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        session.run(None, {"x": x})
        times.append((time.perf_counter() - t) * 1e3)
    result.update(batch=int(x.shape[0]), run_ms_median=round(statistics.median(times), 3),
                  run_ms_min=round(min(times), 3), rounds=args.rounds)
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if ".so" in line.split()[-1]})
    cuda = [lib for lib in libs if os.path.basename(lib).startswith(CUDA_NAMES)]
    result["cuda_libraries"] = cuda
    if args.store:
        outside = [lib for lib in cuda if not lib.startswith(args.store.rstrip("/") + "/")
                   and not os.path.basename(lib).startswith(DRIVER)]
        result["outside_store"] = outside
        if outside:
            result["failures"].append(f"CUDA libraries from outside the store: {outside}")
        if provider == "CUDAExecutionProvider":
            for lib in ("libcudart", "libcudnn", "libcublasLt"):  # the provider, and its convolutions and Gemm
                if not any(os.path.basename(path).startswith(lib) for path in cuda):
                    result["failures"].append(f"no {lib} mapped: the CUDA provider did not load it")
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
