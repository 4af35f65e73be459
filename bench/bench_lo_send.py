"""How a server's send path meets loopback's segment size: ``sendfile`` against ``send`` from a buffer (issue 34, item 1).

Run:  unshare -n sh -c 'ip link set lo up && python bench/bench_lo_send.py --store /tmp/floor7-ml/store -r 5'
      unshare -n sh -c 'python bench/big_tcp_lo.py --set 524280 && python bench/bench_lo_send.py --store … -r 5'
      python bench/bench_lo_send.py --tiny                      (a 64 MiB file: the CI smoke test)

One file (the largest under ``--store``, read once first so it is in the page cache) goes from a server
thread to a client thread of this process over one TCP connection on 127.0.0.1, the client ``recv_into``
one 512 KiB buffer, in each of these ways, alternating (the order reversed every other run), medians:

* ``sendfile``: ``os.sendfile`` 8 MiB per call (what `cudapkgs serve` does: asyncio's ``loop.sendfile``);
* ``send``: the file ``readinto`` an 8 MiB buffer and ``sendall`` from it (two copies on the server: page
  cache to buffer, buffer to the socket's pages).

Printed per way: wall seconds; CPU seconds of this process (both ends: the server's and the client's
system calls and the softirqs they run, per GiB of file); the packets ``lo`` carried per MiB (/proc/net/dev
of this network namespace; run it under ``unshare -n`` so they are only its own); and from the server
socket's TCP_INFO the data segments it sent (tcpi_data_segs_out: MSS-sized units of its skbs, or an skb
each where skbs are smaller than one MSS; their mean size) and the segments it got (ACKs), per MiB;
`lo`'s GSO/GRO sizes (bench/big_tcp_lo.py) and the load average before and after.

Why it matters: an skb built by ``sendfile`` (splice) holds at most ``net.core.max_skb_frags`` page
fragments of 4 KiB (17 here: 68 KiB), so a bigger GSO size on ``lo`` (BIG TCP) cannot make its packets
bigger; ``send`` copies into the socket's own 32 KiB page fragments, 17 of which hold 544 KiB.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

SLICE = 8 << 20
READ = 512 << 10


def lo_packets() -> int:
    """Packets `lo` has received in this network namespace (/proc/net/dev)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[1])
    return 0


def tcp_info(sock: socket.socket) -> tuple[int, int]:
    """(data segments sent, segments received) of `sock`: struct tcp_info's tcpi_data_segs_out (offset 156)
    and tcpi_segs_in (offset 140), include/uapi/linux/tcp.h (Linux 4.6+)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(info) < 160:
        return 0, 0
    (segs_in,) = struct.unpack_from("=I", info, 140)
    (data_out,) = struct.unpack_from("=I", info, 156)
    return data_out, segs_in


def once(path: str, mode: str) -> dict:
    size = os.path.getsize(path)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    counts: dict[str, int] = {}

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, open(path, "rb", buffering=0) as f:
            if mode == "sendfile":
                offset = 0
                while offset < size:
                    sent = os.sendfile(conn.fileno(), f.fileno(), offset, SLICE)
                    if not sent:
                        break
                    offset += sent
            else:
                buffer = memoryview(bytearray(SLICE))
                while n := f.readinto(buffer):
                    conn.sendall(buffer[:n])
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(1):  # the client's close: every ACK counted before TCP_INFO is read
                pass
            counts["data"], counts["acks"] = tcp_info(conn)

    thread = threading.Thread(target=serve)
    thread.start()
    packets, cpu, start = lo_packets(), time.process_time(), time.perf_counter()
    client = socket.create_connection(listener.getsockname())
    buffer = memoryview(bytearray(READ))
    got = 0
    while n := client.recv_into(buffer):
        got += n
    client.close()
    thread.join()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    listener.close()
    if got != size:
        raise SystemExit(f"{mode}: {got} bytes of {size}")
    mib = size / 2**20
    return {"wall": wall, "cpu_per_gib": cpu / mib * 1024, "packets": (lo_packets() - packets) / mib,
            "data": counts.get("data", 0) / mib, "mean_kib": size / max(counts.get("data", 0), 1) / 1024,
            "acks": counts.get("acks", 0) / mib}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--runs", type=int, default=5)
    parser.add_argument("--store", help="the largest file under this directory is sent")
    parser.add_argument("--file", help="this file is sent")
    parser.add_argument("--tiny", action="store_true", help="a 64 MiB temporary file, three runs: the CI smoke test")
    args = parser.parse_args(argv)
    temp = None
    if args.tiny:
        temp = tempfile.NamedTemporaryFile(prefix="bench-lo-send-", delete=False)
        temp.write(os.urandom(64 << 20))
        temp.close()
        path, runs = temp.name, 3
    elif args.file or args.store:
        runs = args.runs
        path = args.file or max((os.path.join(d, f) for d, _, fs in os.walk(args.store) for f in fs
                                 if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))),
                                key=os.path.getsize)
    else:
        parser.error("--store or --file is needed (or --tiny)")
    try:
        with open(path, "rb", buffering=0) as f:  # into the page cache, untimed
            while f.read(SLICE):
                pass
        load_before = os.getloadavg()
        modes = ["sendfile", "send"]
        rows: dict[str, list[dict]] = {m: [] for m in modes}
        for i in range(runs):
            for mode in modes if i % 2 == 0 else modes[::-1]:
                rows[mode].append(once(path, mode))
        load_after = os.getloadavg()
    finally:
        if temp is not None:
            os.unlink(temp.name)
    try:
        from big_tcp_lo import sizes

        lo = " ".join(f"{k}={v}" for k, v in sorted(sizes().items()))
    except (OSError, ImportError, ValueError):
        lo = "(unknown)"
    print(f"file: {os.path.basename(path)}, {os.path.getsize(path) / 2**20 if temp is None else 64:.1f} MiB; runs: {runs}; "
          f"{os.cpu_count()} CPUs; load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(f"lo in this network namespace: {lo}\n")
    print("| server sends by | median wall s | both ends' CPU s per GiB (min–max) | lo packets per MiB "
          "| data segments per MiB | their mean KiB | ACKs per MiB |")
    # lo packets well under data segments: skbs of several MSS each (BIG TCP at work)
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        cpus = [r["cpu_per_gib"] for r in rs]
        print(f"| {mode} | {med['wall']:.3f} | {med['cpu_per_gib']:.3f} ({min(cpus):.3f}–{max(cpus):.3f}) "
              f"| {med['packets']:.1f} | {med['data']:.1f} | {med['mean_kib']:.1f} | {med['acks']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
