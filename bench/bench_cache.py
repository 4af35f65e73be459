"""Benchmark a file:// zstd binary cache against tar + zstd on the same store paths; or (--http) substitution over HTTP.

    python bench/bench_cache.py --store /tmp/cudapkgs-store --paths-from build/compile-closure.txt -r 3
    python bench/bench_cache.py --tiny          # a synthetic ~8 MiB closure (what CI runs)
    python bench/bench_cache.py --http --peer-src /tmp/old/src --store … --paths-from … -r 5

--http: the closure is uploaded once (this tree's code) into a cache directory that nginx serves on
127.0.0.1 (a threaded Python server when nginx is absent: the table says which); then each round
substitutes the whole closure into an empty store from file:// (this tree), from http:// (this
tree) and, with --peer-src, from http:// with the code of another checkout's src/ (e.g. a
`git worktree` of an older commit), alternating in that order; every row reads the same bytes.

Rows, each operation in its own child process (so its peak RSS is its own; Python's
start-up, ~50 ms, is inside the cudapkgs rows), medians of -r runs, warm page cache:

* upload: `Cache.upload_closure` (NAR, sha256, zstd level 3, rename; no signing) into an
  empty cache directory vs `tar -I zstd -cf` of the same paths (zstd's default level 3);
* substitute: `Substituters.fetch` of the whole closure (signature checked, -j 4) into an
  empty store at the same directory vs `tar -I zstd -xf` of the tar into an empty directory.

The store is moved aside for the substitute rows (store paths embed the store directory)
and moved back afterwards, whatever happens. Budgets (issue 11): each cudapkgs row at most
1.5 x its tar row; peak RSS under 100 MiB.
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(REPO / "tests"))  # local_servers: the helpers the cache tests use too

CHILD = r"""
import os, sys
sys.path.insert(0, {src!r})
from cudapkgs.store.store import Store
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import PublicKey, SecretKey
op, store_dir, cache_url, key_text, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
cache = open_cache(cache_url)
with Store.open(store_dir) as store:
    if op == "upload":
        cache.upload_closure(store, paths, secret_key=SecretKey.parse(key_text))
    else:  # the trusted public key, as a configuration names it (deriving it from the secret key would load more)
        from cudapkgs.store.caches.substitution import Substituters
        subs = Substituters([cache], [PublicKey.parse(key_text)])
        found = subs.query(store, paths)
        todo = [found[p] for p in subs.closure_of(found, paths)]
        assert len(todo) == len(paths), (len(todo), len(paths))
        jobs = int(os.environ.get("BENCH_JOBS", "4"))
        if jobs == 0:  # what `copy --from` picks without -j
            from cudapkgs.store.caches.substitution import default_jobs
            jobs = default_jobs(cache)
        run, wait = map(int, open("/proc/thread-self/schedstat").read().split()[:2])
        sys.stderr.write(f"bench-jobs={{jobs}}\nbench-wait={{wait / max(1, run + wait):.3f}}\n")
        subs.fetch(store, todo, jobs=jobs)
