"""A pinned wheel installed with its bytes read once (the sha256 fed by the members' reads) against twice.

Run:  python bench/bench_wheel_one_read.py [--runs 5] [--wheel PATH] [--scratch DIR]
      python bench/bench_wheel_one_read.py --tiny      (a generated 24 MiB wheel, two rounds: tests/test_benches.py)

Each round installs the same wheel with `cudapkgs.fetch.wheel_install.install_wheel`, pinned by its
sha256, every member checked against RECORD (no ``.checked`` record), into a fresh folder, once as the
code is now (`wheel_hash.SharedReadHash` takes the compressed bytes the members' readers offer) and once
as before (the same hash with no offers: it reads the whole file itself, as `_HashInBackground` did),
in turn, in this process. Prints the median wall, CPU (this process's user + system, every thread) and
bytes read (``rchar`` of /proc/self/io: every read and pread, page cache included), the ratios, how many
bytes the hash took from the readers, and the load average before and after.

The default wheel is torch 2.9.1 (cp311) from the wheel cache, if it is there; it is only read, through a
symbolic link in the scratch folder (so that the ``.checked`` record `install_wheel` writes lands there,
never in the wheel cache).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cudapkgs.fetch import wheel_hash, wheel_install  # noqa: E402

TORCH = Path.home() / ".cache" / "cudapkgs" / "wheels" / "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl"


def rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def make_wheel(path: Path) -> None:
    """A wheel of a 16 MiB member (half compressible), 200 small modules and RECORD."""
    rows = []
    big = (os.urandom(1 << 20) + bytes(1 << 20)) * 8
    files = {"tinypkg/big.bin": big, **{f"tinypkg/m{i}.py": f"X = {i}\n".encode() * 300 for i in range(200)}}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{name},sha256={digest},{len(data)}")
        rows.append("tinypkg-1.dist-info/RECORD,,")
        z.writestr("tinypkg-1.dist-info/RECORD", "\n".join(rows) + "\n")


class _Before:
    """`SharedReadHash` as before this change: offered nothing, it reads every byte itself."""

    def __enter__(self) -> None:
        self._offer, self._stream = wheel_hash.SharedReadHash.offer, wheel_hash.SharedReadHash.stream
        self._start = wheel_hash.SharedReadHash.start
        start = self._start
        wheel_hash.SharedReadHash.start = lambda self, planned=(): start(self)  # type: ignore[method-assign]
        wheel_hash.SharedReadHash.offer = lambda self, *a: None  # type: ignore[method-assign]
        wheel_hash.SharedReadHash.stream = lambda self, *a: contextlib.nullcontext()  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        wheel_hash.SharedReadHash.offer, wheel_hash.SharedReadHash.stream = self._offer, self._stream  # type: ignore[method-assign]
        wheel_hash.SharedReadHash.start = self._start  # type: ignore[method-assign]


def one(wheel: Path, sha256: str, scratch: Path, before: bool) -> tuple[float, float, int, int]:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(wheel.with_name(wheel.name + ".checked"))  # every member checked, each round
    target = scratch / "site"
    seen: list[wheel_hash.SharedReadHash] = []
    real_init = wheel_hash.SharedReadHash.__init__

    def init(self: wheel_hash.SharedReadHash, *args: object, **kw: object) -> None:
        real_init(self, *args, **kw)  # type: ignore[arg-type]
        seen.append(self)

    wheel_hash.SharedReadHash.__init__ = init  # type: ignore[method-assign]
    try:
        with _Before() if before else contextlib.nullcontext():
            read0, cpu0, start = rchar(), time.process_time(), time.perf_counter()
            wheel_install.install_wheel(wheel, site=target, prefix=target, sha256=sha256)
            wall, cpu, read = time.perf_counter() - start, time.process_time() - cpu0, rchar() - read0
    finally:
        wheel_hash.SharedReadHash.__init__ = real_init  # type: ignore[method-assign]
        shutil.rmtree(target, ignore_errors=True)
    return wall, cpu, read, seen[0].offered_bytes if seen else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds (each: now, then before)")
    parser.add_argument("--wheel", type=Path, help=f"a wheel (default: {TORCH.name} from the wheel cache)")
    parser.add_argument("--sha256", help="its sha256 (default: the .sha256 beside it, else computed)")
    parser.add_argument("--scratch", type=Path, help="where to install (default: a new folder in $TMPDIR)")
    parser.add_argument("--tiny", action="store_true", help="a generated 24 MiB wheel, two rounds")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-one-read-", dir=args.scratch))
    try:
        if args.tiny:
            source = scratch / "tinypkg-1-py3-none-any.whl"
            make_wheel(source)
            runs = 2
        else:
            source = args.wheel or TORCH
            runs = args.runs
            if not source.is_file():
                raise SystemExit(f"no wheel at {source} (give --wheel)")
        sha256 = args.sha256
        if sha256 is None and source.with_name(source.name + ".sha256").is_file():
            sha256 = source.with_name(source.name + ".sha256").read_text().split()[0]
        if sha256 is None:
            sha256 = hashlib.sha256(source.read_bytes()).hexdigest()
        wheel = scratch / source.name
        if wheel != source:
            os.symlink(source.resolve(), wheel)  # read only; records land in the scratch folder
        size = source.stat().st_size
        print(f"wheel: {source.name}, {size / 2**20:.1f} MiB; load before: {load()}")
        rows: dict[bool, list[tuple[float, float, int, int]]] = {False: [], True: []}
        one(wheel, sha256, scratch, False)  # warm the page cache: both read it from memory
        for _ in range(runs):
            for before in (False, True):
                rows[before].append(one(wheel, sha256, scratch, before))
        med = {b: [statistics.median(r[i] for r in rows[b]) for i in range(4)] for b in rows}
        print(f"load after: {load()}")
        print()
        print("| install_wheel, pinned | wall s | CPU s | bytes read (rchar) | of the wheel's bytes, taken from the readers |")
        print("|---|---:|---:|---:|---:|")
        for before, label in ((False, "now: one read"), (True, "before: two reads")):
            wall, cpu, read, offered = med[before]
            print(f"| {label} | {wall:.3f} | {cpu:.3f} | {read / 2**20:.0f} MiB ({read / size:.2f}x the wheel) "
                  f"| {offered / size:.0%} |")
        print(f"| now / before | {med[False][0] / med[True][0]:.3f} | {med[False][1] / med[True][1]:.3f} "
              f"| {med[False][2] / med[True][2]:.3f} | |")
        print()
        for before, label in ((False, "now"), (True, "before")):
            print(f"{label}, each run: wall " + " ".join(f"{r[0]:.2f}" for r in rows[before])
                  + "; CPU " + " ".join(f"{r[1]:.2f}" for r in rows[before]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
