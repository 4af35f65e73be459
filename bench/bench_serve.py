"""Benchmark `cudapkgs serve` against nginx serving the same cache bytes (issue 24, goal 4).

    python bench/bench_serve.py                 # a 256 MiB NAR, a NAR of 1,705 small files, -r 3, wrk -d 5
    python bench/bench_serve.py --tiny          # an 8 MiB NAR and 200 small files, short runs (what CI runs)

A synthetic store holds three paths: `big` (a few large files), `small` (many small files)
and `top` (refers to both). Its closure is uploaded signed to two file:// caches, one with
uncompressed NARs and one with zstd ones (level 3, as `cudapkgs copy --to` makes them).
nginx (one worker process, sendfile, no access log) serves those directories; `cudapkgs
serve --quiet` serves the store itself, signing with the same key (`--compression none` for
the wrk rows, `--compression zstd` for the nix rows), each in its own process on 127.0.0.1.

Rows, the two servers alternating within each round, medians of -r rounds:

* ``wrk -t1 -c8 -d<s> --timeout 120s`` of one narinfo, of the big NAR and of the small-files
  NAR: requests/s and MiB/s, the ratio ours/nginx (of requests/s for the narinfo, of MiB/s for
  NARs; goals: narinfo >= 0.2, big NAR >= 0.5, small files >= 0.3), and each server's CPU
  milliseconds per request (from /proc/<pid>/stat);
* ``nix copy --from http://…`` of the whole closure into a fresh chroot store (when `nix` is
  installed): wall seconds, the ratio ours/nginx (goal <= 1.2 against nginx's zstd cache), and the
  CPU of the nix process (wait4) and of the server.

Every server is warmed first (one request of each URL), so `cudapkgs serve` has signed the
narinfos and kept the NARs it keeps (compressed ones; uncompressed ones up to 64 MiB). Rows that
need a missing tool (wrk, nginx, nix) are left out with the reason. Prints the load average.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
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

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
WRK = shutil.which("wrk")
NIX = shutil.which("nix")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def make_store(root: Path, big_mib: int, small_files: int) -> tuple[str, dict[str, str]]:
    """The synthetic store: {"big", "small", "top"} -> store path."""
    from cudapkgs.store.store import Store

    rng = __import__("random").Random(24)
    text = b"".join(b"int cuda_function_%d(void *p, size_t n) { return %d; }\n" % (i, i) for i in range(4096))
    store_dir = root / "store"
    with Store.open(store_dir) as store:
        def big(out: Path) -> None:
            out.mkdir()
            (out / "lib").mkdir()
            per = (big_mib << 20) // 4
            for i in range(4):  # half random bytes, half text: zstd makes about 0.55 of it
                with open(out / "lib" / f"libbig{i}.so", "wb") as f:
                    written = 0
                    while written < per:
                        piece = os.urandom(1 << 20) if (written >> 20) % 2 == 0 else (text * 4)[: 1 << 20]
                        f.write(piece[: per - written])
                        written += min(len(piece), per - written)

        def small(out: Path) -> None:
            out.mkdir()
            for i in range(small_files):
                directory = out / "include" / f"d{i % 40}"
                directory.mkdir(parents=True, exist_ok=True)
                size = rng.randint(200, 8000)
                (directory / f"h{i}.h").write_bytes((text * 2)[rng.randint(0, 1000):][:size])

        paths = {"big": store.add_path("bench-big", big), "small": store.add_path("bench-small", small)}

        def top(out: Path) -> None:
            out.mkdir()
            (out / "refs").write_text(paths["big"] + "\n" + paths["small"] + "\n")
        paths["top"] = store.add_path("bench-top", top, references_candidates=[paths["big"], paths["small"]])
    return str(store_dir), paths


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
                return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer within {timeout:.0f} s")
            time.sleep(0.05)


def start_nginx(work: Path, root: Path, port: int) -> subprocess.Popen:
    conf = work / f"nginx-{port}.conf"
    (work / "nginx-tmp").mkdir(exist_ok=True)
    user = "user root;" if os.geteuid() == 0 else ""  # as root, workers would run as nobody and not read the cache
    conf.write_text(f"""
