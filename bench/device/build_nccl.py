"""Build cudaPackages_13_0.nccl-tests against the set's NCCL for sm_90 and export its closure for the H200.

usage: python bench/device/build_nccl.py [--store /work/stores/nccl] [--sources ../shared/sources]
                                         [--out /work/main/.dev-i10] [--jobs 2] [--no-build]

Configuration: NVIDIA's wheels for the toolkit (`fetchers=["wheels"]`), allowUnfree, cudaSupport,
`cudaCapabilities=["9.0"]`, `cudaForwardCompat=false`, the source mirror for fetchFromGitHub.
The set's `nccl` and `nccl-tests` are built as the set defines them, with no override (CUDA
13.0's cudart wheel has libcudart_static.a, so NCCL links cudart statically as in Nixpkgs; see
pkgs/nccl/package.py `wheel_cudart_fallback` for CUDA 12's wheel, which has none). The closure of nccl-tests' `out` is written
with `cudapkgs export` (store/transfer.py) to <out>/nccl-closure.tar.gz, with the store paths in
<out>/nccl-paths.txt.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

LIMIT = 64 * 1024 * 1024


def packages(store_dir: str, sources: str):
    import cudapkgs

    config = {"storeDir": store_dir, "fetchers": ["wheels"], "allowUnfree": True, "cudaSupport": True,
              "cudaCapabilities": ["9.0"], "cudaForwardCompat": False, "sourceMirrors": [sources]}
    cuda = cudapkgs.import_pkgs(config=config).cudaPackages_13_0
    return cuda.nccl, cuda["nccl-tests"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="/work/stores/nccl")
    parser.add_argument("--sources", default=str(Path(__file__).resolve().parents[3] / "shared" / "sources"))
    parser.add_argument("--out", default="/work/main/.dev-i10")
    parser.add_argument("--no-build", action="store_true", help="only export what is already built")
    args = parser.parse_args()

    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store
    from cudapkgs.store.transfer import export_closure

    nccl, tests = packages(args.store, args.sources)
    print(nccl.name, nccl.drvPath, tests.name, tests.drvPath, sep="\n", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with Store.open(args.store) as store:
        if not args.no_build:
            realise(store, [tests.derivation])
        archive = out / "nccl-closure.tar.gz"
        paths = export_closure(store, [tests.out], archive)
    (out / "nccl-paths.txt").write_text("\n".join(paths) + f"\nnccl-tests={tests.out}\nnccl={nccl.out}\n")
    size = archive.stat().st_size
    print(f"{len(paths)} paths, {size / 2**20:.1f} MiB -> {archive}")
    return 0 if size <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
