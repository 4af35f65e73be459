"""Fewer bytes on the wire: zstd levels and long-distance matching on a closure's NARs (issue 34, item 1).

Run:  python bench/bench_nar_levels.py --store /tmp/floor7-ml/store --top /tmp/floor7-ml/store/…-torch-2.14.1 \\
          --top …-numpy-2.4.6 --levels 3,9 --ldm-levels 3,9 --sample-levels 19 --sample 8
      python bench/bench_nar_levels.py --tiny                 (a synthetic 24 MiB path: the CI smoke test)

For each configuration, every NAR of the closure (or of the sample) is compressed and then decompressed
in this process, one thread, and the bytes out and the CPU seconds of each step (`time.thread_time`
around the compressor's and the decoder's calls only: making the NAR is not counted) are summed:

* ``--levels``: what `copy --to` and `serve` write: independent frames of `compression.ZSTD_FRAME` (8 MiB)
  of NAR, each told its size (libzstd then shrinks the window to the frame: 8 MiB at most, any level);
* ``--ldm-levels``: each NAR as one frame at that level with zstd's long-distance matching and a window of
  2^`compression.ZSTD_WINDOW_LOG_MAX` (128 MiB: the most Nix's decoder and ours take by default),
  what ``zstd --long`` writes: repeats further back than 8 MiB (a fat binary's kernels for several GPU
  architectures) are found; frames of 8 MiB cannot see them;
* ``--sample-levels``: framed, like ``--levels``, but only every ``--sample``-th frame of every NAR (the
  slow levels: level 19 compresses at a few MB/s); printed beside the same sample at level 3.

Decompression is what a substitution does: `compression.decompressed_reader` over the compressed bytes in
memory, read 512 KiB at a time. Printed per configuration: NAR MiB, compressed MiB and share, compression
and decompression CPU seconds and CPU seconds per GiB of NAR, and the bytes saved against level 3 with
what loopback TCP would no longer cost for them (``--tcp-cpu-per-gib``: the fifteenth session measured
0.54 CPU-s per GiB of body over a page-cache read, both processes together); the load average before and
after. The CPU per GiB figures are of one core; run it calm or say the load.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

READ = 512 << 10


def _frames(path: str, sample: int):
    """The NAR of `path` in frames of ZSTD_FRAME bytes (every `sample`-th one, from the first)."""
    from cudapkgs.store import nar
    from cudapkgs.store.caches.compression import ZSTD_FRAME

    pending, size, index = [], 0, 0
    for chunk in nar.dump(path):
        view = memoryview(chunk)
        while view:
            take = view[: ZSTD_FRAME - size]
            view = view[len(take):]
            pending.append(bytes(take))
            size += len(take)
            if size == ZSTD_FRAME:
                if index % sample == 0:
                    yield b"".join(pending)
                pending, size, index = [], 0, index + 1
    if pending and index % sample == 0:
        yield b"".join(pending)


def _decompress_cpu(data: bytes) -> tuple[float, int]:
    """(thread CPU s, bytes out) of reading `data` through `decompressed_reader`, as a substitution does."""
    from cudapkgs.store.caches.compression import decompressed_reader

    start = time.thread_time()
    reader = decompressed_reader(io.BytesIO(data), "zstd")
    out = 0
    while chunk := reader.read(READ):
        out += len(chunk)
    return time.thread_time() - start, out


def framed(paths: list[str], level: int, sample: int = 1) -> dict:
    """Every (sampled) frame of every NAR at `level`, as `compress_stream` writes them (told their size)."""
    import zstandard

    cctx = zstandard.ZstdCompressor(level=level, write_content_size=True)
    got = {"nar": 0, "out": 0, "compress": 0.0, "decompress": 0.0}
    for path in paths:
        pieces, size = [], 0
        for frame in _frames(path, sample):
            start = time.thread_time()
            pieces.append(cctx.compress(frame))
            got["compress"] += time.thread_time() - start
            size += len(frame)
        data = b"".join(pieces)
        got["nar"] += size
        got["out"] += len(data)
        cpu, out = _decompress_cpu(data)
        got["decompress"] += cpu
        if out != size:
            raise AssertionError(f"{path}: {out} bytes back from {size}")
    return got


def long_window(paths: list[str], level: int) -> dict:
    """Each NAR as one frame at `level`, long-distance matching on, window 2^ZSTD_WINDOW_LOG_MAX."""
    import zstandard

    from cudapkgs.store import nar
    from cudapkgs.store.caches.compression import ZSTD_WINDOW_LOG_MAX

    params = zstandard.ZstdCompressionParameters.from_level(level, window_log=ZSTD_WINDOW_LOG_MAX, enable_ldm=True)
    cctx = zstandard.ZstdCompressor(compression_params=params)
    got = {"nar": 0, "out": 0, "compress": 0.0, "decompress": 0.0}
    for path in paths:
        compressor = cctx.compressobj()
        pieces = []
        for chunk in nar.dump(path):
            start = time.thread_time()
            pieces.append(compressor.compress(chunk))
            got["compress"] += time.thread_time() - start
            got["nar"] += len(chunk)
        start = time.thread_time()
        pieces.append(compressor.flush())
        got["compress"] += time.thread_time() - start
        data = b"".join(pieces)
        got["out"] += len(data)
        window = zstandard.get_frame_parameters(data).window_size
        if window > 1 << ZSTD_WINDOW_LOG_MAX:
            raise AssertionError(f"{path}: window {window} over the limit")
        cpu, _ = _decompress_cpu(data)
        got["decompress"] += cpu
    return got


def report(rows: dict[str, dict], base: str, tcp_cpu_per_gib: float, load: tuple) -> None:
    gib = 1 << 30
    print(f"load average before {load[0][0]:.2f} {load[0][1]:.2f} {load[0][2]:.2f}, after "
          f"{load[1][0]:.2f} {load[1][1]:.2f} {load[1][2]:.2f}; {os.cpu_count()} CPUs; one thread\n")
    print("| configuration | NAR MiB | compressed MiB | share | vs level 3 | compress CPU s | per GiB of NAR "
          "| decompress CPU s | per GiB of NAR | loopback CPU-s saved per GiB of NAR |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        ref = rows[row.get("base", base)]
        share = row["out"] / row["nar"]
        versus = row["out"] / ref["out"] * ref["nar"] / row["nar"]
        saved = (ref["out"] / ref["nar"] - share) * tcp_cpu_per_gib
        print(f"| {name} | {row['nar'] / 2**20:,.1f} | {row['out'] / 2**20:,.1f} | {share:.3f} | {versus:.3f} "
              f"| {row['compress']:.2f} | {row['compress'] / row['nar'] * gib:.2f} | {row['decompress']:.2f} "
              f"| {row['decompress'] / row['nar'] * gib:.3f} | {saved:+.3f} |")


def tiny_paths(work: Path) -> tuple[str, list[str]]:
    """A store with one 24 MiB path whose second half repeats its first 12 MiB back (LDM's case)."""
    from cudapkgs.store.store import Store

    block = os.urandom(4 << 20) + b"".join(f"line {i}\n".encode() for i in range(800_000))

    def tree(out: Path) -> None:
        out.mkdir()
        (out / "a").write_bytes(block + block)

    with Store.open(work / "store") as store:
        path = store.add_path("tiny-levels", tree)
    return str(work / "store"), [path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", help="the store holding the closure")
    parser.add_argument("--top", action="append", help="a store path whose closure is measured (repeatable)")
    parser.add_argument("--levels", default="3,9", help="framed levels over the whole closure (default 3,9)")
    parser.add_argument("--ldm-levels", default="3", help="one-frame long-window LDM levels over the whole closure ('' for none)")
    parser.add_argument("--sample-levels", default="", help="framed levels over every --sample-th frame only (e.g. 19)")
    parser.add_argument("--sample", type=int, default=8, help="with --sample-levels: every Nth frame (default 8)")
    parser.add_argument("--tcp-cpu-per-gib", type=float, default=0.54,
                        help="loopback TCP's CPU-s per GiB of body over a page-cache read (default 0.54, the fifteenth session's)")
    parser.add_argument("--tiny", action="store_true", help="a synthetic path: the CI smoke test")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x]
    ldm = [int(x) for x in args.ldm_levels.split(",") if x]
    sampled = [int(x) for x in args.sample_levels.split(",") if x]
    if 3 not in levels:
        levels.insert(0, 3)
    work = None
    if args.tiny:
        work = Path(tempfile.mkdtemp(prefix="bench-levels-"))
        _, paths = tiny_paths(work)
    else:
        if not args.store or not args.top:
            parser.error("--store and --top are needed (or --tiny)")
        from cudapkgs.store.store import Store

        store_dir = Path(args.store).resolve()
        with Store.open(store_dir, read_only=True) as store:
            tops = [str(store_dir / os.path.basename(t.rstrip("/"))) for t in args.top]
            paths = sorted(store.closure(tops))
    load_before = os.getloadavg()
    rows: dict[str, dict] = {}
    try:
        for level in levels:
            rows[f"level {level}, 8 MiB frames"] = framed(paths, level)
            print(f"level {level}: done, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
        for level in ldm:
            rows[f"level {level}, one frame, LDM, window 2^27"] = long_window(paths, level)
            print(f"LDM level {level}: done, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
        if sampled:
            sample_base = f"level 3, 8 MiB frames, every {args.sample}th frame"
            rows[sample_base] = framed(paths, 3, args.sample)
            for level in sampled:
                rows[f"level {level}, 8 MiB frames, every {args.sample}th frame"] = {**framed(paths, level, args.sample),
                                                                                   "base": sample_base}
                print(f"sampled level {level}: done, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
            rows[sample_base]["base"] = sample_base
    finally:
        if work is not None:
            for root, dirs, _ in os.walk(work):
                for d in dirs:
                    os.chmod(os.path.join(root, d), 0o755)
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    print(f"closure: {len(paths)} store paths\n")
    report(rows, "level 3, 8 MiB frames", args.tcp_cpu_per_gib, (load_before, os.getloadavg()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
