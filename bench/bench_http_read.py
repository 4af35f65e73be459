"""One NAR's body from `cudapkgs serve --compression zstd`: the client's read paths, in process (issue 34, item 1).

Run:  python bench/bench_http_read.py --store /tmp/http4-cstore -r 9     (the largest NAR of that store)
      python bench/bench_http_read.py --tiny                          (a synthetic 12 MiB path: CI)

A ``cudapkgs serve --compression zstd`` child serves the store (its kept NARs in a temporary
``--cache-dir``, warmed by asking for the narinfo first); this process then reads the largest path's
``.nar.zst`` in each of these ways, alternating (the order reversed every other run), medians of ``-r``:

* ``read``: the body read 512 KiB at a time as bytes objects (the client before the thirteenth session);
* ``readinto``: the body filled into one reused buffer (`Response.readinto`, what a substitution does now);
* ``raw``: the same GET on a plain socket, the body's bytes ``recv_into`` the same buffer (no urllib3, no
  http.client, no checks): the floor of any Python client over this TCP connection;
* ``file``: the same compressed file read from the serve's cache directory (what file:// costs);

each first alone, then with the zstd decompression and the sha256 of the NAR behind it (the part of a
substitution before the writes). Printed: wall and CPU seconds of this process, the server's CPU seconds
(from /proc), the ratios to ``read``, the two processes' CPU together per GiB of the body (what the
transfer costs the machine when client and server share it, as in bench_substitute_ml.py's HTTP row), the
packets through `lo` (both ways: data and ACKs) per MiB of body (/proc/net/dev of the bench's network
namespace: under ``unshare -n`` only its own; loopback's GSO size shows here, see bench/big_tcp_lo.py), `lo`'s GSO/GRO sizes, the load
average before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


class _ReadOnly:
    """A body with `read` only: the zstd reader then gets a bytes object per block (the old path)."""

    def __init__(self, body) -> None:
        self.body = body

    def read(self, n: int = -1) -> bytes:
        return self.body.read(n)


def _server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _lo_packets() -> int:
    """Packets `lo` has received in this network namespace so far (/proc/net/dev): each is one skb through the
    stack, a GSO packet of up to gso_max_size bytes (/proc/net/snmp's InSegs/OutSegs count MSS-sized
    segments instead, the same whatever the GSO size)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[1])
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _RawBody:
    """The body of `GET url` read straight from a plain socket (`readinto` = one ``recv_into``): the floor of a client."""

    def __init__(self, url: str, name: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self._sock = socket.create_connection((host, int(port)), timeout=30)
        self._sock.sendall(f"GET /{name} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: identity\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            piece = self._sock.recv(65536)
            if not piece:
                raise SystemExit("raw: the server closed before its headers ended")
            head += piece
        head, self._early = head.split(b"\r\n\r\n", 1)
        fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
        self._left = int(fields[b"Content-Length"]) - len(self._early)

    def readinto(self, buffer) -> int:
        view = memoryview(buffer)
        if self._early:
            n = min(len(view), len(self._early))
            view[:n], self._early = self._early[:n], self._early[n:]
            return n
        if self._left <= 0:
            return 0
        n = self._sock.recv_into(view, min(len(view), self._left))
        self._left -= n
        return n

    def read(self, n: int = -1) -> bytes:
        buffer = bytearray(n if n and n > 0 else 1 << 19)
        return bytes(buffer[: self.readinto(buffer)])

    def close(self) -> None:
        self._sock.close()


def tiny_store(root: Path) -> str:
    from cudapkgs.store.store import Store

    with Store.open(root / "store") as store:
        def fill(out: Path) -> None:
            out.mkdir()
            (out / "random.so").write_bytes(os.urandom(6 << 20))
            (out / "text.h").write_bytes(b"#define CUDA_SOMETHING 1 /* text */\n" * 170_000)

        store.add_path("tiny-nar-1.0", fill)
    return str(root / "store")


def bench(store_dir: str, work: Path, runs: int) -> dict:
    from cudapkgs.store.caches.compression import HashingFile, decompressed_reader
    from cudapkgs.store.caches.http import HttpCache
    from cudapkgs.store.store import Store

    with Store.open(store_dir) as store:
        paths = store.all_paths()
        path = max(paths, key=lambda p: store.query(p).nar_size)
        nar_size = store.query(path).nar_size
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "CUDAPKGS_STORE"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    kept = work / "kept"
    server = subprocess.Popen([sys.executable, "-m", "cudapkgs", "serve", "--store", store_dir, "--port", str(port), "--quiet",
                               "--compression", "zstd", "--cache-dir", str(kept), "--cache-size", str(2 * nar_size + (64 << 20))],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"{url}/{os.path.basename(path)[:32]}.narinfo", timeout=600) as r:
                    narinfo = r.read().decode()
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit(f"cudapkgs serve exited: {server.stderr.read().decode(errors='replace')[-2000:]}")
                time.sleep(0.1)
        else:
            raise SystemExit("cudapkgs serve did not answer")
        fields = dict(line.split(": ", 1) for line in narinfo.splitlines() if ": " in line)
        nar_url, file_size = fields["URL"], int(fields["FileSize"])
        (kept_file,) = [f for f in kept.iterdir() if f.name.endswith(".nar.zst")]
        cache = HttpCache(url)

        def once(mode: str, decompress: bool) -> tuple[float, float, float, str]:
            if mode == "raw":
                body = _RawBody(url, nar_url)
            else:
                body = open(kept_file, "rb") if mode == "file" else cache._get(nar_url, 1 << 40)
            source = _ReadOnly(body) if mode == "read" else body
            hashed = HashingFile(source, limit=file_size, hash=False)
            out = memoryview(bytearray(1 << 19))
            sha = hashlib.sha256()
            packets = _lo_packets()
            served, start, cpu = _server_cpu(server.pid), time.perf_counter(), time.process_time()
            if decompress:
                reader = decompressed_reader(hashed, "zstd")
                while n := reader.readinto(out):
                    sha.update(out[:n])
            elif mode in ("readinto", "raw"):
                while n := hashed.readinto(out):
                    pass
            else:
                while hashed.read(1 << 19):
                    pass
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            body.close()
            if hashed.size != file_size:
                raise SystemExit(f"{mode}: read {hashed.size} bytes of {file_size}")
            return wall, cpu, _server_cpu(server.pid) - served, sha.hexdigest(), _lo_packets() - packets

        rows: dict[str, list] = {}
        modes = ["read", "readinto", "raw", "file"]
        load_before = os.getloadavg()
        for decompress in (False, True):
            for i in range(runs):
                for mode in modes if i % 2 == 0 else modes[::-1]:
                    name = f"{mode}{' + zstd + sha256' if decompress else ''}"
                    rows.setdefault(name, []).append(once(mode, decompress))
        digests = {r[3] for name, rs in rows.items() if "zstd" in name for r in rs}
        if len(digests) != 1:
            raise SystemExit(f"the ways disagree on the NAR: {digests}")
    finally:
        server.terminate()
        server.wait(30)
    try:
        sys.path.insert(0, str(REPO / "bench"))
        from big_tcp_lo import sizes

        lo = " ".join(f"{k}={v}" for k, v in sorted(sizes().items()))
    except (OSError, ImportError, ValueError):
        lo = ""
    return {"rows": rows, "path": path, "nar_size": nar_size, "file_size": file_size,
            "load": (load_before, os.getloadavg()), "lo": lo}


def report(result: dict, runs: int) -> None:
    before, after = result["load"]
    print(f"NAR: {os.path.basename(result['path'])}, {result['nar_size'] / 2**20:.1f} MiB, {result['file_size'] / 2**20:.1f} MiB "
          f"zstd; runs: {runs}; {os.cpu_count()} CPUs; load average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
          f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}\n")
    rows = result["rows"]
    if result.get("lo"):
        print(f"lo in this network namespace: {result['lo']}\n")
    print("| how | median wall s | CPU s (this process) | CPU × read | server CPU s | both CPU s per GiB of body "
          "| lo packets per MiB of body |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rs in rows.items():
        base = "read + zstd + sha256" if "zstd" in name else "read"
        cpu = statistics.median(r[1] for r in rs)
        print(f"| {name} | {statistics.median(r[0] for r in rs):.3f} | {cpu:.3f} | "
              f"{cpu / max(statistics.median(r[1] for r in rows[base]), 1e-9):.2f} | {statistics.median(r[2] for r in rs):.3f} "
              f"| {statistics.median((r[1] + r[2]) for r in rs) / (result['file_size'] / 2**30):.3f} "
              f"| {statistics.median(r[4] for r in rs) / (result['file_size'] / 2**20):.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--runs", type=int, default=9)
    parser.add_argument("--tiny", action="store_true", help="a synthetic 12 MiB path, three runs: the CI smoke test")
    parser.add_argument("--store", help="a store whose largest path's NAR is read")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-http-read-"))
    try:
        if args.tiny:
            store_dir, runs = tiny_store(work), 3
        elif args.store:
            store_dir, runs = os.path.abspath(args.store), args.runs
        else:
            parser.error("--store is needed (or --tiny)")
        result = bench(store_dir, work, runs)
    finally:
        for directory, _, _ in os.walk(work):
            os.chmod(directory, 0o755)
        shutil.rmtree(work)
    report(result, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
