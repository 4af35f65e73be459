"""The cc wrapper's cost: compiling saxpy.cu with nvcc through stdenv.cc's wrapper vs the bare compiler.

Run:  python bench/bench_cc_wrapper.py --store /tmp/i9exp/store [--runs 7]
      python bench/bench_cc_wrapper.py --tiny      (gcc on a C file, 3 runs: the CI smoke test)

Full mode needs cudaPackages_13_0's cuda_nvcc, cuda_cudart and cuda_cccl realised in STORE
(e.g. with fetchers = ["wheels"]); it builds stdenv.cc (the wrapper) there.  Both rows run
the same nvcc command (`nvcc -O2 -gencode arch=compute_90,code=sm_90 -cudart shared -o
saxpy saxpy.cu`) in the same environment (cudapkgs shell's, for nvcc, cudart and cccl); the
only difference is NVCC_CCBIN: the bare host g++ (the peer) or stdenv.cc's wrapped g++,
which adds the run paths.  Runs alternate, so drift hits both rows alike.  The issue's
budget: at most 5% over the peer.  Tiny mode times `gcc -O2 x.c -lm` bare vs wrapped.
Both modes then time the wrapper's own reading of a CMake-style link through response files
(`response_file_table`: 5000 objects, 500 in tiny mode) against the stand-in compiler alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from scratch import scratch_dir  # bench/scratch.py

SAXPY = REPO / "src" / "cudapkgs" / "pkgs" / "saxpy" / "saxpy.cu"


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def table(label_peer: str, label_wrapped: str, peer: list[float], wrapped: list[float], what: str, *,
          budget: bool = True) -> None:
    p, w = statistics.median(peer), statistics.median(wrapped)
    print(f"{what}, median of {len(peer)} alternating runs ({os.cpu_count()} CPUs)\n")
    print("| compiler | median ms | × peer |")
    print("| --- | ---: | ---: |")
    print(f"| {label_peer} (peer) | {p * 1000:.1f} | 1.00× |")
    print(f"| {label_wrapped} | {w * 1000:.1f} | {w / p:.3f}× |")
    if budget:
        print(f"\noverhead: {100 * (w / p - 1):+.2f}% (budget: +5%)")
    else:
        print(f"\nthe wrapper's own time: {(w - p) * 1000:.1f} ms")


def response_file_table(work: str, wrapper_script: str, store_dir: str, lib_dir: str, objects: int, runs: int) -> None:
    """The wrapper's own cost on a CMake-style link through response files (issue 22): the wrapper
    around a stand-in compiler (/bin/true, so only the wrapper's reading is timed) against the
    stand-in alone, on `cc main.o -o t @objects.rsp @linkLibs.rsp` with `objects` object paths
    (one in every 500 quoted, with a space in it) and `-L<store lib> -lcudart`-style libraries."""
    rsp = Path(work, "objects.rsp")
    rsp.write_text(" ".join((f'"{work}/build dir/o{i}.o"' if i % 500 == 0 else f"{work}/CMakeFiles/t.dir/src/o{i}.o")
                            for i in range(objects)) + "\n")
    Path(work, "linkLibs.rsp").write_text(f"-L{lib_dir} -lstandin -lm\n")
    Path(lib_dir, "libstandin.so").touch()
    wrapper = Path(work, "wrapper-true")
    wrapper.write_text(wrapper_script)
    wrapper.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "NIX_STORE": store_dir}
    args = ["main.o", "-o", "t", f"@{rsp}", f"@{work}/linkLibs.rsp"]
    bare, wrapped = [], []
    for i in range(runs):
        pair = [(bare, ["/bin/true", *args]), (wrapped, [str(wrapper), *args])]
        for times, cmd in (pair if i % 2 else pair[::-1]):
            times.append(timed(cmd, env, work))
    print()
    table("`/bin/true` (the stand-in compiler)", "the wrapper around it", bare, wrapped,
          f"a link through @objects.rsp ({objects} objects) and @linkLibs.rsp", budget=False)
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--store", help="a store with cudaPackages_13_0's nvcc, cudart and cccl realised")
    parser.add_argument("--tiny", action="store_true", help="gcc on a C file, 3 runs (the CI smoke test)")
    args = parser.parse_args()
    with scratch_dir("bench-cc-wrapper-") as work:
        run(args, parser, work)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, work: str) -> None:
    """Time bare vs wrapped compiles in the scratch directory WORK and print the table."""
    import cudapkgs
    from cudapkgs.hooks.cc_wrapper import wrapper_script
    from cudapkgs.realise.realise import realise
    from cudapkgs.shell import shell_environment
    from cudapkgs.store.store import Store

    if args.tiny:
        store_dir = os.path.join(work, "store")
        pkgs = cudapkgs.import_pkgs(config={"storeDir": store_dir})
        cc = pkgs.stdenv.cc
        with Store.open(store_dir) as store:
            realise(store, [cc.derivation])
        Path(work, "x.c").write_text("#include <math.h>\nint main(void){return (int)sqrt(4.0) - 2;}\n")
        env = shell_environment([cc.out], base={"PATH": "/usr/bin:/bin", "HOME": work}, store_dir=store_dir)
        real = cc.hostCompiler["cc"]
        bare, wrapped = [], []
        for _ in range(3):
            bare.append(timed([real, "-O2", "x.c", "-lm", "-o", "x"], env, work))
            wrapped.append(timed([f"{cc.out}/bin/gcc", "-O2", "x.c", "-lm", "-o", "x"], env, work))
        table(f"`{real}`", "stdenv.cc's `gcc` wrapper", bare, wrapped, "gcc -O2 x.c -lm")
        lib = Path(work, "store", "0" * 32 + "-standin", "lib")
        lib.mkdir(parents=True)
        response_file_table(work, wrapper_script("/bin/true", "stand-in"), store_dir, os.fspath(lib), 500, 3)
        return

    if not args.store:
        parser.error("give --store (a store with cudaPackages_13_0's nvcc, cudart, cccl realised) or --tiny")
    pkgs = cudapkgs.import_pkgs(config={"storeDir": args.store, "allowUnfree": True, "fetchers": ["wheels"],
                                        "cudaSupport": True, "cudaCapabilities": ["9.0"]})
    cuda = pkgs.cudaPackages_13_0
    cc = pkgs.saxpy.override(cudaPackages=cuda).stdenvCc  # the compiler nvcc was set up with
    with Store.open(args.store) as store:
        realise(store, [cc.derivation] + [cuda[n].derivation for n in ("cuda_nvcc", "cuda_cudart", "cuda_cccl")])
    paths = [cc.out] + [cuda[n][o] for n in ("cuda_nvcc", "cuda_cudart", "cuda_cccl") for o in cuda[n].outputs]
    env = shell_environment(paths, base={"PATH": "/usr/bin:/bin", "HOME": work}, store_dir=args.store)
    bare_env = {**env, "NVCC_CCBIN": cc.hostCompiler["cxx"]}
    cmd = ["nvcc", "-O2", "-gencode", "arch=compute_90,code=sm_90", "-cudart", "shared", "-o", "saxpy", str(SAXPY)]
    timed(cmd, env, work)  # warm the page cache
    bare, wrapped = [], []
    for i in range(args.runs):  # alternating, and which goes first alternates too
        if i % 2:
            wrapped.append(timed(cmd, env, work))
            bare.append(timed(cmd, bare_env, work))
        else:
            bare.append(timed(cmd, bare_env, work))
            wrapped.append(timed(cmd, env, work))
    table(f"nvcc, NVCC_CCBIN=`{cc.hostCompiler['cxx']}`", "nvcc, NVCC_CCBIN=stdenv.cc's `g++` wrapper", bare, wrapped,
          "nvcc -O2 -gencode arch=compute_90,code=sm_90 -cudart shared saxpy.cu")
    # A bound less exposed to noise: the wrapper's own cost per compiler call, times the calls nvcc makes.
    dry = subprocess.run([*cmd, "-dryrun"], env=env, cwd=work, capture_output=True, text=True).stderr
    calls = sum(1 for line in dry.splitlines() if f'"{cc.out}/bin"/' in line)  # how -dryrun prints them
    probe = [cc.hostCompiler["cxx"], "-E", "-x", "c++", os.devnull]
    per_bare = statistics.median(timed(probe, env, work) for _ in range(41))
    per_wrapped = statistics.median(timed([f"{cc.out}/bin/g++", *probe[1:]], env, work) for _ in range(41))
    extra = max(per_wrapped - per_bare, 0.0) * calls
    print(f"\nper host-compiler call (g++ -E of an empty file, median of 41): bare {per_bare * 1000:.2f} ms, "
          f"wrapped {per_wrapped * 1000:.2f} ms; nvcc makes {calls} such calls for saxpy.cu, so the wrapper adds "
          f"about {extra * 1000:.1f} ms = {100 * extra / statistics.median(bare):.2f}% of the bare compile")
    lib = Path(work, "0" * 32 + "-standin", "lib")
    lib.mkdir(parents=True)
    response_file_table(work, wrapper_script("/bin/true", "stand-in"), work, os.fspath(lib), 5000, args.runs)


if __name__ == "__main__":
    main()
