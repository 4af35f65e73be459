"""Realise the ML environment of issue 31's GPU proof (deliverable 7) in a store and print its path.

usage: python bench/device/build_ml_env.py [--store DIR] [--python python312] [--capability 9.0] [--jobs 2]

The environment: ``cudaPackages_13_0.pkgs.pkgsCuda.<python>Packages.withPackages`` of torch, torchvision,
torchaudio, onnxruntime, onnx (ml_env_gpu.py's ONNX Runtime check exports its model with torch.onnx), jax,
jax-cuda13-plugin, cupy and numpy, with ``allowUnfree``,
``fetchers = ["wheels"]``, ``prebuiltWheels = ["nccl", "libnvshmem"]`` and ``cudaCapabilities = [CAPABILITY]``
(the lent H100/H200: 9.0). Prints one line: the env's store path (its ``bin/python3``).
Raises CudapkgsError (one line) when an attribute is missing or a build fails.
"""

from __future__ import annotations

import argparse
import os
import sys

PACKAGES = ("torch", "torchvision", "torchaudio", "onnxruntime", "onnx", "jax", "jax-cuda13-plugin", "cupy", "numpy")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="the store (default: the configured one)")
    parser.add_argument("--python", default="python312", help="the interpreter's attribute prefix")
    parser.add_argument("--capability", default="9.0")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)

    import cudapkgs
    from cudapkgs.store.location import default_store_dir
    from cudapkgs.store.store import Store
    from cudapkgs.realise.scheduler import realise_parallel

    store_dir = args.store or default_store_dir()
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"], "storeDir": store_dir,
                                        "prebuiltWheels": ["nccl", "libnvshmem"],
                                        "cudaCapabilities": [args.capability]})
    ps = pkgs.cudaPackages_13_0.pkgs.pkgsCuda[f"{args.python}Packages"]
    env = ps.withPackages([ps[name] for name in PACKAGES])
    with Store.open(store_dir) as store:
        realise_parallel(store, [env.derivation], jobs=args.jobs)
    print(env.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