"""


# Children write and reuse bytecode (as an installed cudapkgs does): without it every run compiles each
# module again, and the tree with more source pays more (bench_startup.py does the same).
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


#: Seconds the last `timed` child's threads spent runnable but waiting for a CPU (other processes' load).
last_runqueue_wait = 0.0
#: The last `timed` child's (user, system) CPU seconds: on this shared machine Nix's system time swings with
#: the load (1.0-3.1 s of CPU for the same closure), so the two are shown apart.
last_user_sys = (0.0, 0.0)
#: The jobs the last substituting child used (it prints them: with -j 0 `default_jobs` picks), 0 for other children.
last_jobs = 0
#: The share of its runnable time the last substituting child's main thread waited for a CPU before the fetch (what `default_jobs` looks at).
last_wait_share = -1.0
#: The last `timed` child's own peak RSS (VmHWM after its exec, sampled every 10 ms), KiB. wait4's ru_maxrss
#: is at least the forked copy of this (larger) Python process, so for small children it reads this process.
last_hwm_kib = 0


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system) of one child process (its own rusage, via wait4).

    Also samples, every 10 ms, how long the child's threads waited for a CPU (`last_runqueue_wait`):
    wall time beyond CPU time is either that (the machine is busy) or waiting for I/O.
    """
    import threading

    global last_runqueue_wait
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or _ENV)
    seen: dict[str, int] = {}
    stop = threading.Event()

    hwm = [0]

    def sample() -> None:
        while not stop.wait(0.01):
            try:
                with open(f"/proc/{process.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            hwm[0] = max(hwm[0], int(line.split()[1]))
                for task in os.listdir(f"/proc/{process.pid}/task"):
                    with open(f"/proc/{process.pid}/task/{task}/schedstat") as f:
                        seen[task] = int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    last_runqueue_wait = sum(seen.values()) / 1e9
    global last_hwm_kib, last_user_sys
    last_hwm_kib = hwm[0]
    last_user_sys = (usage.ru_utime, usage.ru_stime)
    process.returncode = os.waitstatus_to_exitcode(status)
    errors = process.stderr.read().decode(errors="replace")
    if process.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({process.returncode}): {errors[-500:]}")
    global last_jobs
    last_jobs = next((int(line[11:]) for line in errors.splitlines() if line.startswith("bench-jobs=")), 0)
    global last_wait_share
    last_wait_share = next((float(line[11:]) for line in errors.splitlines() if line.startswith("bench-wait=")), -1.0)
    return wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def run_child(op: str, store_dir: str, cache_url: str, key: str, paths: list[str],
              src: Path = REPO / "src") -> tuple[float, int, float]:
    return timed([sys.executable, "-c", CHILD.format(src=str(src)), op, store_dir, cache_url, key, *paths])


def tiny_store(root: Path) -> tuple[str, list[str]]:
    """A store with a 3-path closure of ~8 MiB (text-like and random data)."""
    from cudapkgs.store.store import Store

    store_dir = root / "store"
    with Store.open(store_dir) as store:
        def lib(out: Path) -> None:
            out.mkdir()
            (out / "lib").mkdir()
            (out / "lib" / "libx.so").write_bytes(os.urandom(3 << 20))
            (out / "include").mkdir()
            for i in range(200):
                (out / "include" / f"h{i}.h").write_text(f"#define X{i} {i}\n" * 200)
        a = store.add_path("tiny-lib", lib)

        def tool(out: Path) -> None:
            out.mkdir()
            (out / "bin").mkdir()
            (out / "bin" / "tool").write_bytes(a.encode() + os.urandom(2 << 20))
            os.chmod(out / "bin" / "tool", 0o755)
        b = store.add_path("tiny-tool", tool, references_candidates=[a])
        paths = sorted(store.closure([b]))
    return str(store_dir), paths


def the_closure(args: argparse.Namespace, parser: argparse.ArgumentParser, work: Path) -> tuple[str, list[str], int]:
    """The store and the closure every mode transfers: (store dir, sorted closure, NAR bytes), from
    ``--tiny`` (a small store made under ``work``) or ``--store`` with ``--paths``/``--paths-from``."""
    from cudapkgs.store.store import Store

    if args.tiny:
        store_dir, wanted = tiny_store(work)
    else:
        if not args.store:
            parser.error("--store is needed (or --tiny)")
        store_dir = os.path.abspath(args.store)
        wanted = list(args.paths)
        if args.paths_from:
            with open(args.paths_from) as listed:
                wanted += [line.strip() for line in listed if line.strip()]
    with Store.open(store_dir) as store:
        paths = sorted(store.closure(wanted))
        nar_bytes = sum(store.query(p).nar_size for p in paths)
    return store_dir, paths, nar_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="store holding the paths")
    parser.add_argument("--paths-from", help="file listing store paths (one per line); their closure is used")
    parser.add_argument("paths", nargs="*", help="store paths (their closure is used)")
    parser.add_argument("-r", "--runs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="a synthetic ~8 MiB closure in a temporary store")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--http", action="store_true", help="substitution over HTTP from 127.0.0.1 (see above)")
    parser.add_argument("--peer-src", help="with --http or --nix: the src/ directory of the code to compare against")
    parser.add_argument("--https", action="store_true", help="with --http: serve over TLS (a self-signed certificate)")
    parser.add_argument("--nix", action="store_true", help="substitution from file:// against real Nix's `nix copy --from`")
    parser.add_argument("--peer-jobs", type=int, help="with --nix --peer-src: the peer row's jobs (default: as -j)")
    parser.add_argument("--cli", action="store_true", help="with --nix: also a row of the `cudapkgs copy --from` command itself")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="with --nix: cudapkgs' substitution jobs (default 2; 0: what `copy --from` picks, default_jobs)")
    args = parser.parse_args(argv)
    if args.nix:
        return nix_main(args, parser)
    if args.http or args.https:
        args.http = True
        return http_main(args, parser)

    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    work = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    aside = None
    store_dir = None
    try:
        store_dir, paths, nar_bytes = the_closure(args, parser, work)
        secret = generate("bench-1")
        key, public = str(secret), str(secret.public)
        names = [os.path.basename(p) for p in paths]
        rows: dict[str, list[tuple[float, int, float]]] = {k: [] for k in ("tar -I zstd -cf", "cudapkgs upload",
                                                                   "tar -I zstd -xf", "cudapkgs substitute")}
        sizes = {}
        for run in range(args.runs):
            tar = work / f"closure-{run}.tar.zst"
            rows["tar -I zstd -cf"].append(timed(["tar", "-I", "zstd", "-cf", str(tar), "-C", store_dir, *names]))
            cache_dir = work / f"cache-{run}"
            rows["cudapkgs upload"].append(run_child("upload", store_dir, f"file://{cache_dir}", key, paths))
            sizes["tar"] = tar.stat().st_size
            sizes["cache"] = sum(f.stat().st_size for f in (cache_dir / "nar").iterdir())
        # substitute: the store moves aside; an empty store takes its directory
        aside = Path(store_dir + ".bench-aside")
        os.rename(store_dir, aside)
        for run in range(args.runs):
            out = work / f"untar-{run}"
            out.mkdir()
            rows["tar -I zstd -xf"].append(timed(["tar", "-I", "zstd", "-xf", str(work / f"closure-{run}.tar.zst"), "-C", str(out)]))
            _rmtree(out)
            Store.open(store_dir).close()
            rows["cudapkgs substitute"].append(run_child("substitute", store_dir, f"file://{work}/cache-{run}", public, paths))
            _rmtree(Path(store_dir))
    finally:
        if aside is not None and aside.exists():
            if os.path.exists(store_dir):
                _rmtree(Path(store_dir))
            os.rename(aside, store_dir)
        _rmtree(work)

    med = {k: statistics.median(t for t, _, _ in v) for k, v in rows.items()}
    best = {k: min(t for t, _, _ in v) for k, v in rows.items()}
    cpu = {k: statistics.median(c for _, _, c in v) for k, v in rows.items()}
    rss = {k: max(r for _, r, _ in v) for k, v in rows.items()}
    ratios = {"upload": med["cudapkgs upload"] / med["tar -I zstd -cf"],
              "substitute": med["cudapkgs substitute"] / med["tar -I zstd -xf"]}
    cpu_ratios = {"upload": cpu["cudapkgs upload"] / cpu["tar -I zstd -cf"],
                  "substitute": cpu["cudapkgs substitute"] / cpu["tar -I zstd -xf"]}
    result = {"paths": len(paths), "narBytes": nar_bytes, "runs": args.runs, "median_s": med, "min_s": best, "median_cpu_s": cpu,
              "maxrss_kib": rss, "ratios": ratios, "cpu_ratios": cpu_ratios, "compressed": sizes,
              "load_average": os.getloadavg()}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{len(paths)} paths, {nar_bytes / 2**20:.1f} MiB of NAR; tar.zst {sizes['tar'] / 2**20:.1f} MiB, "
          f"cache NARs {sizes['cache'] / 2**20:.1f} MiB; median of {args.runs} runs, warm page cache\n")
    print("| operation | tool | median wall s | ratio to tar | min wall s | min ratio | median CPU s | CPU ratio | peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for op, peer, ours in (("upload", "tar -I zstd -cf", "cudapkgs upload"), ("substitute", "tar -I zstd -xf", "cudapkgs substitute")):
        print(f"| {op} | {peer} | {med[peer]:.3f} | 1.00 | {best[peer]:.3f} | 1.00 | {cpu[peer]:.3f} | 1.00 | {rss[peer] / 1024:.1f} |")
        print(f"| {op} | {ours} | {med[ours]:.3f} | {ratios[op]:.2f} | {best[ours]:.3f} | {best[ours] / best[peer]:.2f} | "
              f"{cpu[ours]:.3f} | {cpu_ratios[op]:.2f} | {rss[ours] / 1024:.1f} |")
    print(f"\nload average during the run: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    return 0


NGINX_CONF = """\
{user}
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port}{tls};
        root {root};
    }}
}}
"""


class _Served:
    """The cache directory served on 127.0.0.1: nginx when installed, else a threaded Python server."""

    def __init__(self, root: Path, work: Path, tls: bool = False) -> None:
        from local_servers import free_port, nginx_binary, self_signed, wait_for_port

        port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        self.cert = None
        tls_conf = ""
        if tls:
            self.cert, key = self_signed(work)
            tls_conf = f" ssl; ssl_certificate {self.cert}; ssl_certificate_key {key}"
        self.process = None
        self.httpd = None
        nginx = nginx_binary()
        if nginx:
            run = work / "nginx"
            run.mkdir()
            user = "user root root;" if os.geteuid() == 0 else ""
            (run / "nginx.conf").write_text(NGINX_CONF.format(user=user, dir=run, port=port, root=root, tls=tls_conf))
            self.process = subprocess.Popen([nginx, "-c", str(run / "nginx.conf"), "-p", str(run)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.server = "nginx " + subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr.strip().split("/")[-1]
        else:
            import functools
            import threading
            from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

            class Handler(SimpleHTTPRequestHandler):
                protocol_version = "HTTP/1.1"

                def log_message(self, *args):
                    pass

            self.httpd = ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=str(root)))
            if tls:
                import ssl

                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(self.cert, key)
                self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
            self.server = "Python http.server (threaded)"
        try:
            wait_for_port(port, self.process, self.server)
        except RuntimeError as error:
            raise SystemExit(f"{self.server} did not start on 127.0.0.1:{port} ({error})") from None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()


def http_main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Substitute the closure from file:// and http:// (this tree, and --peer-src), alternating; medians."""
    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    peer = Path(args.peer_src).resolve() if args.peer_src else None
    if peer is not None and not (peer / "cudapkgs" / "__init__.py").is_file():
        parser.error(f"--peer-src {peer}: no cudapkgs package there (give a checkout's src/ directory)")
    work = Path(tempfile.mkdtemp(prefix="bench-cache-http-"))
    aside = None
    store_dir = None
    served = None
    try:
        store_dir, paths, nar_bytes = the_closure(args, parser, work)
        secret = generate("bench-1")
        key, public = str(secret), str(secret.public)
        cache_dir = work / "cache"
        run_child("upload", store_dir, f"file://{cache_dir}", key, paths)
        cache_bytes = sum(f.stat().st_size for f in (cache_dir / "nar").iterdir())
        served = _Served(cache_dir, work, tls=args.https)
        if served.cert is not None:
            # Both trees trust the certificate through the environment, in a bundle with the system's CAs
            # (what a client loads for a real cache: loading it costs tens of milliseconds each time).
            bundle = work / "ca-bundle.pem"
            system = next((p for p in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
                           if os.path.isfile(p)), None)
            bundle.write_bytes((Path(system).read_bytes() if system else b"") + served.cert.read_bytes())
            _ENV["SSL_CERT_FILE"] = _ENV["NIX_SSL_CERT_FILE"] = str(bundle)
        scheme = "https" if args.https else "http"
        rows = [("file:// (this tree)", f"file://{cache_dir}", REPO / "src"),
                (f"{scheme}:// (this tree)", served.url, REPO / "src")]
        if peer is not None:
            rows.append((f"{scheme}:// ({peer})", served.url, peer))
        results: dict[str, list[tuple[float, int, float]]] = {label: [] for label, _, _ in rows}
        aside = Path(store_dir + ".bench-aside")
        os.rename(store_dir, aside)
        for round_ in range(args.runs + 1):  # round 0 warms up (bytecode, page cache) and is not counted
            for label, url, src in rows:
                Store.open(store_dir).close()
                measured = run_child("substitute", store_dir, url, public, paths, src=src)
                if round_:
                    results[label].append(measured)
                _rmtree(Path(store_dir))
    finally:
        if served is not None:
            served.stop()
        if aside is not None and aside.exists():
            if os.path.exists(store_dir):
                _rmtree(Path(store_dir))
            os.rename(aside, store_dir)
        _rmtree(work)

    med = {k: statistics.median(t for t, _, _ in v) for k, v in results.items()}
    cpu = {k: statistics.median(c for _, _, c in v) for k, v in results.items()}
    rss = {k: max(r for _, r, _ in v) for k, v in results.items()}
    base = rows[-1][0]  # the peer when there is one, else http:// of this tree
    result = {"paths": len(paths), "narBytes": nar_bytes, "cacheBytes": cache_bytes, "runs": args.runs,
              "server": served.server if served else None, "median_s": med, "median_cpu_s": cpu, "maxrss_kib": rss,
              "all_s": {k: [round(t, 3) for t, _, _ in v] for k, v in results.items()},
              "load_average": os.getloadavg()}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{len(paths)} paths, {nar_bytes / 2**20:.1f} MiB of NAR, {cache_bytes / 2**20:.1f} MiB of zstd NARs served by "
          f"{result['server']} on 127.0.0.1{' over TLS' if args.https else ''}; substitute -j 4 into an empty store, median of {args.runs} alternating runs after a warm-up round\n")
    print(f"| source (code) | median wall s | wall ratio to the last row | median CPU s | CPU ratio | peak RSS MiB | runs (wall s) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, _, _ in rows:
        print(f"| {label} | {med[label]:.3f} | {med[label] / med[base]:.2f} | {cpu[label]:.3f} | {cpu[label] / cpu[base]:.2f} | "
              f"{rss[label] / 1024:.1f} | {', '.join(f'{t:.2f}' for t, _, _ in results[label])} |")
    print(f"\nload average after the runs: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    return 0

NIX = shutil.which("nix") or "/usr/bin/nix"


def _cpu_pressure() -> float:
    """Linux's CPU pressure now: the share (per cent) of the last 10 s in which some task waited for a CPU; -1 without PSI."""
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().split("avg10=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return -1.0


def _vm_dirty_kib() -> tuple[int, int]:
    """(Dirty, Writeback) of /proc/meminfo in KiB: the page cache waiting to be written, and being written."""
    values = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Dirty", "Writeback"):
                    values[key] = int(rest.split()[0])
    except OSError:
        pass
    return values.get("Dirty", 0), values.get("Writeback", 0)


class _DirtyWatch:
    """The most dirty + writeback page cache (KiB) seen while a run lasts, sampled every 20 ms in a thread."""

    def __enter__(self) -> "_DirtyWatch":
        import threading

        self.peak = sum(_vm_dirty_kib())
        self.start = self.peak
        self._stop = threading.Event()

        def sample() -> None:
            while not self._stop.wait(0.02):
                self.peak = max(self.peak, sum(_vm_dirty_kib()))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def nix_copy_from(cache_dir: Path, store_dir: str, public_key: str, paths: list[str], run_dir: Path) -> tuple[float, int, float]:
    """`nix copy --from file://cache_dir` of `paths` into a fresh chroot store under `run_dir`: (wall s, peak RSS KiB, CPU s)."""
    env = {**_ENV, "NIX_STORE_DIR": store_dir, "XDG_CACHE_HOME": str(run_dir / "xdg"), "HOME": str(run_dir)}
    cmd = [NIX, "copy", "--extra-experimental-features", "nix-command", "--from", f"file://{cache_dir}",
           "--to", f"local?root={run_dir}/root", "--option", "trusted-public-keys", public_key,
           "--option", "substituters", "", *paths]
    try:
        measured = timed(cmd, env)
    except SystemExit as error:
        raise SystemExit(f"nix copy failed: {error}") from None
    # Nix 2.8 keeps a chroot store's files in <root>/nix/store whatever its (logical) store directory
    base = os.path.basename(paths[-1])
    if not any(p.exists() for p in (Path(f"{run_dir}/root{paths[-1]}"), run_dir / "root/nix/store" / base)):
        raise SystemExit(f"nix copy made no {paths[-1]} under {run_dir}")
    return measured


def nix_main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Substitute the closure from one file:// cache with `nix copy --from` and with cudapkgs, alternating; medians."""
    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    if not os.path.exists(NIX):
        parser.error("--nix needs real Nix (apt-get install nix-bin)")
    work = Path(tempfile.mkdtemp(prefix="bench-cache-nix-"))
    aside = None
    store_dir = None
    try:
        store_dir, paths, nar_bytes = the_closure(args, parser, work)
        key = generate("bench-1")
        cache_dir = work / "cache"
        run_child("upload", store_dir, f"file://{cache_dir}", str(key), paths)
        cache_bytes = sum(f.stat().st_size for f in (cache_dir / "nar").iterdir())
        aside = Path(store_dir + ".bench-aside")
        os.rename(store_dir, aside)
        _ENV["BENCH_JOBS"] = str(args.jobs)
        peer_src = Path(args.peer_src).resolve() if args.peer_src else None
        labels = ("nix copy --from", "cudapkgs substitute") + ((f"cudapkgs ({peer_src})",) if peer_src else ())
        cli = "cudapkgs copy --from (the command)"
        if args.cli:
            labels += (cli,)
            (work / "home").mkdir()
        results: dict[str, list[tuple[float, int, float]]] = {label: [] for label in labels}
        dirty: dict[str, list[int]] = {label: [] for label in labels}
        waits: dict[str, list[float]] = {label: [] for label in labels}
        user_sys: dict[str, list[tuple[float, float]]] = {label: [] for label in labels}
        jobs_used: dict[str, list[int]] = {label: [] for label in labels}
        pressure: dict[str, list[float]] = {label: [] for label in labels}
        for round_ in range(args.runs + 1):  # round 0 warms up (bytecode, page cache) and is not counted
            for label in (labels if round_ % 2 == 0 else labels[::-1]):  # alternate who goes first
                psi = _cpu_pressure()
                with _DirtyWatch() as watch:
                    if label == labels[0]:
                        run_dir = work / f"nix-{round_}"
                        run_dir.mkdir()
                        measured = nix_copy_from(cache_dir, store_dir, str(key.public), paths, run_dir)
                    elif label == cli:  # the command a user runs: its own start-up, configuration and -j choice
                        Store.open(store_dir).close()
                        measured = timed([sys.executable, "-m", "cudapkgs", "copy", "--from", f"file://{cache_dir}",
                                          "--trusted-public-key", str(key.public), "--store", store_dir,
                                          *([f"-j{args.jobs}"] if args.jobs else []), *paths],
                                         {**_ENV, "PYTHONPATH": str(REPO / "src"), "HOME": str(work / "home"),
                                          "XDG_CONFIG_HOME": str(work / "home/.config")})
                    else:
                        Store.open(store_dir).close()
                        peer = label != labels[1]
                        _ENV["BENCH_JOBS"] = str(args.peer_jobs if peer and args.peer_jobs is not None else args.jobs)
                        measured = run_child("substitute", store_dir, f"file://{cache_dir}", str(key.public), paths,
                                             src=peer_src if peer else REPO / "src")
                if round_:
                    results[label].append(measured)
                    dirty[label].append(watch.peak)
                    waits[label].append(last_runqueue_wait)
                    user_sys[label].append(last_user_sys)
                    jobs_used[label].append((last_jobs, last_wait_share))
                    pressure[label].append(psi)
                    results[label][-1] = (measured[0], last_hwm_kib or measured[1], measured[2])
                _rmtree(run_dir if label == labels[0] else Path(store_dir))
    finally:
        if aside is not None and aside.exists():
            if os.path.exists(store_dir):
                _rmtree(Path(store_dir))
            os.rename(aside, store_dir)
        _rmtree(work)

    med = {k: statistics.median(t for t, _, _ in v) for k, v in results.items()}
    cpu = {k: statistics.median(c for _, _, c in v) for k, v in results.items()}
    rss = {k: max(r for _, r, _ in v) for k, v in results.items()}
    spread = {k: max(t for t, _, _ in v) / med[k] for k, v in results.items()}
    user = {k: statistics.median(u for u, _ in v) for k, v in user_sys.items()}
    system = {k: statistics.median(s for _, s in v) for k, v in user_sys.items()}
    peer, ours = labels[:2]
    result = {"paths": len(paths), "narBytes": nar_bytes, "cacheBytes": cache_bytes, "runs": args.runs, "jobs": args.jobs,
              "median_s": med, "median_cpu_s": cpu, "maxrss_kib": rss, "spread": spread,
              "all_s": {k: [round(t, 3) for t, _, _ in v] for k, v in results.items()},
              "all_cpu_s": {k: [round(c, 3) for _, _, c in v] for k, v in results.items()},
              "dirty_peak_mib": {k: [round(d / 1024) for d in v] for k, v in dirty.items()},
              "runqueue_wait_s": {k: [round(w, 2) for w in v] for k, v in waits.items()},
              "median_user_s": user, "median_sys_s": system, "jobs_used": jobs_used, "cpu_pressure_avg10": pressure,
              "ratios": {"wall": med[ours] / med[peer], "cpu": cpu[ours] / cpu[peer], "rss": rss[ours] / rss[peer],
                         "user": user[ours] / user[peer]},
              "load_average": os.getloadavg()}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{len(paths)} paths, {nar_bytes / 2**20:.1f} MiB of NAR, {cache_bytes / 2**20:.1f} MiB of zstd NARs in a file:// "
          f"cache; into an empty store, median of {args.runs} alternating runs after a warm-up round (cudapkgs -j {args.jobs or 'as copy --from picks'}); "
          "peak RSS is the child's VmHWM\n")
    print("| tool | median wall s | wall ratio | median CPU s | CPU ratio | user / sys s | user ratio | peak RSS MiB | RSS ratio | slowest / median | runs (wall s) | runs (CPU s) | waiting for a CPU (s) | peak dirty MiB | jobs (start-up waiting for a CPU) | CPU pressure before, % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---|")
    for label in labels:
        print(f"| {label} | {med[label]:.3f} | {med[label] / med[peer]:.2f} | {cpu[label]:.3f} | {cpu[label] / cpu[peer]:.2f} | "
              f"{user[label]:.2f} / {system[label]:.2f} | {user[label] / user[peer]:.2f} | "
              f"{rss[label] / 1024:.1f} | {rss[label] / rss[peer]:.2f} | {spread[label]:.2f} | "
              f"{', '.join(f'{t:.2f}' for t, _, _ in results[label])} | {', '.join(f'{c:.2f}' for _, _, c in results[label])} | "
              f"{', '.join(f'{w:.2f}' for w in waits[label])} | {', '.join(str(d) for d in result['dirty_peak_mib'][label])} | "
              f"{', '.join(f'{j} ({w * 100:.0f} %)' for j, w in jobs_used[label]) if any(j for j, _ in jobs_used[label]) else ''} | "
              f"{', '.join(f'{p:.0f}' for p in pressure[label])} |")
    print(f"\nload average after the runs: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    return 0


def _rmtree(path: Path) -> None:
    if not path.exists():
        return
    for dirpath, dirnames, _ in os.walk(path):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(path)


if __name__ == "__main__":
    sys.exit(main())
