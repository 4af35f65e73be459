"""On a second machine: is `auto`'s choice of direct writes right there? (stdlib and this checkout's src/ only)

Prints the machine's balloon files (the virtio balloon driver's devices and their ``features``, the
``page_reporting`` module's parameters), what `cudapkgs.host.page_reporting` answers and so what
``CUDAPKGS_DIRECT_WRITES=auto`` does for big store files there, then times writing `--gib` GiB with
`DirectWriter` (O_DIRECT) and buffered (``os.write`` of the same 8 MiB chunks), alternating, `--rounds`
each, the file deleted after each: wall, user and system seconds of this process, and the ``fsync``
after the buffered write on its own line (a direct write has the bytes on the disk when it returns).
Prints the load average before and after.

    python3 bench/device/balloon_writes.py --dir /tmp --gib 2 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))

from cudapkgs.host import page_reporting  # noqa: E402
from cudapkgs.store import direct_writes  # noqa: E402

CHUNK = 8 << 20


def show_balloon(root: str = "/sys") -> None:
    driver = os.path.join(root, "bus/virtio/drivers/virtio_balloon")
    try:
        names = sorted(os.listdir(driver))
    except OSError as error:
        print(f"{driver}: {error.strerror}")
        names = []
    for name in names:
        if name.startswith("virtio"):
            path = os.path.join(driver, name, "features")
            try:
                with open(path) as f:
                    text = f.read(4096).strip()
                print(f"{path}: {text} (bit 5: {text[5] if len(text) > 5 else '?'})")
            except OSError as error:
                print(f"{path}: {error.strerror}")
    params = os.path.join(root, "module/page_reporting/parameters")
    try:
        for name in sorted(os.listdir(params)):
            with open(os.path.join(params, name)) as f:
                print(f"{params}/{name}: {f.read(64).strip()}")
    except OSError as error:
        print(f"{params}: {error.strerror}")


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def one(path: str, size: int, direct: bool, chunk: bytes) -> tuple[float, float, float, float]:
    """Write `size` bytes to a new file at `path`: (wall s, user s, system s, fsync wall s after)."""
    u0, s0 = cpu()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if direct:
            with direct_writes.DirectWriter(fd, size) as writer:
                for _ in range(size // len(chunk)):
                    writer.write(chunk)
                writer.finish()
        else:
            for _ in range(size // len(chunk)):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        t1 = time.perf_counter()
        u1, s1 = cpu()
        os.fsync(fd)
        t2 = time.perf_counter()
    finally:
        os.close(fd)
        os.unlink(path)
    return t1 - t0, u1 - u0, s1 - s0, t2 - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print("load before:", open("/proc/loadavg").read().strip(), "| kernel", os.uname().release, "| CPUs", os.cpu_count())
    show_balloon()
    answer = page_reporting.free_page_reporting()
    size = int(args.gib * (1 << 30)) // CHUNK * CHUNK
    os.environ.pop("CUDAPKGS_DIRECT_WRITES", None)
    print(f"free page reporting: {answer}; auto writes a {size >> 20} MiB file in {args.dir} "
          f"{'directly' if direct_writes.direct_writes_wanted(args.dir, size) else 'buffered'}")
    os.environ["CUDAPKGS_DIRECT_WRITES"] = "on"
    if not direct_writes.direct_writes_wanted(args.dir, size):
        print(f"{args.dir}: its file system refuses O_DIRECT; nothing timed")
        return
    chunk = os.urandom(1 << 20) * (CHUNK >> 20)
    path = os.path.join(args.dir, f"balloon-writes-{os.getpid()}")
    for r in range(args.rounds):
        for direct in ((True, False) if r % 2 == 0 else (False, True)):
            wall, user, system, sync = one(path, size, direct, chunk)
            gib = size / (1 << 30)
            print(f"round {r + 1} {'O_DIRECT' if direct else 'buffered'}: {wall:.2f} s wall, {user:.2f} user-s, "
                  f"{system:.2f} system-s ({system / gib:.2f} system-s/GiB); fsync after {sync:.2f} s")
    print("load after:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
