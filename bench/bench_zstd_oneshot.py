"""zstd's single-pass path against the streaming one, on the NARs `copy --to` writes (issue 34, item 1).

Run:  python bench/bench_zstd_oneshot.py NAR.zst [NAR.zst ...] -r 5     (e.g. from a file:// cache's nar/)
      python bench/bench_zstd_oneshot.py --tiny                         (a synthetic NAR: the CI smoke test)

`copy --from` decompresses with python-zstandard's stream reader (512 KiB of compressed input at a time)
into one reused 512 KiB buffer (`nar_restore.HashingReader`). libzstd then decodes each block into its
own window buffer and copies it out (`ZSTD_decompressStream`'s zdss_flush stage). When the caller's input
holds a whole frame from its start and the output has room for the frame's declared content size,
`ZSTD_decompressStream` instead decodes the frame straight into the caller's buffer in one pass
(``check for single-pass mode opportunity`` in the zdss_loadHeader stage, facebook/zstd
lib/decompress/zstd_decompress.c@9d9f7680f8cfa8eebbe6152b75044a7c969a5b3e). `copy --to` writes frames of
`ZSTD_FRAME` (8 MiB) NAR bytes with their content size, so the "whole frames" way below can take that path
on every frame but a NAR's last: the compressed file is read in pieces cut at frame boundaries
(`WholeFrames`, frame and block headers from RFC 8878 §3.1.1) and decompressed into an 8 MiB buffer,
which is then hashed and written from.

Rows, each including the ones above it: zstd alone, + sha256 (the NarHash), + restore (the tree written
into a fresh directory next to ``--out``, deleted after each try, then ``sync``). Both ways alternate
(the first way of each try rotates), in this process; the NAR hashes of both ways must agree. Printed:
CPU and wall medians, whole frames / streaming ratios, the load average before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_nar_passes import _cpu, _remove  # noqa: E402  (the sibling bench: the same helpers)
from bench_nar_passes import tiny as _nar_passes_tiny  # noqa: E402

STAGES = ["zstd", "+ sha256", "+ restore"]
WAYS = ["streaming, 512 KiB (copy --from)", "whole frames, 8 MiB (single pass)"]
_MAGIC = 0xFD2FB528


def frame_end(buf: bytearray, pos: int, end: int) -> int | None:
    """The offset just past the zstd frame that starts at `pos` in `buf`, if it ends by `end`; None if it
    does not (more bytes needed), -1 if `buf[pos:]` is no frame this parser knows (not zstd, a reserved block).

    RFC 8878 §3.1.1: magic, frame header descriptor (content size flag, single segment, checksum, dictionary
    id flag), window descriptor unless single segment, dictionary id, content size; then blocks of a 3-byte
    header (last, type, size: raw and compressed blocks carry `size` bytes, RLE blocks one), then the 4-byte
    checksum if flagged. Skippable frames (§3.1.2) are magic, 4-byte size, data. A wrong cut only costs
    speed: the bytes are handed on in order whatever the cuts, and libzstd checks them.
    """
    if end - pos < 8:
        return None
    magic = int.from_bytes(buf[pos:pos + 4], "little")
    if magic & 0xFFFFFFF0 == 0x184D2A50:
        stop = pos + 8 + int.from_bytes(buf[pos + 4:pos + 8], "little")
        return stop if stop <= end else None
    if magic != _MAGIC:
        return -1
    fhd = buf[pos + 4]
    single = (fhd >> 5) & 1
    at = pos + 5 + (1 - single) + (0, 1, 2, 4)[fhd & 3] + (single, 2, 4, 8)[fhd >> 6]
    while True:
        if at + 3 > end:
            return None
        header = buf[at] | buf[at + 1] << 8 | buf[at + 2] << 16
        kind = (header >> 1) & 3
        if kind == 3:
            return -1
        at += 3 + (1 if kind == 1 else header >> 3)
        if header & 1:
            break
    at += 4 * ((fhd >> 2) & 1)
    return at if at <= end else None


class WholeFrames:
    """A readable over `raw` (which has `readinto`) whose every `read` gives whole zstd frames (views of one
    reused buffer), unless no whole frame fits: then what it has. Reads `step` bytes at a time."""

    def __init__(self, raw, step: int) -> None:
        self.raw, self.step = raw, step
        self.buf = bytearray(4 * step)
        self.view = memoryview(self.buf)
        self.start = self.end = 0
        self.eof = False

    def read(self, n: int = -1) -> memoryview:
        if len(self.buf) - self.end < self.step:  # the partial frame to the front (rarely: every third read)
            tail = self.end - self.start
            self.view[:tail] = self.view[self.start:self.end]
            self.start, self.end = 0, tail
        if not self.eof:
            got = self.raw.readinto(self.view[self.end:self.end + self.step])
            self.eof = not got
            self.end += got or 0
        first = cut = self.start
        while (stop := frame_end(self.buf, cut, self.end)) is not None:
            if stop < 0:
                cut = self.end
                break
            cut = stop
        if cut == first:
            cut = self.end
        self.start = cut
        return self.view[first:cut]

    def readable(self) -> bool:
        return True


def one(nar_zst: Path, way: str, stage: str, out: Path) -> str:
    """The NAR's sha256 (hex), read one `way` through `stage`."""
    import zstandard

    from cudapkgs.store.caches.compression import ZSTD_FRAME
    from cudapkgs.store.nar_restore import CHUNK, HashingReader, restore

    with open(nar_zst, "rb", buffering=0) as raw:
        if way == WAYS[0]:
            reader = zstandard.ZstdDecompressor().stream_reader(raw, read_size=1 << 19, read_across_frames=True)
            chunk = CHUNK
        else:
            reader = zstandard.ZstdDecompressor().stream_reader(WholeFrames(raw, ZSTD_FRAME + (1 << 16)),
                                                                read_size=ZSTD_FRAME, read_across_frames=True)
            chunk = ZSTD_FRAME
        hashing = HashingReader(reader, chunk)
        if stage == "+ restore":
            return restore(hashing, out).sha256.hexdigest()
        if stage == "zstd":
            view = memoryview(bytearray(chunk))
            while reader.readinto(view):
                pass
            return ""
        while hashing._next():
            pass
        return hashing.sha256.hexdigest()


