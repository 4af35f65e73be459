"""What string context costs an evaluation: the derivations of the ML packages and their closures.

Run:  python bench/bench_string_context.py [--runs 9]

Each run makes a fresh package tree and evaluates the derivations of torch, torchvision, torchaudio,
onnxruntime, cupy and the JAX CUDA plugins of cudaPackages_13_0 (with their whole closures: every
derivation is made once per tree). The peer is the same evaluation with the string-context scan
switched off (`derivation._string_context` and `derivation._remember_outputs` replaced by no-ops,
as the code was before), in the same process, alternating, peer first in odd rounds. Prints medians
of wall and CPU (process time) per run, their ratios, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
os.environ.setdefault("CUDAPKGS_MANIFESTS", str(HERE.parent / "src" / "cudapkgs" / "data" / "manifests"))

import cudapkgs  # noqa: E402
from cudapkgs import derivation  # noqa: E402

NAMES = ["torch", "torchvision", "torchaudio", "onnxruntime", "cupy", "jax-cuda13-plugin", "jax-cuda13-pjrt"]


def _evaluate(store: str) -> int:
    pkgs = cudapkgs.import_pkgs(config={"storeDir": store, "fetchers": ["wheels"], "allowUnfree": True,
                                        "prebuiltWheels": ["nccl", "libnvshmem"]})
    ps = pkgs.cudaPackages_13_0.pkgs.pkgsCuda.python3Packages
    seen: set[str] = set()
    for name in NAMES:
        seen.update(d.drv_path for d in ps[name].derivation.closure())
    return len(seen)


def _timed(store: str) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    count = _evaluate(store)
    return time.perf_counter() - wall, time.process_time() - cpu, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    on = (derivation._string_context, derivation._remember_outputs)
    off = (lambda *a, **k: None, lambda *a, **k: None)
    results: dict[str, list[tuple[float, float]]] = {"context": [], "no context": []}
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    counts = set()
    with tempfile.TemporaryDirectory(prefix="bench-string-context-") as tmp:
        _timed(f"{tmp}/warm")  # imports and manifests parsed once, for both
        for i in range(args.runs):
            order = ["no context", "context"] if i % 2 == 0 else ["context", "no context"]
            for label in order:
                derivation._string_context, derivation._remember_outputs = on if label == "context" else off
                wall, cpu, count = _timed(f"{tmp}/store-{i}-{label.replace(' ', '-')}")
                results[label].append((wall, cpu))
                counts.add(count)
    derivation._string_context, derivation._remember_outputs = on
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    print(f"derivations per run: {sorted(counts)}; runs: {args.runs}")
    print(f"{'':12} {'wall ms':>9} {'cpu ms':>9}")
    med = {k: (statistics.median(w for w, _ in v) * 1e3, statistics.median(c for _, c in v) * 1e3)
           for k, v in results.items()}
    for label, (w, c) in med.items():
        print(f"{label:12} {w:9.1f} {c:9.1f}")
    print(f"ratio context/no context: wall {med['context'][0] / med['no context'][0]:.3f}, "
          f"cpu {med['context'][1] / med['no context'][1]:.3f}")
    print(f"load average before {' '.join(load_before)}, after {' '.join(load_after)}")


if __name__ == "__main__":
    main()
