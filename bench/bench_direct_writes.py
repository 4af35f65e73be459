"""Writing big files with O_DIRECT (store/direct_writes.py) against buffered writes, in one process, alternating.

Run:  python bench/bench_direct_writes.py -r 3                 (1 GiB hashed and written; then files of 64 KiB-16 MiB)
      python bench/bench_direct_writes.py --tiny               (CI: 32 MiB, two sizes, one round)

Two measurements, each the two ways alternating in this process, medians of ``-r`` rounds, an untimed
``sync`` after each (so a buffered write's write-back is never charged to it, while a direct write waits
for the disk inside its time: honest against direct writes):

* ``stream``: one file of ``--stream-mib`` MiB, written in 512 KiB pieces from an unaligned source and
  each piece hashed first (sha256), as `nar_restore` does for a NAR's big file: the direct writer's disk
  time overlaps the hashing (one write in flight on its thread), the buffered one pays the page-cache copy;
* ``sizes``: ``--total-mib`` MiB as many files of one size (64 KiB to 16 MiB), for `DIRECT_MIN`.

Printed: wall and CPU seconds per GiB (CPU: user + system of this process, from getrusage; the direct
writes' thread included), of it system, the ratios direct / buffered, and the load average before and after.
The files go under ``--dir`` (default: a new directory in the system's temporary directory), removed after.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cudapkgs.store.direct_writes import DirectWriter  # noqa: E402

PIECE = 1 << 19


def _usage() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime


def _write(path: str, data: memoryview, direct: bool, hash_it: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        sha = hashlib.sha256() if hash_it else None
        if direct:
            with DirectWriter(fd, len(data)) as writer:
                for at in range(0, len(data), PIECE):
                    piece = data[at : at + PIECE]
                    if sha is not None:
                        sha.update(piece)
                    writer.write(piece)
                writer.finish()
        else:
            for at in range(0, len(data), PIECE):
                piece = data[at : at + PIECE]
                if sha is not None:
                    sha.update(piece)
                written = os.write(fd, piece)
                while written < len(piece):
                    written += os.write(fd, piece[written:])
    finally:
        os.close(fd)


def timed(work: Path, source: bytes, size: int, count: int, direct: bool, hash_it: bool) -> tuple[float, float, float]:
    """(wall s, CPU s, system s) of writing `count` files of `size` bytes into a new directory under `work`."""
    target = Path(tempfile.mkdtemp(dir=work))
    start, (cpu0, sys0) = time.perf_counter(), _usage()
    for i in range(count):
        offset = 1 + i % 61  # unaligned, as a NAR's contents are in the reader's chunk
        _write(str(target / str(i)), memoryview(source)[offset : offset + size], direct, hash_it)
    wall, (cpu1, sys1) = time.perf_counter() - start, _usage()
    shutil.rmtree(target)
    os.sync()
    return wall, cpu1 - cpu0, sys1 - sys0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--runs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="32 MiB, 1 and 8 MiB files, one round (CI)")
    parser.add_argument("--stream-mib", type=int, default=1024)
    parser.add_argument("--total-mib", type=int, default=512)
    parser.add_argument("--dir", help="where the files go (default: the system's temporary directory)")
    args = parser.parse_args(argv)
    runs, stream, total = (1, 32 << 20, 32 << 20) if args.tiny else (args.runs, args.stream_mib << 20, args.total_mib << 20)
    sizes = [1 << 20, 8 << 20] if args.tiny else [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
    work = Path(tempfile.mkdtemp(prefix="bench-direct-", dir=args.dir))
    source = os.urandom(max(stream, max(sizes)) + 64)
    load_before = os.getloadavg()
    rows: list[tuple[str, dict[bool, list[tuple[float, float, float]]], int]] = []
    try:
        cases = [(f"stream: one {stream >> 20} MiB file, hashed and written", stream, 1, True)]
        cases += [(f"sizes: {total // size} files of {size >> 10} KiB", size, max(1, total // size), False) for size in sizes]
        for name, size, count, hash_it in cases:
            got: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
            for i in range(runs):
                for direct in ((True, False) if i % 2 == 0 else (False, True)):
                    got[direct].append(timed(work, source, size, count, direct, hash_it))
            rows.append((name, got, size * count))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"runs: {runs}; {os.cpu_count()} CPUs; files under {args.dir or tempfile.gettempdir()}; load average before "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f}\n")
    print("| what | direct wall s/GiB | buffered wall s/GiB | wall × | direct CPU s/GiB (system) | "
          "buffered CPU s/GiB (system) | CPU × |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, got, nbytes in rows:
        per = (1 << 30) / nbytes
        med = {d: [statistics.median(x[k] for x in got[d]) * per for k in range(3)] for d in (True, False)}
        print(f"| {name} | {med[True][0]:.2f} | {med[False][0]:.2f} | {med[True][0] / max(med[False][0], 1e-9):.2f} "
              f"| {med[True][1]:.2f} ({med[True][2]:.2f}) | {med[False][1]:.2f} ({med[False][2]:.2f}) "
              f"| {med[True][1] / max(med[False][1], 1e-9):.2f} |")
    print("\n(an untimed sync after each: the buffered rows' write-back is not in their time; the direct rows wait "
          "for the disk inside theirs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
