"""A timeline of one `cudapkgs build` of the five CUDA 13.0 wheels (bench_wheels.py's closure), in process.

Run:  python bench/timeline_wheels.py [--jobs auto] [--src OTHER_CHECKOUT/src]

The build runs in this process (`cudapkgs.cli.main`) into a fresh store, with the wheel cache
warm (as bench_wheels.py's timed rows: run that bench, or one `cudapkgs build`, once first).
Every builder, unpack, fix-up, NAR pass and registration call is stamped (start and end,
seconds from the process's start, the thread), and a sampler thread reads the process's CPU
time (/proc/self/stat: utime + stime, clock ticks) and the machine's (/proc/stat) every 20 ms.
Prints the stamped calls in start order and the cores this process used per 50 ms, with the
load average. The wrappers cost a few microseconds a call (a few hundred calls a build).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# --src DIR (another checkout's src/, to compare two versions): taken before anything of cudapkgs is imported.
_SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv[:-1] else str(REPO / "src")
sys.path.insert(0, _SRC)
sys.path.insert(0, str(REPO / "bench"))

T0 = time.perf_counter()
STAMPS: list[tuple[float, float, str, str]] = []  # (start, end, thread, what)
_lock = threading.Lock()


def _label(name: str, args: tuple, kwargs: dict) -> str:
    for a in args:
        drv_name = getattr(a, "name", None)
        if isinstance(drv_name, str) and hasattr(a, "drv_path"):
            return f"{name} {drv_name}"
    for a in args:
        if isinstance(a, (str, bytes, os.PathLike)):
            text = os.fsdecode(a)
            return f"{name} {text.rsplit('/', 2)[-2] if '/' in text else text}"[:90]
        if isinstance(a, list) and a and isinstance(a[0], (str, os.PathLike)):
            return f"{name} {[os.fsdecode(x).rsplit('/', 1)[-1] for x in a]}"[:90]
    return name


def stamp(owner: object, attr: str, name: str | None = None) -> None:
    """Wrap `owner.attr` so that each call is stamped."""
    original = getattr(owner, attr)
    shown = name or attr

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.perf_counter() - T0
        try:
            return original(*args, **kwargs)
        finally:
            end = time.perf_counter() - T0
            with _lock:
                STAMPS.append((start, end, threading.current_thread().name, _label(shown, args, kwargs)))

    setattr(owner, attr, wrapper)


def sampler(stop: threading.Event, samples: list[tuple[float, int, list[int]]]) -> None:
    while not stop.is_set():
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        samples.append((time.perf_counter() - T0, ticks, cpu))
        stop.wait(0.02)


def install_stamps() -> None:
    from cudapkgs.realise import redist, redist_source, realise, scheduler, unpack_ahead, nvcc
    from cudapkgs.store import nar, registration
    from cudapkgs.cli import build as cli_build

    stamp(cli_build, "evaluate", "evaluate")
    stamp(scheduler, "plan", "plan")
    stamp(cli_build, "_print_plan", "print plan")
    stamp(scheduler, "run", "scheduler.run")
    stamp(scheduler, "build_one", "build")
    stamp(redist_source, "prepare", "unpack ahead")
    stamp(redist, "_fetch_and_unpack", "unpack (in build)")
    stamp(unpack_ahead.UnpackAhead, "take", "take")
    stamp(redist, "_fixup", "fixup")
    stamp(redist.nvcc, "arrange", "nvcc.arrange")
    # The hooks package hands out its submodules' functions (`cudapkgs.hooks._Hooks`): stamped there.
    from importlib import import_module

    for module, name in [("no_fhs_references", "check_no_fhs_references"), ("split_outputs", "split_outputs"),
                         ("auto_patchelf", "auto_patchelf"), ("outputs_not_empty", "check_outputs_not_empty"),
                         ("pkgconfig", "rewrite_pkgconfig"), ("lift_versioned_lib_dir", "lift_versioned_lib_dir"),
                         ("mark_for_cudatoolkit_root", "mark_for_cudatoolkit_root")]:
        stamp(import_module(f"cudapkgs.hooks.{module}"), name)
    from cudapkgs import confine

    stamp(confine, "check_tree_links")
    stamp(nar, "hash_and_scan_named", "NAR pass")
    stamp(registration, "_hash_and_scan_all", "NAR passes (outputs)")
    stamp(registration.Registration, "add_outputs", "add_outputs")
    stamp(registration.Registration, "_install", "_install")
    from cudapkgs.store import db

    stamp(db.StoreDB, "register_many", "register")
    from cudapkgs.store import files, gc, reuse

    stamp(registration, "_remove_tree", "remove tree")
    from cudapkgs.store import workdirs

    stamp(workdirs, "_remove_tree", "remove work dir")
    stamp(registration, "_freeze", "freeze")
    stamp(reuse, "remember", "reuse.remember")
    stamp(gc.GarbageCollector, "add_temp_roots", "add_temp_roots")
    stamp(redist, "_remove", "remove stage")
    from cudapkgs.fetch import record_checked

    stamp(record_checked, "settled_identity", "settled_identity (waits while the wheel's last change is recent)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", default="auto")
    parser.add_argument("--bucket", type=float, default=0.05)
    parser.add_argument("--src", default=_SRC, help="the src/ directory of the cudapkgs to run (default: this checkout's)")
    args = parser.parse_args(argv)
    from bench_wheels import ATTRS, SETS  # (it puts this checkout's src/ first on sys.path)
    from scratch import scratch_dir

    sys.path.insert(0, args.src)

    install_stamps()
    from cudapkgs.cli import main as cli_main

    command = ["build", "--no-link", "-j", args.jobs]
    for s in SETS:
        command += ["--set", s]
    command += ATTRS
    with scratch_dir("wheels4-timeline-") as scratch:
        os.environ["CUDAPKGS_STORE"] = os.path.join(scratch, "store")
        load = os.getloadavg()
        samples: list[tuple[float, int, list[int]]] = []
        stop = threading.Event()
        thread = threading.Thread(target=sampler, args=(stop, samples), daemon=True)
        global T0
        T0 = time.perf_counter()
        cpu0 = os.times()
        thread.start()
        code = cli_main(command)
        wall = time.perf_counter() - T0
        cpu1 = os.times()
        stop.set()
        thread.join()
    import cudapkgs

    print(f"cudapkgs from {os.path.dirname(os.path.dirname(cudapkgs.__file__))}")
    print(f"exit {code}; wall {wall:.3f} s, CPU {cpu1.user - cpu0.user + cpu1.system - cpu0.system:.3f} s; "
          f"load before {load[0]:.2f} {load[1]:.2f}, after {os.getloadavg()[0]:.2f}")
    for start, end, thread_name, what in sorted(STAMPS):
        print(f"{start:6.3f}–{end:6.3f} ({end - start:5.3f}) {thread_name[-22:]:>22}  {what}")
    tick = os.sysconf("SC_CLK_TCK")
    print(f"\ncores used by this process per {args.bucket * 1000:.0f} ms (machine's busy cores):")
    line = []
    i = 0
    edge = args.bucket
    base_t, base_ticks, base_cpu = samples[0]
    for t, ticks, cpu in samples[1:]:
        if t >= edge:
            dt = t - base_t
            busy = (sum(cpu) - cpu[3] - cpu[4]) - (sum(base_cpu) - base_cpu[3] - base_cpu[4])
            line.append(f"{edge - args.bucket:4.2f}:{(ticks - base_ticks) / tick / dt:3.1f}({busy / tick / dt:3.1f})")
            base_t, base_ticks, base_cpu = t, ticks, cpu
            edge += args.bucket
            i += 1
    for k in range(0, len(line), 8):
        print("  ".join(line[k:k + 8]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
