"""`cudapkgs verify` (contents checked) against `nix-store --verify --check-contents` on stores of the same shape.

    python bench/bench_verify.py                 # 5,000 paths, 7 interleaved rounds
    python bench/bench_verify.py -n 1000 -r 11
    python bench/bench_verify.py --padding base32   # padding of random base-32 (long runs to look into)
    python bench/bench_verify.py --tiny          # 100 paths, 2 rounds: the CI smoke test

Setup (not timed): two stores of N paths each, built alike from one seed: a cudapkgs store
in a temporary directory, and a Nix chroot store (``--store DIR``, logical ``/nix/store``)
whose paths are written under ``DIR/nix/store`` and registered with ``nix-store --load-db``
(NAR hash, size, references).  Path i is a directory
holding one file that names up to three earlier paths (its references) and 64-511 more
bytes, as bench/bench_store.py builds them: ``x`` repeated, or with ``--padding base32``
random Nix base-32 characters (then every window of a long run must be looked into).

Each round runs both whole processes, the order swapped every round: ``nix-store --store DIR
--verify --check-contents`` (the NAR hash of every path) and ``cudapkgs verify`` (exists,
NAR hash, references valid, and every valid path the contents mention recorded: a reference
scan Nix's verify does not do).  Both must report no problem.  Wall is spawn to exit, CPU the
child's user + system time (getrusage).  Without nix-store on PATH only cudapkgs' row is printed.

Goal (issue 24): cudapkgs <= 1.5x nix-store, still checking references.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cudapkgs.store import nar  # noqa: E402
from cudapkgs.store.paths import make_store_path  # noqa: E402
from cudapkgs.store.store import Store  # noqa: E402


def _shape(n: int, seed: int, padding: str = "x") -> list[tuple[list[int], bytes]]:
    """Per path: the indices of its references and its padding bytes (64-511 of them).

    `padding` "x": one repeated character (a base-32 run a scan can see whole at once);
    "base32": random Nix base-32 characters (a long run whose every window must be looked at).
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        refs = sorted(set(rng.sample(range(i), min(3, i))) | ({i - 1} if i else set()))
        size = rng.randrange(64, 512)
        pad = b"x" * size if padding == "x" else bytes(rng.choice(b"0123456789abcdfghijklmnpqrsvwxyz") for _ in range(size))
        out.append((refs, pad))
    return out


def _write(real_root: str, store_dir: str, shape: list[tuple[list[int], bytes]]) -> list[tuple[str, str, int, set[str]]]:
    """Write the paths (logical names under `store_dir`, files under `real_root` + name)."""
    paths = [make_store_path(store_dir, "output:out", f"verify-{i}", f"pkg-{i}") for i in range(len(shape))]
    rows = []
    for path, (refs, pad) in zip(paths, shape):
        real = real_root + path
        os.mkdir(real)
        names = {paths[j] for j in refs}
        with open(os.path.join(real, "data"), "wb") as f:
            f.write(("\n".join(sorted(names)) + "\n").encode() + pad)
        digest, size = nar.nar_hash(real)
        rows.append((path, nar.format_hash(digest), size, names))
    return rows


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    cpu = _cpu_children()
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0 or "error" in done.stderr.lower():
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall * 1000, (_cpu_children() - cpu) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5000, help="paths per store (default 5,000)")
    parser.add_argument("-r", "--runs", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--padding", choices=("x", "base32"), default="x",
                        help="each file's padding: one repeated character (default) or random Nix base-32")
    parser.add_argument("--tiny", action="store_true", help="100 paths, 2 rounds: the CI smoke test")
    args = parser.parse_args(argv)
    n, rounds = (100, 2) if args.tiny else (args.n, args.runs)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    shape = _shape(n, 24, args.padding)
    nix_store = shutil.which("nix-store")
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        root = Path(tmp)
        store = Store.open(root / "store")
        rows = _write("", store.store_dir, shape)
        store.db.register_many([(p, h, s, refs, None) for p, h, s, refs in rows])
        store.close()
        commands = {"cudapkgs verify": [sys.executable, "-m", "cudapkgs", "verify", "--store", str(root / "store")]}
        if nix_store is not None:
            nix_root = root / "nix"
            (nix_root / "nix" / "store").mkdir(parents=True)
            subprocess.run([nix_store, "--store", str(nix_root), "--init"], check=True, capture_output=True)
            nix_rows = _write(str(nix_root), "/nix/store", shape)
            text = "".join(f"{p}\n{h}\n{s}\n\n{len(refs)}\n" + "".join(f"{r}\n" for r in sorted(refs))
                           for p, h, s, refs in nix_rows)
            registered = subprocess.run([nix_store, "--store", str(nix_root), "--load-db"],
                           input=text, text=True, check=False, capture_output=True)
            if registered.returncode != 0:
                raise SystemExit(f"nix-store --load-db failed: {registered.stderr.strip()[-2000:]}")
            commands["nix-store --verify --check-contents"] = [nix_store, "--store", str(nix_root), "--verify",
                                                               "--check-contents"]
        for cmd in commands.values():  # warm-up: bytecode, page cache
            _run(cmd, env)
        got: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
        order = list(commands)
        for round_ in range(rounds):
            for label in order if round_ % 2 == 0 else order[::-1]:
                got[label].append(_run(commands[label], env))
    load = os.getloadavg()
    print(f"verify with contents, {n} paths, {args.padding} padding, {rounds} interleaved rounds, {os.cpu_count()} CPUs, "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, Python {sys.version.split()[0]}")
    print()
    print("| command | wall ms (median) | min | max | CPU ms (median) | wall × nix-store | CPU × nix-store | goal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    peer = "nix-store --verify --check-contents"
    for label, samples in got.items():
        wall = statistics.median(w for w, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        walls = [w for w, _ in samples]
        if peer in got:
            pw = statistics.median(w for w, _ in got[peer])
            pc = statistics.median(c for _, c in got[peer])
            wr, cr = wall / pw, cpu / max(pc, 0.1)
            ratios = f"{wr:.2f}× | {cr:.2f}×"
            goal = "peer" if label == peer else f"≤ 1.5×: wall {'met' if wr <= 1.5 else 'NOT met'}, CPU {'met' if cr <= 1.5 else 'NOT met'}"
        else:
            ratios, goal = " | ", "no nix-store here"
        print(f"| {label} | {wall:.1f} | {min(walls):.1f} | {max(walls):.1f} | {cpu:.1f} | {ratios} | {goal} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