daemon off;
{user}
worker_processes 1;
pid {work}/nginx-{port}.pid;
error_log {work}/nginx-{port}.err warn;
events {{ worker_connections 1024; }}
http {{
    types {{ text/x-nix-narinfo narinfo; application/x-nix-nar nar; application/zstd zst; text/plain nix-cache-info; }}
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path {work}/nginx-tmp/body;
    proxy_temp_path {work}/nginx-tmp/proxy;
    fastcgi_temp_path {work}/nginx-tmp/fastcgi;
    uwsgi_temp_path {work}/nginx-tmp/uwsgi;
    scgi_temp_path {work}/nginx-tmp/scgi;
    server {{ listen 127.0.0.1:{port}; root {root}; }}
}}
""")
    process = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(work)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/nix-cache-info")
    except BaseException:
        stop(process)  # never left running
        raise
    return process


def start_serve(store_dir: str, key_file: Path, cache_dir: Path, compression: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "cudapkgs", "serve", "--port", "0", "--quiet", "--sign-key", str(key_file),
         "--store", store_dir, "--cache-dir", str(cache_dir), "--compression", compression],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    try:
        line = process.stdout.readline()
        if not line.startswith("serving "):
            raise SystemExit(f"cudapkgs serve did not start: {line}{process.stderr.read()[-2000:]}")
        url = line.split(" at ", 1)[1].split()[0]
        wait_for_http(url + "/nix-cache-info")
    except BaseException:
        stop(process)
        raise
    return process, url


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of `pids` (and their threads) from /proc, in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def nginx_pids(master: subprocess.Popen) -> list[int]:
    pids = [master.pid]
    try:
        for task in os.listdir(f"/proc/{master.pid}/task"):
            pids += [int(p) for p in Path(f"/proc/{master.pid}/task/{task}/children").read_text().split()]
    except OSError:
        pass
    return pids


def wrk(url: str, seconds: float, pids: list[int]) -> tuple[float, float, float]:
    """(requests/s, MiB/s, server CPU ms per request) of one wrk run (a request may take up to 120 s)."""
    before = cpu_seconds(pids)
    out = subprocess.run([WRK, "-t1", "-c8", f"-d{max(1, round(seconds))}s", "--timeout", "120s", url],
                         capture_output=True, text=True, timeout=seconds + 300)
    spent = cpu_seconds(pids) - before
    if out.returncode != 0:
        raise SystemExit(f"wrk failed ({out.returncode}): {out.stdout[-1000:]} {out.stderr[-1000:]}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)[1])
    transfer = re.search(r"Transfer/sec:\s+([\d.]+)([KMG]?B)", out.stdout)
    mib = float(transfer[1]) * {"B": 2**-20, "KB": 2**-10, "MB": 1, "GB": 1024}[transfer[2]]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    if errors or "Socket errors" in out.stdout:
        raise SystemExit(f"wrk saw errors from {url}:\n{out.stdout}")
    done = int(re.search(r"(\d+) requests in", out.stdout)[1])
    return rps, mib, (spent / done * 1000) if done else float("nan")


def nix_copy(url: str, store_dir: str, public_key: str, top: str, work: Path, pids: list[int]) -> tuple[float, float, float]:
    """(wall s, nix CPU s, server CPU s) of `nix copy --from url` of `top`'s closure into a fresh chroot store."""
    run_dir = Path(tempfile.mkdtemp(prefix="nix-copy-", dir=work))
    env = {**os.environ, "NIX_STORE_DIR": store_dir, "XDG_CACHE_HOME": str(run_dir / "xdg"), "HOME": str(run_dir)}
    cmd = [NIX, "copy", "--extra-experimental-features", "nix-command", "--from", url, "--to", f"local?root={run_dir}/root",
           "--option", "trusted-public-keys", public_key, "--option", "substituters", "", top]
    before = cpu_seconds(pids)
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    server = cpu_seconds(pids) - before
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"nix copy from {url} failed: {process.stderr.read().decode()[-2000:]}")
    # Nix 2.8 keeps a chroot store's files in <root>/nix/store whatever its (logical) store directory
    copied = [Path(f"{run_dir}/root{top}"), Path(f"{run_dir}/root/nix/store/{os.path.basename(top)}")]
    if not any(p.exists() for p in copied):
        raise SystemExit(f"nix copy from {url} made neither of {', '.join(map(str, copied))}")
    _rmtree(run_dir)
    return wall, usage.ru_utime + usage.ru_stime, server


