"""Build the CUDA saxpy (sm_90) from NVIDIA's wheels and archive its closure for the H200.

usage: python bench/device/pack_saxpy.py [--store /tmp/cudapkgs-store] [--out build/saxpy-h200]

The closure (Store.closure of saxpy's out) is archived with absolute paths, so
`tar -xzf closure.tar.gz -C /` on the device puts every path back at the same
store path; that machine must use the same store directory. Writes
closure.tar.gz, closure.txt and saxpy-path into --out (build/ is git-ignored).
"""

from __future__ import annotations

import argparse
import os
import sys
import tarfile
from pathlib import Path

LIMIT = 64 * 1024 * 1024
CONFIG = {
    "fetchers": ["wheels"], "allowUnfree": True, "cudaSupport": True,
    "cudaCapabilities": ["9.0"], "cudaForwardCompat": False,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="/tmp/cudapkgs-store")
    parser.add_argument("--out", default="build/saxpy-h200")
    args = parser.parse_args()
    os.environ.setdefault("CUDAPKGS_MANIFESTS", str(Path(__file__).resolve().parents[3] / "shared" / "manifests"))

    import cudapkgs
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    with Store.open(args.store) as store:
        pkgs = cudapkgs.import_pkgs(config={**CONFIG, "storeDir": args.store})
        saxpy = pkgs.saxpy.override(cudaPackages=pkgs.cudaPackages_13_0)
        realise(store, [saxpy.derivation])
        closure = sorted(store.closure([saxpy.out]))
        size = sum(store.query(p).nar_size for p in closure)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "closure.txt").write_text("".join(p + "\n" for p in closure))
    (out / "saxpy-path").write_text(saxpy.out + "\n")
    archive = out / "closure.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in closure:
            tar.add(path, arcname=path.lstrip("/"))
    packed = archive.stat().st_size
    print(f"saxpy: {saxpy.out}")
    print(f"closure: {len(closure)} paths, {size / 2**20:.2f} MiB unpacked, {packed / 2**20:.2f} MiB as {archive}")
    if packed > LIMIT:
        print("the archive is over the 64 MiB carry limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