def measure(files: list[Path], runs: int, work: Path) -> dict:
    results: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for f in files:
        for stage in STAGES:
            digests = set()
            for i in range(runs):
                for way in (WAYS if i % 2 == 0 else WAYS[::-1]):
                    out = work / "out"
                    _remove(out)
                    os.sync()
                    start, cpu = time.perf_counter(), _cpu()
                    digests.add(one(f, way, stage, out))
                    results.setdefault((f.name, stage, way), []).append((time.perf_counter() - start, _cpu() - cpu))
                    _remove(out)
            if len(digests) != 1:
                raise SystemExit(f"{f.name}: the two ways hash the NAR differently ({stage})")
    return results


def tiny(work: Path) -> Path:
    """A zstd NAR of ~20 MiB (three frames: random and text files) written the way `copy --to` writes NARs."""
    return _nar_passes_tiny(work, lib_mib=12, modules=300, lines=900, sized=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("nars", nargs="*", help=".nar.zst files written by copy --to (8 MiB frames with their sizes)")
    parser.add_argument("-r", "--runs", type=int, default=5)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", help="a directory to unpack in (default: a temporary one)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-zstd-oneshot-", dir=args.out))
    try:
        files = [Path(p) for p in args.nars] or ([tiny(work)] if args.tiny else [])
        if not files:
            parser.error("give .nar.zst files, or --tiny")
        load_before = os.getloadavg()
        results = measure(files, 2 if args.tiny else args.runs, work)
        load_after = os.getloadavg()
    finally:
        _remove(work)
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; medians of "
          f"{2 if args.tiny else args.runs} tries each, the two ways alternating\n")
    print("| NAR | stage | way | CPU s | wall s | CPU × streaming | wall × streaming |")
    print("|---|---|---|---:|---:|---:|---:|")
    for f in files:
        for stage in STAGES:
            base = [statistics.median(x[k] for x in results[(f.name, stage, WAYS[0])]) for k in (0, 1)]
            for way in WAYS:
                wall, cpu = (statistics.median(x[k] for x in results[(f.name, stage, way)]) for k in (0, 1))
                print(f"| {f.name[:16]} | {stage} | {way} | {cpu:.3f} | {wall:.3f} | {cpu / max(base[1], 1e-9):.2f} "
                      f"| {wall / max(base[0], 1e-9):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
