"""The ML environment on a GPU: torch, torchvision, torchaudio, ONNX Runtime, JAX and CuPy, checked and timed.

usage (on the lent GPU machine, once with the store's interpreter in ``env -i``, once with the machine's own):
    PYTHON bench/device/ml_env_gpu.py check --out DIR/ours.json [--store STOREDIR] [--skip jax,cupy]
    PYTHON bench/device/ml_env_gpu.py speed --out DIR/speed-ours-1.json [--skip …]
    python3 bench/device/ml_env_gpu.py compare DIR       (speed-ours-N.json against speed-peer-N.json)

``check`` runs each workload once and compares it with a reference computed another way (the CPU, or
torch for ONNX Runtime): torch matmul and conv (against float64 on the CPU), ``torch.compile`` of a
function on CUDA (Triton, through ptxas), torchvision's resnet18 forward (random weights: nothing is
downloaded), ``ops.nms`` on CUDA (equal to the CPU's) and ``ops.roi_align`` (against the CPU kernel), torchaudio's MelSpectrogram on CUDA (against
the CPU), an ONNX model exported from this torch run by an ``InferenceSession`` on
CUDAExecutionProvider with ``session.disable_cpu_ep_fallback`` (a node the CUDA provider cannot run fails
the session instead of running on the CPU; the provider actually used is checked; results against torch's), a jitted JAX
matmul on the GPU, a CuPy ElementwiseKernel (NVRTC) and a cuBLAS matmul. Then ``/proc/self/maps``: every
CUDA library mapped (libcu*, libnv*, libcudnn*, libnccl*, …) must come from STOREDIR or be the driver's
(libcuda.so.1, libnvidia-*), no soname may be mapped from two places, and at most one CUDA runtime
(``libcudart.so.*``) may be mapped. Exit 1 when a check fails.

``speed`` times the same kernels (CUDA events; median of ``--iters`` after ``--warmup``): torch bf16
matmul 8192³ and a bf16 channels-last conv (64×256×56×56, 3×3), JAX bf16 matmul 8192³, CuPy fp32 matmul
4096³ (cuBLAS). ``compare`` prints each kernel's median over rounds for ours and the peer and ours/peer
(throughput ratio, higher is better for ours).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

CUDA_PREFIXES = ("libcu", "libnv", "libcudnn", "libnccl", "libcublas", "libcufft", "libcurand", "libcusolver",
                 "libcusparse", "libnpp", "libtorch_cuda", "libc10_cuda", "libxla", "libonnxruntime_providers_cuda")
DRIVER_PREFIXES = ("libcuda.so", "libnvidia-", "libnvcuvid", "libnvoptix")


def maps_report(store: str | None, text: str | None = None) -> dict:
    """CUDA libraries mapped in this process: {"libraries": {soname: [paths]}, "runtimes": [...], "problems": [...]}.

    `text`: a ``/proc/PID/maps`` text (default: this process's, at most 64 MiB read). Problems: a library
    mapped from two places; one from outside `store` that is not the driver's; and more than one CUDA
    runtime (``libcudart.so.*`` under two sonames, e.g. 12 and 13: two CUDAs in one process, which the
    same-soname check alone does not catch).
    """
    if text is None:
        with open("/proc/self/maps", "rb") as f:
            text = f.read(64 << 20).decode(errors="replace")
    libraries: dict[str, set[str]] = {}
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5].strip()
        name = os.path.basename(path)
        if ".so" in name and name.startswith(CUDA_PREFIXES):
            libraries.setdefault(name, set()).add(path)
    problems = []
    for name, paths in sorted(libraries.items()):
        if len(paths) > 1:
            problems.append(f"{name} mapped from {len(paths)} places: {sorted(paths)}")
        for path in paths:
            if name.startswith(DRIVER_PREFIXES):
                continue
            if store and not path.startswith(store.rstrip("/") + "/"):
                problems.append(f"{name} from outside the store: {path}")
    runtimes = sorted(name for name in libraries if name.startswith("libcudart.so"))
    if len(runtimes) > 1:
        problems.append(f"{len(runtimes)} CUDA runtimes mapped: {runtimes}")
    return {"libraries": {k: sorted(v) for k, v in sorted(libraries.items())}, "runtimes": runtimes,
            "problems": problems}


def close(a, b, rtol: float, atol: float) -> tuple[bool, float]:
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    err = float(np.max(np.abs(a - b) / (atol + rtol * np.abs(b)))) if a.size else 0.0
    return a.shape == b.shape and err <= 1.0, err


def check_torch(out: dict) -> None:
    import torch

    out["torch"] = {"version": torch.__version__, "file": torch.__file__, "cuda": torch.version.cuda,
                    "device": torch.cuda.get_device_name(), "cudnn": torch.backends.cudnn.version()}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
    ok, err = close((a.cuda() @ b.cuda()).cpu(), a.double() @ b.double(), 1e-4, 1e-4)
    out["torch"]["matmul"] = {"ok": ok, "err": err}
    x, w = torch.randn(4, 16, 32, 32, generator=g), torch.randn(32, 16, 3, 3, generator=g)
    ok, err = close(torch.nn.functional.conv2d(x.cuda(), w.cuda(), padding=1).cpu(),
                    torch.nn.functional.conv2d(x.double(), w.double(), padding=1), 1e-4, 1e-4)
    out["torch"]["conv"] = {"ok": ok, "err": err}

    def f(x, y):
        return torch.sin(x) * torch.cos(y) + x * y

    xs, ys = torch.randn(1 << 20, generator=g), torch.randn(1 << 20, generator=g)
    start = time.monotonic()
    got = torch.compile(f)(xs.cuda(), ys.cuda()).cpu()
    ok, err = close(got, f(xs.double(), ys.double()), 1e-5, 1e-5)
    out["torch"]["compile"] = {"ok": ok, "err": err, "seconds": time.monotonic() - start}


def check_torchvision(out: dict) -> None:
    import torch
    import torchvision

    out["torchvision"] = {"version": torchvision.__version__, "file": torchvision.__file__}
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        ref = model.double()(x.double())
        got = model.float().cuda()(x.cuda()).cpu()
    ok, err = close(got, ref, 1e-3, 1e-3)
    out["torchvision"]["resnet18"] = {"ok": ok, "err": err, "shape": list(got.shape)}
    g = torch.Generator().manual_seed(1)
    xy = torch.rand(2000, 2, generator=g) * 500
    wh = torch.rand(2000, 2, generator=g) * 60 + 1
    boxes, scores = torch.cat([xy, xy + wh], 1), torch.rand(2000, generator=g)
    keep_gpu = torchvision.ops.nms(boxes.cuda(), scores.cuda(), 0.5).cpu()
    keep_cpu = torchvision.ops.nms(boxes, scores, 0.5)
    out["torchvision"]["nms"] = {"ok": bool(torch.equal(keep_gpu, keep_cpu)), "kept": int(keep_gpu.numel()),
                                 "device": "cuda"}
    # roi_align: torchvision's own CUDA kernel (csrc/ops/cuda/roi_align_kernel.cu), against its CPU kernel
    features = torch.randn(2, 16, 64, 64, generator=g)
    rois = torch.cat([torch.randint(0, 2, (300, 1), generator=g).float(), boxes[:300] / 8], 1)
    ref = torchvision.ops.roi_align(features, rois, (7, 7), spatial_scale=1.0, sampling_ratio=2, aligned=True)
    got = torchvision.ops.roi_align(features.cuda(), rois.cuda(), (7, 7), spatial_scale=1.0, sampling_ratio=2,
                                    aligned=True).cpu()
    ok, err = close(got, ref, 1e-4, 1e-5)
    out["torchvision"]["roi_align"] = {"ok": ok, "err": err, "shape": list(got.shape), "device": "cuda"}


def check_torchaudio(out: dict) -> None:
    import torch
    import torchaudio

    out["torchaudio"] = {"version": torchaudio.__version__, "file": torchaudio.__file__}
    g = torch.Generator().manual_seed(2)
    wave = torch.randn(2, 16000, generator=g)
    mel = torchaudio.transforms.MelSpectrogram(sample_rate=16000, n_fft=400, n_mels=64)
    ref = mel(wave)
    got = mel.cuda()(wave.cuda()).cpu()
    ok, err = close(got, ref, 1e-3, 1e-3)
    out["torchaudio"]["melspectrogram"] = {"ok": ok, "err": err, "shape": list(got.shape), "device": "cuda"}
    # lfilter on CUDA runs torchaudio's own kernel (iir_cuda.cu, built by CUDA 13.2) through the set's 13.0
    # cudart (docs/ml-stack.md, "torchaudio's CUDA 13.2 build"); MelSpectrogram above is torch's cuFFT only
    import torchaudio.functional as F

    a_coeffs, b_coeffs = torch.tensor([1.0, -0.5]), torch.tensor([0.5, 0.5])
    ref = F.lfilter(wave, a_coeffs, b_coeffs)
    got = F.lfilter(wave.cuda(), a_coeffs.cuda(), b_coeffs.cuda()).cpu()
    ok, err = close(got, ref, 1e-4, 1e-4)
    out["torchaudio"]["lfilter"] = {"ok": ok, "err": err, "device": "cuda"}


def check_onnxruntime(out: dict) -> None:
    import io

    import onnxruntime as ort
    import torch

    out["onnxruntime"] = {"version": ort.__version__, "file": ort.__file__,
                          "available": ort.get_available_providers()}
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                                torch.nn.Flatten(), torch.nn.Linear(256, 10)).eval()
    x = torch.randn(8, 3, 32, 32)
    buffer = io.BytesIO()
    torch.onnx.export(model, (x,), buffer, input_names=["x"], output_names=["y"], dynamo=False)
    options = ort.SessionOptions()
    # no CPU fallback: the session is refused if any node would run on the CPU provider instead
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    session = ort.InferenceSession(buffer.getvalue(), options, providers=["CUDAExecutionProvider"])
    got = session.run(None, {"x": x.numpy()})[0]
    with torch.no_grad():
        ref = model(x).numpy()
    ok, err = close(got, ref, 1e-3, 1e-4)
    used = session.get_providers()
    out["onnxruntime"]["session"] = {"ok": ok and used[0] == "CUDAExecutionProvider", "err": err, "providers": used,
                                     "cpu_fallback": "disabled"}


def check_jax(out: dict) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    devices = jax.devices()
    out["jax"] = {"version": jax.__version__, "file": jax.__file__, "devices": [str(d) for d in devices]}
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((512, 512), dtype=np.float32), rng.standard_normal((512, 512), dtype=np.float32)
    f = jax.jit(lambda x, y: jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST))
    got = np.asarray(f(jax.device_put(a, devices[0]), jax.device_put(b, devices[0])))
    ok, err = close(got, a.astype(np.float64) @ b.astype(np.float64), 1e-4, 1e-4)
    out["jax"]["matmul"] = {"ok": ok and devices[0].platform == "gpu", "err": err, "platform": devices[0].platform}


def check_cupy(out: dict) -> None:
    import cupy
    import numpy as np

    out["cupy"] = {"version": cupy.__version__, "file": cupy.__file__,
                   "nvrtc": ".".join(map(str, cupy.cuda.nvrtc.getVersion()))}
    kernel = cupy.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * x + 2.0f * y", "cudapkgs_axpy2")
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(1 << 16, dtype=np.float32), rng.standard_normal(1 << 16, dtype=np.float32)
    got = cupy.asnumpy(kernel(cupy.asarray(x), cupy.asarray(y)))
    ok, err = close(got, x.astype(np.float64) ** 2 + 2 * y, 1e-5, 1e-5)
    out["cupy"]["elementwise"] = {"ok": ok, "err": err}
    a, b = rng.standard_normal((512, 512), dtype=np.float32), rng.standard_normal((512, 512), dtype=np.float32)
    got = cupy.asnumpy(cupy.asarray(a) @ cupy.asarray(b))
    ok, err = close(got, a.astype(np.float64) @ b.astype(np.float64), 1e-4, 1e-4)
    out["cupy"]["matmul"] = {"ok": ok, "err": err}


CHECKS = {"torch": check_torch, "torchvision": check_torchvision, "torchaudio": check_torchaudio,
          "onnxruntime": check_onnxruntime, "jax": check_jax, "cupy": check_cupy}


def failures(out: dict) -> list[str]:
    bad = []
    for name in CHECKS:
        part = out.get(name)
        if part is None:
            continue
        if "error" in part:
            bad.append(f"{name}: {part['error']}")
        for key, value in part.items():
            if isinstance(value, dict) and value.get("ok") is False:
                bad.append(f"{name}.{key}: {value}")
    return bad + out["maps"]["problems"]


def cuda_time(sync, fn, warmup: int, iters: int) -> float:
    """Median seconds of fn() over iters after warmup (sync() waits for the GPU)."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed(skip: set[str], warmup: int, iters: int) -> dict:
    """{kernel: {"seconds": median, "rate": throughput (TFLOP/s)}}."""
    results = {}
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    s = cuda_time(torch.cuda.synchronize, lambda: a @ b, warmup, iters)
    results["torch_matmul_bf16_8192"] = {"seconds": s, "rate": 2 * n**3 / s / 1e12}
    x = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(256, 256, 3, padding=1, bias=False).cuda().to(torch.bfloat16).to(
        memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = True
    with torch.no_grad():
        s = cuda_time(torch.cuda.synchronize, lambda: conv(x), warmup, iters)
    results["torch_conv_bf16_64x256x56x56"] = {"seconds": s, "rate": 2 * 64 * 256 * 256 * 9 * 56 * 56 / s / 1e12}
    del a, b, x, conv
    torch.cuda.empty_cache()
    if "jax" not in skip:
        import jax
        import jax.numpy as jnp

        ja = jnp.ones((n, n), dtype=jnp.bfloat16)
        jb = jnp.ones((n, n), dtype=jnp.bfloat16)
        f = jax.jit(lambda x, y: x @ y)
        s = cuda_time(lambda: f(ja, jb).block_until_ready(), lambda: f(ja, jb), warmup, iters)
        results["jax_matmul_bf16_8192"] = {"seconds": s, "rate": 2 * n**3 / s / 1e12}
    if "cupy" not in skip:
        import cupy

        m = 4096
        ca = cupy.random.standard_normal((m, m), dtype=cupy.float32)
        cb = cupy.random.standard_normal((m, m), dtype=cupy.float32)
        s = cuda_time(cupy.cuda.Device().synchronize, lambda: ca @ cb, warmup, iters)
        results["cupy_matmul_fp32_4096"] = {"seconds": s, "rate": 2 * m**3 / s / 1e12}
    return results


def compare(directory: Path) -> dict:
    """Per kernel: the median rate over rounds for ours and the peer, and ours/peer."""
    sides: dict[str, dict[str, list[float]]] = {"ours": {}, "peer": {}}
    for side in sides:
        for path in sorted(directory.glob(f"speed-{side}-*.json")):
            for kernel, r in json.loads(path.read_text())["speed"].items():
                sides[side].setdefault(kernel, []).append(r["rate"])
    rows = {}
    for kernel in sorted(set(sides["ours"]) & set(sides["peer"])):
        o, p = statistics.median(sides["ours"][kernel]), statistics.median(sides["peer"][kernel])
        rows[kernel] = {"ours": o, "peer": p, "ratio": o / p, "rounds": [len(sides["ours"][kernel]),
                                                                          len(sides["peer"][kernel])],
                        "ours_all": sides["ours"][kernel], "peer_all": sides["peer"][kernel]}
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("check", "speed", "compare"))
    parser.add_argument("directory", nargs="?", type=Path, help="compare: the folder of speed-*.json")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--store", help="check: the store every CUDA library must come from (else not checked)")
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out (e.g. jax,cupy)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    if args.mode == "compare":
        rows = compare(args.directory)
        for kernel, r in rows.items():
            print(f"{kernel:32} ours {r['ours']:8.1f}  peer {r['peer']:8.1f} TFLOP/s  ours/peer {r['ratio']:.3f}  "
                  f"rounds {r['rounds']}")
        (args.directory / "speed-compare.json").write_text(json.dumps(rows, indent=1))
        return 0 if rows else 1
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch, JAX and CuPy share the GPU
    out: dict = {"python": sys.executable, "version": sys.version.split()[0]}
    if args.mode == "speed":
        out["speed"] = speed(skip, args.warmup, args.iters)
        for kernel, r in out["speed"].items():
            print(f"{kernel:32} {r['rate']:8.1f} TFLOP/s ({r['seconds'] * 1e3:.3f} ms)")
    else:
        for name, check in CHECKS.items():
            if name in skip:
                continue
            try:
                check(out)
            except Exception as error:  # noqa: BLE001 - every part is reported, the run goes on
                out.setdefault(name, {})["error"] = f"{type(error).__name__}: {error}"
                out[name]["traceback"] = traceback.format_exc()[-2000:]
        out["maps"] = maps_report(args.store)
        out["failures"] = failures(out)
        for name in CHECKS:
            if name in out:
                print(name, json.dumps({k: v for k, v in out[name].items() if k != "traceback"}))
        print("mapped CUDA libraries:", len(out["maps"]["libraries"]))
        for problem in out["failures"]:
            print("FAIL:", problem)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
    return 1 if out.get("failures") else 0


if __name__ == "__main__":
    sys.exit(main())
