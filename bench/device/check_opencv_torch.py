"""OpenCV's CUDA modules and the store's torch in one process on the GPU, with one libcudart (issue 33, item 6).

usage: env -i <env>/bin/python3 bench/device/check_opencv_torch.py [--order opencv-first|torch-first] [--json FILE]

Imports cv2 and torch in the given order (Nixpkgs' tests/opencv-and-torch/package.nix@0417886 imports them
both ways), then on the GPU: ``cv2.cuda.add`` of two 1024×1024 float32 GpuMats and ``cv2.cuda.GaussianBlur``
(via ``createGaussianFilter``) against the CPU's results, a torch matmul (1024², float32) against float64 on
the CPU, and a hand-over: OpenCV's result downloaded, given to torch on the GPU, summed there. Then reads
``/proc/self/maps`` (bounded: at most 16 MiB) and asserts that exactly one ``libcudart.so*`` file is mapped and
that it lies under the store of the interpreter (``sys.prefix``'s store), with every other CUDA library
(``libcu*``, ``libnv*``, ``libnpp*``) from the store too, but the driver's (``libcuda.so``,
``libnvidia-*``). Prints one line per check and exits 1 on any failure; ``--json`` writes the results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

DRIVER = ("libcuda.so", "libnvidia-")
CUDA_PREFIXES = ("libcu", "libnv", "libnpp", "libcublas", "libtorch_cuda", "libc10_cuda", "libopencv_cuda")


def store_of(path: str) -> str:
    """The store directory of a store path (``/a/b/store`` of ``/a/b/store/<hash>-name/...``)."""
    parts = os.path.realpath(path).split(os.sep)
    for i, part in enumerate(parts):
        if len(part) > 33 and part[32] == "-" and part[:32].isalnum():
            return os.sep.join(parts[:i])
    raise SystemExit(f"{path} is not in a store")


def mapped_libraries(limit: int = 16 << 20) -> list[str]:
    """The distinct files mapped into this process whose names look like shared libraries."""
    with open("/proc/self/maps", "rb") as maps:
        text = maps.read(limit).decode("utf-8", "replace")
    found = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and ".so" in fields[5] and fields[5] not in found:
            found.append(fields[5])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", choices=["opencv-first", "torch-first"], default="opencv-first")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results: dict[str, object] = {"order": args.order}
    ok = True

    def check(name: str, passed: bool, detail: str) -> None:
        nonlocal ok
        ok &= passed
        results[name] = {"ok": passed, "detail": detail}
        print(f"{'OK ' if passed else 'BAD'} {name}: {detail}")

    if args.order == "opencv-first":
        import cv2
        import torch
    else:
        import torch
        import cv2
    import numpy as np

    results["versions"] = {"cv2": cv2.__version__, "torch": torch.__version__, "cuda": torch.version.cuda}
    print(f"cv2 {cv2.__version__} ({cv2.__file__}), torch {torch.__version__} ({torch.__file__})")
    check("devices", cv2.cuda.getCudaEnabledDeviceCount() > 0 and torch.cuda.is_available(),
          f"cv2 sees {cv2.cuda.getCudaEnabledDeviceCount()}, torch {torch.cuda.device_count()} "
          f"({torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'})")
    rng = np.random.default_rng(7)
    a = rng.random((1024, 1024), dtype=np.float32)
    b = rng.random((1024, 1024), dtype=np.float32)
    ga, gb = cv2.cuda.GpuMat(), cv2.cuda.GpuMat()
    ga.upload(a)
    gb.upload(b)
    added = cv2.cuda.add(ga, gb).download()
    check("cv2.cuda.add", bool(np.array_equal(added, cv2.add(a, b))), f"max |diff| {np.abs(added - (a + b)).max():.1e}")
    blur = cv2.cuda.createGaussianFilter(cv2.CV_32F, cv2.CV_32F, (5, 5), 1.5).apply(ga).download()
    cpu = cv2.GaussianBlur(a, (5, 5), 1.5, borderType=cv2.BORDER_REFLECT_101)
    err = float(np.abs(blur - cpu).max())
    check("cv2.cuda Gaussian", err < 1e-4, f"max |diff| from the CPU {err:.1e} (tolerance 1e-4)")
    x = torch.from_numpy(a).cuda()
    y = torch.from_numpy(b).cuda()
    z = (x @ y).double().cpu()
    ref = torch.from_numpy(a).double() @ torch.from_numpy(b).double()
    rel = float((z - ref).norm() / ref.norm())
    check("torch matmul", rel < 1e-3, f"relative Frobenius error {rel:.1e} against float64 (tolerance 1e-3)")
    handed = float(torch.from_numpy(added).cuda().sum().item())
    want = float(np.float64(a).sum() + np.float64(b).sum())
    check("cv2 -> torch", abs(handed - want) / want < 1e-4, f"sum on the GPU {handed:.6g}, expected {want:.6g}")

    store = store_of(torch.__file__)  # the env's bin/python3 may resolve to a host CPython outside the store
    libraries = mapped_libraries()
    cudart = [p for p in libraries if os.path.basename(p).startswith("libcudart.so")]
    check("one libcudart", len(cudart) == 1 and cudart[0].startswith(store + os.sep),
          f"{cudart} (store {store})")
    cuda = [p for p in libraries if os.path.basename(p).startswith(CUDA_PREFIXES)]
    foreign = [p for p in cuda if not p.startswith(store + os.sep) and not os.path.basename(p).startswith(DRIVER)]
    names = [os.path.basename(p).split(".so")[0] for p in cuda if not os.path.basename(p).startswith(DRIVER)]
    twice = sorted({n for n in names if names.count(n) > 1})
    check("CUDA libraries from the store", not foreign and not twice,
          f"{len(cuda)} CUDA libraries mapped; not from the store (nor the driver's): {foreign or 'none'}; "
          f"a soname twice: {twice or 'none'}")
    results["cuda_libraries"] = cuda
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