def _rmtree(path: Path) -> None:
    if not path.exists():
        return
    for dirpath, _, _ in os.walk(path):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM if process.args[0] != NGINX else signal.SIGQUIT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--runs", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("-d", "--duration", type=int, default=5, help="seconds of each wrk run (default 5)")
    parser.add_argument("--big-mib", type=int, default=256, help="size of the big NAR's files in MiB (default 256)")
    parser.add_argument("--small-files", type=int, default=1705, help="files of the small-files NAR (default 1705)")
    parser.add_argument("--tiny", action="store_true", help="8 MiB, 200 files, 1 round of 1 s runs")
    parser.add_argument("--rows", choices=("all", "wrk", "nix"), default="all", help="which rows to measure (default all)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.runs, args.duration, args.big_mib, args.small_files = 1, 1, 8, 200

    from cudapkgs.store.caches import open_cache
    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    processes: list[subprocess.Popen] = []
    skipped: list[str] = []
    try:
        store_dir, paths = make_store(work, args.big_mib, args.small_files)
        key = generate("bench-serve-1")
        (work / "key").write_text(str(key))
        with Store.open(store_dir) as store:
            sizes = {k: store.query(p).nar_size for k, p in paths.items()}
            for compression in ("none", "zstd"):
                open_cache(f"file://{work}/cache-{compression}").upload_closure(store, [paths["top"]], secret_key=key,
                                                                                 compression=compression)
        what_urls = ("narinfo", "big NAR", "small-files NAR")

        def urls_of(base: str) -> dict[str, str]:
            """Each server names NARs its own way: ask its narinfos (which also warms it)."""
            cache = open_cache(base)
            return {"narinfo": f"{base}/{os.path.basename(paths['top'])[:32]}.narinfo",
                    "big NAR": f"{base}/{cache.narinfo(paths['big']).url}",
                    "small-files NAR": f"{base}/{cache.narinfo(paths['small']).url}"}
        rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        copies: dict[str, list[tuple[float, float, float]]] = {}
        if NGINX is None:
            skipped.append("the wrk and nix rows: nginx is not installed (apt-get install nginx)")
        elif WRK is None:
            skipped.append("the wrk rows: wrk is not installed (apt-get install wrk)")
        if NGINX is not None and WRK is not None and args.rows in ("all", "wrk"):
            nginx_port = free_port()
            nginx = start_nginx(work, work / "cache-none", nginx_port)
            processes.append(nginx)
            ours, our_url = start_serve(store_dir, work / "key", work / "serve-cache-none", "none")
            processes.append(ours)
            servers = {"nginx": (urls_of(f"http://127.0.0.1:{nginx_port}"), nginx_pids(nginx)),
                       "cudapkgs serve": (urls_of(our_url), [ours.pid])}
            for urls, _ in servers.values():  # warm: narinfos signed, NARs kept
                for url in urls.values():
                    with urllib.request.urlopen(url, timeout=120) as response:
                        response.read()
            for _ in range(args.runs):
                for what in what_urls:
                    for name, (urls, pids) in servers.items():
                        rows.setdefault((what, name), []).append(wrk(urls[what], args.duration, pids))
            for p in (ours, nginx):
                stop(p)
        if NIX is None and args.rows in ("all", "nix"):
            skipped.append("the nix copy rows: nix is not installed (apt-get install nix-bin)")
        if NGINX is not None and NIX is not None and args.rows in ("all", "nix"):
            nginx_port = free_port()
            nginx = start_nginx(work, work / "cache-zstd", nginx_port)
            processes.append(nginx)
            ours, our_url = start_serve(store_dir, work / "key", work / "serve-cache-zstd", "zstd")
            processes.append(ours)
            servers = {"nginx (zstd cache)": (f"http://127.0.0.1:{nginx_port}", nginx_pids(nginx)),
                       "cudapkgs serve --compression zstd": (our_url, [ours.pid])}
            for base, pids in servers.values():  # warm: the compressed NARs are made once
                nix_copy(base, store_dir, str(key.public), paths["top"], work, pids)
            for _ in range(args.runs):
                for name, (base, pids) in servers.items():
                    copies.setdefault(name, []).append(nix_copy(base, store_dir, str(key.public), paths["top"], work, pids))
            for p in (ours, nginx):
                stop(p)
    finally:
        for p in processes:
            stop(p)
        _rmtree(work)

    print(f"NAR sizes: big {sizes['big'] / 2**20:.1f} MiB, small-files {sizes['small'] / 2**20:.2f} MiB "
          f"({args.small_files} files), top {sizes['top']} B; {args.runs} round(s) of {args.duration:g} s, "
          f"servers alternating; medians\n")
    if rows:
        goals = {"narinfo": 0.2, "big NAR": 0.5, "small-files NAR": 0.3}
        print("| request | server | requests/s | MiB/s | ratio to nginx | goal | server CPU ms per request |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for what in what_urls:
            rate = 0 if what == "narinfo" else 1  # requests/s for narinfos, MiB/s for NARs (a cut-off one counts its part)
            peer = statistics.median(r[rate] for r in rows[(what, "nginx")])
            for name in ("nginx", "cudapkgs serve"):
                got = rows[(what, name)]
                rps, mib = statistics.median(r[0] for r in got), statistics.median(r[1] for r in got)
                print(f"| {what} | {name} | {rps:.1f} | {mib:.1f} | {(rps, mib)[rate] / peer:.2f} | "
                      f"{'' if name == 'nginx' else f'>= {goals[what]}'} | {statistics.median(r[2] for r in got):.3f} |")
    if copies:
        print("\n| nix copy --from | wall s | ratio to nginx | goal | nix CPU s | server CPU s |")
        print("|---|---:|---:|---:|---:|---:|")
        names = list(copies)
        peer = statistics.median(c[0] for c in copies[names[0]])
        for name in names:
            wall = statistics.median(c[0] for c in copies[name])
            print(f"| {name} | {wall:.3f} | {wall / peer:.2f} | {'' if name == names[0] else '<= 1.2'} | "
                  f"{statistics.median(c[1] for c in copies[name]):.3f} | {statistics.median(c[2] for c in copies[name]):.3f} |")
    for line in skipped:
        print(f"\nleft out: {line}")
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
