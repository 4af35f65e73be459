"""The passes a substitution makes over one NAR, each measured alone (CPU s, in process, medians of ``-r``).

Run:  python bench/bench_nar_passes.py NAR.zst [NAR.zst ...] -r 3 [--scan-paths closure.txt --store-dir DIR]
      python bench/bench_nar_passes.py --tiny                         (a synthetic NAR: the CI smoke test)

Each row includes the ones above it: reading the compressed file (512 KiB reads), + zstd decompression
(python-zstandard's stream reader, as `copy --from` reads), + sha256 of the NAR (the NarHash), + the
restore (parse, create, write, chmod, utime: what a signed substitution does), + the reference scan of
the restore (what it did before issue 34; candidates: the hash parts of the store paths in
``--scan-paths``, one per line). Outputs go to a fresh directory next to ``--out`` (default: a
temporary directory), deleted after each try. Printed: the medians, every try, the load average.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

STAGES = ["read", "+ zstd", "+ sha256", "+ restore", "+ scan"]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _remove(path: Path) -> None:
    if os.path.lexists(path):
        for dirpath, _, _ in os.walk(path):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(path)


def one(nar_zst: Path, stage: str, out: Path, candidates: dict[str, str], store_dir: str) -> None:
    from cudapkgs.store import nar
    from cudapkgs.store.caches.compression import decompressed_reader
    from cudapkgs.store.nar_restore import restore

    with open(nar_zst, "rb", buffering=0) as raw:
        if stage == "read":
            while raw.read(1 << 19):
                pass
            return
        reader = decompressed_reader(raw, "zstd")
        if stage in ("+ zstd", "+ sha256"):
            digest = hashlib.sha256()
            while data := reader.read(1 << 19):
                if stage == "+ sha256":
                    digest.update(data)
            return
        scanner = nar.ReferenceScanner(nar.Candidates(candidates), store_dir) if stage == "+ scan" else None
        restore(reader, out, scanner=scanner)


def measure(files: list[Path], runs: int, work: Path, candidates: dict[str, str], store_dir: str) -> dict:
    results: dict[tuple[str, str], list[float]] = {}
    for f in files:
        for stage in STAGES:
            for _ in range(runs):
                out = work / "out"
                _remove(out)
                start = _cpu()
                one(f, stage, out, candidates, store_dir)
                results.setdefault((f.name, stage), []).append(_cpu() - start)
                _remove(out)
    return results


def tiny(work: Path, *, lib_mib: int = 3, modules: int = 200, lines: int = 40, sized: bool = False) -> Path:
    """A zstd NAR of a small tree (a random `lib_mib` MiB library and `modules` text files of `lines`
    lines) written the way `copy --to` writes NARs (with `sized`, in frames whose sizes are in their headers)."""
    from cudapkgs.store import nar
    from cudapkgs.store.caches.compression import compress_stream

    tree = work / "tree"
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "libx.so").write_bytes(os.urandom(lib_mib << 20))
    for i in range(modules):
        (tree / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * lines)
    path = work / "tiny.nar.zst"
    total = sum(len(c) for c in nar.dump(tree)) if sized else None
    with open(path, "wb") as f:
        compress_stream(nar.dump(tree), f, "zstd", total=total)
    _remove(tree)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("nars", nargs="*", help=".nar.zst files (e.g. from a file:// cache's nar/)")
    parser.add_argument("-r", "--runs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--scan-paths", help="a file of store paths whose hash parts the scan looks for")
    parser.add_argument("--store-dir", default="/nix/store", help="the store directory the scan looks for")
    parser.add_argument("--out", help="a directory to unpack in (default: a temporary one)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-nar-passes-", dir=args.out))
    try:
        files = [Path(p) for p in args.nars] or ([tiny(work)] if args.tiny else [])
        if not files:
            parser.error("give .nar.zst files, or --tiny")
        from cudapkgs.store.paths import hash_part

        paths = Path(args.scan_paths).read_text().split() if args.scan_paths else []
        candidates = {hash_part(p): p for p in paths} or {"0" * 32: f"{args.store_dir}/{'0' * 32}-none"}
        load_before = os.getloadavg()
        results = measure(files, 1 if args.tiny else args.runs, work, candidates, args.store_dir)
        load_after = os.getloadavg()
    finally:
        _remove(work)
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; CPU s (user + system), medians\n")
    print("| NAR | " + " | ".join(STAGES) + " |")
    print("|---|" + "---:|" * len(STAGES))
    for f in files:
        cells = [f"{statistics.median(results[(f.name, s)]):.3f}" for s in STAGES]
        print(f"| {f.name[:16]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
