"""Uploading a closure to a team cache: `cudapkgs copy --to file://` against `nix copy --to file://` (issue 34, item 2).

Run:  python bench/bench_copy_to.py --store /tmp/speed/cstore -r 5     (every valid path of that store)
      python bench/bench_copy_to.py --tiny                           (a synthetic ~8 MiB closure: CI)

Both sides write zstd (level 3: zstd's and Nix's default) NARs and signed narinfos of the same paths into
an empty cache directory (cudapkgs twice: with its default ``-j``, which compresses up to as many zstd frames
at once as there are CPUs usable unless they are busy, and with ``-j 1``, one frame at a time), each run a child process timed by wait4 (wall, user + system CPU), alternating
nix then cudapkgs, medians of ``-r``.  Nix reads the paths from a chroot store (``local?root=DIR``,
``NIX_STORE_DIR`` set to the cudapkgs store's directory, so the store paths are the same), filled once
beforehand from a cache cudapkgs wrote (``nix copy --from``, not timed; it also proves Nix reads that
cache).  The key is one ed25519 key, in the form both read.  Needs Nix (``apt-get install nix-bin``
gives 2.8); without it only the cudapkgs row is printed and the table says so.  Printed: medians,
min–max, the ratio to Nix, the compressed bytes each wrote, the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

from bench_cache import _ENV, timed, tiny_store  # noqa: E402

NIX = shutil.which("nix")
OURS = "cudapkgs copy --to file:// (zstd, signed)"
OURS_ONE = "cudapkgs copy --to file:// -j 1 (zstd, signed; frames compressed on one thread)"
THEIRS = "nix copy --to file://?compression=zstd (signed)"


def bench(store_dir: str, paths: list[str], work: Path, runs: int) -> dict:
    from cudapkgs.store.caches.signing import generate

    key = generate("bench-copy-to-1")
    key_file = work / "secret.key"
    key_file.write_text(str(key))
    os.chmod(key_file, 0o600)
    ours = lambda d: [sys.executable, "-m", "cudapkgs", "copy", "--to", f"file://{d}", "--sign-key", str(key_file),  # noqa: E731
                      "--store", store_dir, *paths]
    env = {**_ENV, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), _ENV.get("PYTHONPATH", "")])}
    nix_env = {**_ENV, "NIX_STORE_DIR": store_dir, "XDG_CACHE_HOME": str(work / "xdg"), "HOME": str(work)}
    commands = {}
    if NIX:
        first = work / "first-cache"
        subprocess.run(ours(first), env=env, check=True, capture_output=True)
        subprocess.run([NIX, "copy", "--extra-experimental-features", "nix-command", "--from", f"file://{first}",
                        "--to", f"local?root={work}/root", "--option", "trusted-public-keys", str(key.public),
                        "--option", "substituters", "", *paths], env=nix_env, check=True, capture_output=True)
        shutil.rmtree(first)
        commands[THEIRS] = (lambda d: [NIX, "copy", "--extra-experimental-features", "nix-command", "--from",
                                       f"local?root={work}/root", "--to", f"file://{d}?compression=zstd&secret-key={key_file}",
                                       "--option", "substituters", "", *paths], nix_env)
    commands[OURS_ONE] = (lambda d: [*ours(d)[:4], "-j", "1", *ours(d)[4:]], env)
    commands[OURS] = (ours, env)
    rows: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": [], "bytes": []} for name in commands}
    load_before = os.getloadavg()
    for i in range(runs):
        for name, (command, e) in commands.items():
            out = work / f"cache-{i}-{len(rows[name]['wall'])}-{'nix' if name == THEIRS else 'ours'}"
            wall, _, cpu = timed(command(out), e)
            narinfos = [f for f in os.listdir(out) if f.endswith(".narinfo")]
            if len(narinfos) != len(paths):
                raise SystemExit(f"{name} wrote {len(narinfos)} narinfos for {len(paths)} paths")
            rows[name]["wall"].append(wall)
            rows[name]["cpu"].append(cpu)
            rows[name]["bytes"].append(sum(f.stat().st_size for f in os.scandir(out / "nar")))
            shutil.rmtree(out)
    return {"rows": rows, "load": (load_before, os.getloadavg()), "paths": len(paths)}


def report(result: dict, nar_bytes: int, runs: int) -> None:
    before, after = result["load"]
    print(f"closure: {result['paths']} store paths, NAR {nar_bytes / 2**20:.1f} MiB; runs: {runs}; {os.cpu_count()} CPUs; "
          f"load average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}\n")
    rows = result["rows"]
    peer = THEIRS if THEIRS in rows else OURS
    wall = {k: statistics.median(v["wall"]) for k, v in rows.items()}
    cpu = {k: statistics.median(v["cpu"]) for k, v in rows.items()}
    print("| what | median wall s | min–max s | wall × nix | CPU s | CPU × nix | zstd MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {wall[name]:.2f} | {min(row['wall']):.2f}–{max(row['wall']):.2f} | {wall[name] / wall[peer]:.2f} "
              f"| {cpu[name]:.2f} | {cpu[name] / max(cpu[peer], 1e-9):.2f} | {statistics.median(row['bytes']) / 2**20:.1f} |")
    if THEIRS not in rows:
        print("\n(no Nix here: apt-get install nix-bin; the ratios are to cudapkgs itself)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--runs", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="a synthetic ~8 MiB closure, one run: the CI smoke test")
    parser.add_argument("--store", help="the cudapkgs store whose valid paths (all of them) are uploaded")
    args = parser.parse_args(argv)
    from cudapkgs.store.store import Store

    work = Path(tempfile.mkdtemp(prefix="bench-copy-to-"))
    try:
        if args.tiny:
            store_dir, _ = tiny_store(work)
        elif args.store:
            store_dir = os.path.abspath(args.store)
        else:
            parser.error("--store is needed (or --tiny)")
        with Store.open(store_dir) as store:
            paths = sorted(store.closure(store.all_paths()))
            nar_bytes = sum(store.query(p).nar_size for p in paths)
        runs = 1 if args.tiny else args.runs
        result = bench(store_dir, paths, work, runs)
    finally:
        for directory, _, _ in os.walk(work):
            os.chmod(directory, 0o755)
        shutil.rmtree(work)
    report(result, nar_bytes, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
