"""On the lent GPU machine: check that every carried piece arrived and that the archive they make is the one packed.

usage: python3 bench/device/check_pieces.py /tmp/carry/NAME

`receive_piece.sh` appends the pieces to NAME/closure.tar.zst (the name whatever the archive's compression) and
lists them in NAME/received; `pack_closure.py` or `pack_ml_cache.py` wrote NAME/manifest.json (``pieces``: names in
order, ``sha256`` and ``size`` of the whole archive). Exit 1 with the reason when a piece is missing, out of
order, or the archive's sha256 differs; prints one line when they agree.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys


def check(dest: str) -> str:
    """The agreement line for `dest` (a /tmp/carry/NAME folder); raises SystemExit with the reason otherwise."""
    with open(os.path.join(dest, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(dest, "received")) as f:
        received = f.read().split()
    if received != [p["name"] for p in manifest["pieces"]]:
        raise SystemExit(f"{dest}: received {len(received)} pieces, the manifest lists {len(manifest['pieces'])}")
    digest = hashlib.sha256()
    with open(os.path.join(dest, "closure.tar.zst"), "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    if digest.hexdigest() != manifest["sha256"]:
        raise SystemExit(f"sha256 {digest.hexdigest()} != manifest {manifest['sha256']}")
    size = f", {manifest['size']} bytes" if "size" in manifest else ""
    return f"the tar's sha256 equals the manifest's ({len(received)} pieces{size})"


if __name__ == "__main__":
    print(check(sys.argv[1]))
