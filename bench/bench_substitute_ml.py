"""A teammate's machine getting the ML closure from the team's cache, against `uv pip install` of the same wheels.

Run:  python bench/bench_substitute_ml.py --store /tmp/speed/store -r 3     (the store holds the closure, built
                                                                         from wheels there; see below)
      python bench/bench_substitute_ml.py --tiny                         (a synthetic closure: the CI smoke test)
      ... -j 2                                                           (copy --from -j 2 in every substitution row)
      ... --direct-writes-off --first-use torch                          (direct writes on/off; the first import after)
      ... --top PATH --top PATH --wheel-dir DIR                         (a substituted store: the lent GPU machine)

Full mode.  ``--store`` is a private store in which ``cudapkgs build`` realised torch and numpy of
``cudaPackages_13_0.pkgs.pkgsCuda.python3Packages`` (fetchers = ["wheels"], prebuiltWheels = ["nccl",
"libnvshmem"], as bench_torch.py builds it; ``--attr`` for others).  The wheels uv installs are those the
build logs name (bench_torch.used_wheels: NVIDIA's, torch's and triton's from the wheel cache, the small
pure-Python ones from their fixed-output store paths), so both sides install the same packages.

Setup (timed once, printed): a signing key; ``cudapkgs copy --to file://CACHE --sign-key`` of the closure
(zstd, signed: issue 34's team cache), then every file of the cache read once (``copy --to`` writes big files
with O_DIRECT: without this read the first file:// row would read the cache from the disk, which no earlier
session's row did); ``cudapkgs serve --store STORE --sign-key --compression zstd`` on
127.0.0.1, as a team's server runs it: each NAR compressed once, on first demand, and kept in its
``--cache-dir`` (here in the work directory, its ``--cache-size`` the closure's NAR bytes, so nothing is
evicted), then sent from there with ``sendfile``. The setup warms it (untimed in the rows: a team's
server has served the closure before): every narinfo asked for, two at a time, which makes the server
compress that NAR; a second copy of the compressed closure on disk (2.7 GiB for the ML closure).
``--http-uncompressed`` adds the row of a second ``serve`` with NARs uncompressed (serve's default: 2x
the bytes over loopback, the server on the same cores).

Each round, alternating in this order (rotated by one row every round), every row a child process timed
by wait4 (wall, user + system CPU of it and its children), after an untimed ``sync`` (the write-back of
the row before is not charged to the next one). No row's tree is deleted before the round ends: then all
are deleted, ``sync``, and the next round waits ``--settle`` seconds (61 in full mode): on ext4 without a
journal (this machine's disk) every inode creation skips, one buffer-cache lookup each, the free inodes of
its block group deleted in the last 60 s (``recently_deleted``, fs/ext4/ialloc.c), and a row right after
another's deletions paid up to 2.6 s more system time for torch's NAR alone (measured: 0.71 s after 62 s
of waiting, 3.37 s right after); rows swung 7-18 s with it. A teammate's new machine has no such
deletions; with a journal the check is off. Per round that needs disk for every row's tree at once
(about 16 GiB for the three rows).

* ``cudapkgs copy --from file://CACHE --trusted-public-key K`` of the closure into an empty store;
* ``cudapkgs copy --from http://127.0.0.1:PORT --trusted-public-key K`` (the serve above, zstd) into an empty
  store (the server's CPU is not in the row: it is the team's machine's; it shares the two cores though);
* ``uv pip install --offline --no-deps`` of the wheels into a fresh venv (made untimed), uv's cache
  empty (``UV_CACHE_DIR`` a new directory: a teammate's new machine), wheels from a local directory.

* ``--direct-writes-off``: the file:// row again with ``CUDAPKGS_DIRECT_WRITES=off``, every file through
  the page cache as before store/direct_writes.py (the other rows write files of 4 MiB and more with
  ``O_DIRECT``). Not even-handed in the buffered row's favour on purpose: the untimed ``sync`` before each
  row means a buffered row's write-back to the disk is never charged to it, while a direct row waits for
  the disk inside its time. (Only the file:// row: a fourth tree of 5 GiB per round is what the disk allows.)
* ``--hot-sources``: each row's source (the file:// cache, serve's kept NARs, uv's wheels) read once, untimed,
  right before the row. Without it the sources are read once in the setup only, and the rows between evict
  some: in the fifteenth session's first window serve's kept NARs were 83.6-97.8 % in the page cache before
  the HTTP rows, the file:// cache 93.7-98.8 % before its rows (printed beside the table either way, with
  `fincore`; the server's CPU during each HTTP row too).
* ``--serve-level N``: the row of a second zstd ``serve`` at ``--compression-level N`` (its kept NARs in their own
  directory, warmed like the first; the warm-up's server CPU, the closure compressed once at that level, is
  printed with the setup): fewer bytes over loopback for more compression CPU once, on the team's server.
* ``--http-only``: no file:// row (nor its ``--direct-writes-off`` twin, nor the file:// cache): the HTTP rows and uv's, a round's trees
  5-10 GiB smaller. With ``unshare -n`` and bench/big_tcp_lo.py (BIG TCP on a private ``lo``), the HTTP rows
  under an administrator's setting; the report prints ``lo``'s GSO/GRO sizes in the bench's namespace.
* ``--first-use MODULE``: after each row, ``python -c 'import MODULE'`` in what the row just wrote (the
  store's python3 with the closure's site-packages, in the same mount namespace; uv's venv python), timed
  and printed in a second table. The page cache is as the row left it (not dropped: that would empty
  every other user's cache too): files written directly are read from the disk, files written buffered
  from memory, so this is what direct writes cost the first use. uv's venv has no byte code (uv compiles
  none by default), so its first import compiles and writes it: not the same work.

Every narinfo signature and every NAR hash is checked by the substituting side (that is what ``copy
--from`` does; nothing here turns it off).  Store paths embed the store directory, so the empty store
must sit at the source store's own path: the substituting child runs in a private mount namespace
(``unshare -m``) in which an empty directory is bind-mounted over it; where that is not allowed, the
file:// row moves the source store aside for the run instead (and back, whatever happens) and the HTTP
row is left out (the table says so).  ``--peer-src DIR`` adds the same two substitution rows run with
another checkout's ``src/`` (A/B of a change, same rounds).  Printed: medians, min–max, wall and CPU
ratios against uv, the system CPU time of each row (median, min–max: on this VM it carries the swing),
the jobs each ``copy --from`` used, the load average before and after.

Tiny mode: three synthetic wheels (~12 MiB: random and text members), a store holding their unpacked
trees as three store paths (one refers to another), the same rows, one round, no settling wait.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

from bench_torch import SETS, du, remove, uv_binary  # noqa: E402

ATTRS = ["cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch", "cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.numpy"]
UV = "uv pip install --offline --no-deps, uv cache empty"
FILE = "cudapkgs copy --from file:// (zstd), empty store"
HTTP = "cudapkgs copy --from http:// (cudapkgs serve --compression zstd), empty store"
HTTP_PLAIN = "cudapkgs copy --from http:// (cudapkgs serve, NARs uncompressed), empty store"
HTTP_LEVEL = "cudapkgs copy --from http:// (cudapkgs serve --compression zstd --compression-level {}), empty store"
BUFFERED = ", direct writes off (CUDAPKGS_DIRECT_WRITES=off)"


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and its children, its output) of one child; SystemExit if it fails."""
    wall, cpu, _, out = timed_usage(command, env)
    return wall, cpu, out


def timed_usage(command: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, of which system s, its output) of one child and its children; SystemExit if it fails.

    The system share is printed because on this VM it carries the swing: writes into memory the guest
    freed a while ago cost ~10x the copy (docs/bench-speed.md, "Thirteenth session")."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        log.seek(0)
        out = log.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(command[:10])} ... failed ({code}):\n{out[-4000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_stime, out


def can_unshare() -> bool:
    """Whether this process may make a private mount namespace and bind-mount in it (root, or CAP_SYS_ADMIN)."""
    if not shutil.which("unshare"):
        return False
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        return subprocess.run(["unshare", "-m", "mount", "--bind", a, b], capture_output=True).returncode == 0


def cudapkgs(src: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(src)!r}); from cudapkgs.cli import main; sys.exit(main())",
            *args]


def in_empty_store(command: list[str], store: Path, empty: Path) -> list[str]:
    """`command` run in a mount namespace where `empty` is mounted over `store` (both absolute)."""
    return ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"', str(empty), str(store), *command]


def spread_directories(work: Path) -> bool:
    """Mark `work` a top of directory hierarchies for ext4's Orlov allocator (``chattr +T``); whether that worked.

    Every row creates about 20,000 files right after the row before deleted as many. On ext4 without a
    journal (this machine's disk), creating a file skips, one buffer lookup each, every inode of the block
    group freed in the last 60 s (360 s while its inode table block is dirty): ``recently_deleted`` in
    fs/ext4/ialloc.c, 25 % of a torch NAR's restore in `perf` when it came right after such a deletion. A
    teammate's new machine has no such deletions. cudapkgs' store marks its ``.tmp`` so already
    (`workdirs.spread_subdirectories`); with +T here uv's venv (and the empty store's root) too go to block
    groups picked afresh (Orlov) instead of those the last row just emptied. Best effort: False where not ext4.
    """
    if not shutil.which("chattr"):
        return False
    return subprocess.run(["chattr", "+T", str(work)], capture_output=True).returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: url -> pid of the `serving` child answering there (its CPU time is read from /proc around each HTTP row).
SERVERS: dict[str, int] = {}


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (all its threads), from /proc/PID/stat; 0.0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def files_under(directory: Path) -> list[str]:
    """Every file under `directory` (walked, links not followed)."""
    return [os.path.join(root, name) for root, _, names in os.walk(directory) for name in names]


def resident_share(files: list[str]) -> float | None:
    """The share (0-1) of the bytes of `files` that are in the page cache, by ``fincore`` (mincore(2): nothing
    is read); None without fincore. Printed for each row's source: a row whose source was partly evicted (uv's
    rows write ~8 GiB through the page cache) reads the rest from the disk."""
    if not files or not shutil.which("fincore"):
        return None
    done = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", *files],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None
    res = size = 0
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            res, size = res + min(int(parts[0]), int(parts[1])), size + int(parts[1])  # RES counts whole pages
    return res / size if size else None


def read_files(files: list[str]) -> None:
    """Read each of `files` once (`--hot-sources`: into the page cache, untimed, before a row)."""
    for name in files:
        with open(name, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


@contextlib.contextmanager
def serving(src: Path, store: Path, key: Path, env: dict[str, str], *, cache_dir: Path | None = None,
            cache_bytes: int = 0, level: int | None = None):
    """`cudapkgs serve` of `store` on 127.0.0.1; yields its URL.

    With `cache_dir`: ``--compression zstd`` (at `level`, when given), the compressed NARs kept there
    (`cache_bytes` of them at most); without: NARs uncompressed (serve's default).
    """
    port = free_port()
    zstd = ["--compression", "zstd", "--cache-dir", str(cache_dir), "--cache-size", str(cache_bytes)] if cache_dir else []
    if level is not None:
        zstd += ["--compression-level", str(level)]
    proc = subprocess.Popen(cudapkgs(src, "serve", "--store", str(store), "--port", str(port), "--quiet", "--sign-key",
                                     str(key), *zstd),
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    SERVERS[url] = proc.pid
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(url + "/nix-cache-info", timeout=5) as r:
                    r.read()
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"cudapkgs serve exited: {proc.stderr.read().decode(errors='replace')[-2000:]}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


# -- the tiny closure ---------------------------------------------------------------------------------------


def tiny_wheel(directory: Path, name: str, members: dict[str, bytes]) -> Path:
    """A wheel `name`-1.0 (py3-none-any, deflate) holding `members`, with its dist-info and RECORD."""
    import base64
    import hashlib

    dist = f"{name}-1.0.dist-info"
    files = {**members, f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for member, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{member},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in files.items():
            z.writestr(member, data)
    return wheel


def tiny_closure(work: Path) -> tuple[Path, list[str], list[Path]]:
    """(store, closure, wheels): three synthetic wheels and their unpacked trees as store paths."""
    from cudapkgs.store.store import Store

    wheels_dir = work / "wheels"
    wheels_dir.mkdir()
    contents = {
        "tinyblas": {"tinyblas/__init__.py": b"X = 1\n", "tinyblas/lib/libtinyblas.so": os.urandom(5 << 20),
                     "tinyblas/include/blas.h": b"#define TINY 1\n" * 20000},
        "tinytorch": {"tinytorch/__init__.py": b"import tinyblas\n" * 100, "tinytorch/lib/libtorch.so": os.urandom(4 << 20),
                      **{f"tinytorch/m{i}.py": f"def f{i}(x):\n    return x + {i}\n".encode() * 50 for i in range(300)}},
        "tinynumpy": {"tinynumpy/__init__.py": b"Y = 2\n", "tinynumpy/core.so": os.urandom(2 << 20)},
    }
    wheels = [tiny_wheel(wheels_dir, name, members) for name, members in contents.items()]
    store_dir = work / "store"
    made: dict[str, str] = {}
    with Store.open(store_dir) as store:
        for name, members in contents.items():
            def fill(out: Path, members=members, name=name) -> None:
                for member, data in members.items():
                    if name == "tinytorch" and member.endswith("__init__.py"):  # a reference, as torch's RUNPATHs are
                        data = data + f"# {made['tinyblas']}\n".encode()
                    target = out / "lib" / "python3.11" / "site-packages" / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
            made[name] = store.add_path(name + "-1.0", fill, references_candidates=list(made.values()))
        closure = sorted(store.closure(made.values()))
    return store_dir, closure, wheels


# -- the full closure ------------------------------------------------------------------------------------


def full_closure(store_dir: Path, attrs: list[str], tops: list[str] | None = None,
                 wheel_dir: Path | None = None) -> tuple[list[str], list[Path], Path | None]:
    """(closure of `attrs` in `store_dir`, the wheels its build used, a directory holding the fixed-output ones).

    With `tops` (store paths), their closure instead: no evaluation, so a store built before a change to
    the packages' derivations (another store path for torch) can still be measured. With `wheel_dir`, uv's
    wheels are every ``*.whl`` there (no mirror made): for a store that was substituted, not built, so
    that it has no build logs to name them (the lent GPU machine: bench/device/pack_ml_cache.py carries
    the wheels the build here used)."""
    import cudapkgs
    from bench_torch import used_wheels
    from cudapkgs.store.store import Store

    if tops:
        outs = [str(store_dir / os.path.basename(top.rstrip("/"))) for top in tops]
    else:
        config = {"allowUnfree": True, "fetchers": ["wheels"], "storeDir": str(store_dir), "prebuiltWheels": ["nccl", "libnvshmem"]}
        pkgs = cudapkgs.import_pkgs(config=config)
        outs = []
        for attr in attrs:
            value = pkgs
            for part in attr.split("."):
                value = value[part]
            outs.append(value.outPath)
    with Store.open(store_dir) as store:
        missing = [p for p in outs if not store.is_valid(p)]
        if missing:
            raise SystemExit(f"{missing[0]} is not valid in {store_dir}: build it there first "
                             f"(cudapkgs build --no-link -j auto --set storeDir={store_dir} "
                             + " ".join(f"--set '{s}'" for s in SETS) + " " + " ".join(attrs) + ")")
        closure = sorted(store.closure(outs))
    if wheel_dir is not None:
        wheels = sorted(p for p in wheel_dir.iterdir() if p.name.endswith(".whl") and p.is_file() and not p.is_symlink())
        if not wheels:
            raise SystemExit(f"no wheels in {wheel_dir}")
        return closure, wheels, None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudapkgs" / "wheels"
    nvidia, fixed = used_wheels(store_dir, cache)
    mirror = Path(tempfile.mkdtemp(prefix="bench-subst-wheels-", dir=store_dir.parent))
    for wheel in fixed:  # <hash>-name.whl -> name.whl
        shutil.copyfile(wheel, mirror / wheel.name[33:])
    return closure, nvidia + sorted(mirror.iterdir()), mirror


def store_python(store_dir: Path, closure: list[str]) -> tuple[str, str]:
    """(the closure's python3 interpreter, a PYTHONPATH of every site-packages of the closure) for `--first-use`."""
    python = next((p for p in closure if os.path.basename(p)[33:].startswith("python3-")), None)
    if python is None:
        raise SystemExit("--first-use: no python3 in the closure")
    sites = sorted(str(site) for p in closure for site in Path(p).glob("lib/python3*/site-packages"))
    return str(Path(python) / "bin" / "python3"), os.pathsep.join(sites)


# -- the rounds ------------------------------------------------------------------------------------------


def read_once(directory: Path) -> None:
    """Read every file under `directory` once, so that it is in the page cache.

    `copy --to` writes a big NAR's compressed file with O_DIRECT (store/direct_writes.py), so the cache is
    no longer in the page cache after the setup, as it was when it was written buffered: the first row to
    read it would read it from the disk, into memory the guest had given back (the thirteenth session's
    10x page faults, in `_copy_to_iter` now), a cost the earlier sessions' setup paid untimed. Read here,
    every file:// row of every round reads the cache from memory, as before.
    """
    for root, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass


def lo_sizes() -> str:
    """`lo`'s GSO/GRO sizes in this network namespace (bench/big_tcp_lo.py), or "" where they cannot be read."""
    try:
        from big_tcp_lo import sizes

        return " ".join(f"{k}={v}" for k, v in sorted(sizes().items()))
    except (OSError, ImportError, ValueError):
        return ""


def warm(url: str, closure: list[str]) -> None:
    """Ask `url` for every narinfo of `closure`, two at a time: a zstd serve compresses each NAR then (and keeps it)."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(path: str) -> None:
        name = os.path.basename(path)[:32]
        with urllib.request.urlopen(f"{url}/{name}.narinfo", timeout=3600) as r:
            text = r.read().decode()
        if "Compression: zstd" not in text:
            raise SystemExit(f"{url} does not serve {path} compressed:\n{text}")

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(ask, closure))


def bench(store_dir: Path, closure: list[str], wheels: list[Path], work: Path, runs: int, peer_src: Path | None,
          jobs: int | None = None, settle_s: float = 0.0, http_plain: bool = False, buffered_row: bool = False,
          first_use: str | None = None, hot_sources: bool = False, serve_level: int | None = None,
          http_only: bool = False) -> dict:
    uv = uv_binary()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "CUDAPKGS_STORE")}
    src = REPO / "src"
    key = work / "secret.key"
    _, _, out = timed(cudapkgs(src, "key", "generate", "--name", "bench-subst-1", "--out", str(key)), env)
    public = next(line.strip() for line in out.splitlines() if line.strip().startswith("bench-subst-1:"))
    cache = work / "cache"
    setup: dict[str, tuple[float, float]] = {}
    if not http_only:  # (--http-only: no file:// row, so no file:// cache: 2.7 GiB less disk for the ML closure)
        wall, cpu, _ = timed(cudapkgs(src, "copy", "--to", f"file://{cache}", "--sign-key", str(key), "--store",
                                      str(store_dir), *closure), env)
        setup["cudapkgs copy --to file:// (zstd, signed)"] = (wall, cpu)
        start = time.perf_counter()
        read_once(cache)
        setup["the file:// cache read once (into the page cache, as a buffered copy --to left it before direct writes)"] = (
            time.perf_counter() - start, float("nan"))
    else:
        cache.mkdir()
    nar_bytes = cache_bytes = 0
    from cudapkgs.store.store import Store

    with Store.open(store_dir) as store:
        nar_bytes = sum(store.query(p).nar_size for p in closure)
    cache_bytes = du(cache)
    namespaces = can_unshare()
    rows: dict[str, dict] = {}

    def record(name: str, wall: float, cpu: float, system: float, jobs: str = "") -> None:
        row = rows.setdefault(name, {"wall": [], "cpu": [], "system": [], "jobs": set()})
        row["wall"].append(wall)
        row["cpu"].append(cpu)
        row["system"].append(system)
        sys.stderr.write(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU ({system:.2f} system), load {os.getloadavg()[0]:.2f}\n")
        if jobs:
            row["jobs"].add(jobs)

    trees: list[Path] = []  # this round's outputs, deleted when it ends (see settle())
    resident: dict[str, list[float]] = {}  # row -> share of its source (cache / serve's kept NARs) in the page cache
    server_cpu: dict[str, list[float]] = {}  # HTTP row -> the server's CPU seconds during it (not in the row's CPU)

    first: dict[str, dict] = {}  # row -> the first use's {"wall": [...], "cpu": [...]}

    def first_import(name: str, command: list[str], row_env: dict[str, str]) -> None:
        """`--first-use`: time the row's first `import` of the module right after it (page cache as the row left it)."""
        wall, cpu, system, _ = timed_usage(command, row_env)
        got = first.setdefault(name, {"wall": [], "cpu": [], "system": []})
        got["wall"].append(wall)
        got["cpu"].append(cpu)
        got["system"].append(system)
        sys.stderr.write(f"first use after {name}: {wall:.2f} s wall, {cpu:.2f} s CPU ({system:.2f} system)\n")

    def substitute(name: str, url: str, code: Path, row_env: dict[str, str] | None = None) -> None:
        row_env = row_env or env
        source = files_under(cache if url.startswith("file://") else serve_dirs.get(url, work / "serve-cache"))
        if hot_sources:
            read_files(source)  # untimed: the row reads its source from memory, whatever the rows before evicted
        share = resident_share(source)  # untimed: mincore only
        if share is not None:
            resident.setdefault(name, []).append(share)
        server = SERVERS.get(url)
        served = process_cpu(server) if server else 0.0
        empty = work / f"store-{len(trees)}"
        trees.append(empty)
        remove(empty)
        empty.mkdir()
        command = cudapkgs(code, "copy", "--from", url, "--trusted-public-key", public, "--store", str(store_dir),
                           *(["-j", str(jobs)] if jobs else []), *closure)
        if namespaces:
            wall, cpu, system, out = timed_usage(in_empty_store(command, store_dir, empty), row_env)
        else:
            aside = store_dir.with_name(store_dir.name + ".aside")
            os.rename(store_dir, aside)
            try:
                wall, cpu, system, out = timed_usage(command, row_env)
            finally:
                remove(store_dir)
                os.rename(aside, store_dir)
        # What was substituted is checked, not assumed: every path of the closure valid in the new store.
        checked = empty if namespaces else None
        if checked is not None:
            got = {p.name for p in checked.iterdir() if not p.name.startswith(".")}
            want = {os.path.basename(p) for p in closure}
            if not want <= got:
                raise SystemExit(f"{name}: {sorted(want - got)[:3]} missing after the copy:\n{out[-2000:]}")
        record(name, wall, cpu, system)
        if server:
            server_cpu.setdefault(name, []).append(process_cpu(server) - served)
            sys.stderr.write(f"  the server's CPU during it: {server_cpu[name][-1]:.2f} s\n")
        if share is not None:
            sys.stderr.write(f"  its source in the page cache before it: {100 * share:.1f} %\n")
        if first_use and namespaces:
            python, path = store_python(store_dir, closure)
            first_import(name, in_empty_store([python, "-c", f"import {first_use}"], store_dir, empty),
                         {**env, "PYTHONPATH": path, "PYTHONNOUSERSITE": "1"})

    def uv_install(i: int) -> None:
        venv, uv_cache = work / f"venv-{len(trees)}", work / f"uv-cache-{len(trees)}"
        trees.extend((venv, uv_cache))
        uv_env = {**env, "UV_CACHE_DIR": str(uv_cache), "VIRTUAL_ENV": str(venv)}
        subprocess.run([uv, "venv", "-q", str(venv)], env=uv_env, check=True)
        if hot_sources:
            read_files(list(map(str, wheels)))
        share = resident_share(list(map(str, wheels)))
        if share is not None:
            resident.setdefault(UV, []).append(share)
            sys.stderr.write(f"  its wheels in the page cache before it: {100 * share:.1f} %\n")
        wall, cpu, system, _ = timed_usage([uv, "pip", "install", "-q", "--offline", "--no-deps", "--python",
                                            str(venv / "bin" / "python"), *map(str, wheels)], uv_env)
        record(UV, wall, cpu, system)
        if first_use:
            first_import(UV, [str(venv / "bin" / "python"), "-c", f"import {first_use}"], {**env, "PYTHONNOUSERSITE": "1"})

    def settle() -> None:
        """Delete the round's trees, sync, and wait out ext4's recently-deleted window (module docstring)."""
        for tree in trees:
            remove(tree)
        trees.clear()
        os.sync()
        if settle_s:
            time.sleep(settle_s)

    spread = spread_directories(work)
    load_before = os.getloadavg()
    result_serve_bytes = 0
    serve_dirs: dict[str, Path] = {}  # zstd serve's URL -> its kept NARs
    level_bytes = 0
    with contextlib.ExitStack() as stack:
        url = plain_url = level_url = None
        if namespaces:
            serve_cache = work / "serve-cache"
            url = stack.enter_context(serving(src, store_dir, key, env, cache_dir=serve_cache,
                                          cache_bytes=nar_bytes + (64 << 20)))  # all of it: nothing evicted
            start = time.perf_counter()
            warm(url, closure)
            setup["cudapkgs serve --compression zstd, warmed (every narinfo asked: each NAR compressed once; "
                  "the server's CPU not counted)"] = (time.perf_counter() - start, float("nan"))
            result_serve_bytes = du(serve_cache)
            serve_dirs[url] = serve_cache
            if serve_level is not None:
                level_cache = work / f"serve-cache-{serve_level}"
                level_url = stack.enter_context(serving(src, store_dir, key, env, cache_dir=level_cache,
                                                        cache_bytes=nar_bytes + (64 << 20), level=serve_level))
                serve_dirs[level_url] = level_cache
                start = time.perf_counter()
                served = process_cpu(SERVERS[level_url])
                warm(level_url, closure)
                setup[f"cudapkgs serve --compression zstd --compression-level {serve_level}, warmed (its CPU: "
                      f"{process_cpu(SERVERS[level_url]) - served:.1f} s, compressing the closure once)"] = (
                    time.perf_counter() - start, float("nan"))
                level_bytes = du(level_cache)
            if http_plain:
                plain_url = stack.enter_context(serving(src, store_dir, key, env))
        steps = [] if http_only else [lambda i: substitute(FILE, f"file://{cache}", src)]
        if buffered_row and not http_only:  # the same row writing every file through the page cache, as before direct writes
            steps.append(lambda i: substitute(FILE + BUFFERED, f"file://{cache}", src, {**env, "CUDAPKGS_DIRECT_WRITES": "off"}))
        if url:
            steps.append(lambda i: substitute(HTTP, url, src))
        if level_url:
            steps.append(lambda i: substitute(HTTP_LEVEL.format(serve_level), level_url, src))
        if plain_url:
            steps.append(lambda i: substitute(HTTP_PLAIN, plain_url, src))
        steps.append(uv_install)
        if peer_src is not None:
            if not http_only:
                steps.append(lambda i: substitute(FILE + ", peer", f"file://{cache}", peer_src))
            if url:
                steps.append(lambda i: substitute(HTTP + ", peer", url, peer_src))
        for i in range(runs):
            # Each round starts one row later (the rows rotate), and before every row the write-back of the
            # one before it is waited for, untimed (sync): a row that writes 5 GiB into the page cache
            # otherwise slows the row after it, always the same one, by the write-back it throttles on.
            for k in range(len(steps)):
                os.sync()
                steps[(i + k) % len(steps)](i)
            if i + 1 < runs:
                settle()
        for tree in trees:
            remove(tree)
    load_after = os.getloadavg()
    return {"rows": rows, "setup": setup, "load": (load_before, load_after), "nar_bytes": nar_bytes, "cache_bytes": cache_bytes,
            "serve_bytes": result_serve_bytes, "level_bytes": level_bytes, "serve_level": serve_level, "lo": lo_sizes(),
            "wheel_bytes": sum(w.stat().st_size for w in wheels), "wheels": len(wheels), "paths": len(closure),
            "namespaces": namespaces, "jobs": jobs, "resident": resident, "server_cpu": server_cpu, "hot_sources": hot_sources, "spread": spread, "settle": settle_s, "first_use": first,
            "first_module": first_use}


def report(result: dict, runs: int) -> None:
    before, after = result["load"]
    jobs = f"-j {result['jobs']}" if result.get("jobs") else "copy's default -j (file://: 1 when the CPUs are contended)"
    print(f"copy --from jobs: {jobs}")
    if result.get("lo"):
        print(f"lo in this network namespace: {result['lo']}")
    if result.get("serve_level") is not None:
        print(f"zstd NARs kept by the serve at --compression-level {result['serve_level']}: {result['level_bytes'] / 2**20:.1f} MiB")
    print(f"closure: {result['paths']} store paths, NAR {result['nar_bytes'] / 2**20:.1f} MiB, zstd cache "
          f"{result['cache_bytes'] / 2**20:.1f} MiB, serve's kept zstd NARs {result.get('serve_bytes', 0) / 2**20:.1f} MiB; wheels: {result['wheels']} files, {result['wheel_bytes'] / 2**20:.1f} MiB; "
          f"runs: {runs}; {os.cpu_count()} CPUs; load average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
          f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}\n")
    rows = result["rows"]
    wall = {k: statistics.median(v["wall"]) for k, v in rows.items()}
    cpu = {k: statistics.median(v["cpu"]) for k, v in rows.items()}
    system = {k: statistics.median(v["system"]) for k, v in rows.items()}
    print("| what | median wall s | min–max s | wall × uv | CPU s | CPU × uv | of it system s (min–max) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {wall[name]:.2f} | {min(row['wall']):.2f}–{max(row['wall']):.2f} | {wall[name] / wall[UV]:.2f} "
              f"| {cpu[name]:.2f} | {cpu[name] / max(cpu[UV], 1e-9):.2f} "
              f"| {system[name]:.2f} ({min(row['system']):.2f}–{max(row['system']):.2f}) |")
    if result.get("first_use"):
        print(f"\nfirst use: `import {result['first_module']}` right after each row, in what it wrote (the page cache as "
              "the row left it, not dropped: files written directly are read from the disk, files written buffered "
              "mostly from memory)\n")
        print("| after | median wall s | min–max s | CPU s | of it system s |")
        print("|---|---:|---:|---:|---:|")
        for name, row in result["first_use"].items():
            print(f"| {name} | {statistics.median(row['wall']):.2f} | {min(row['wall']):.2f}–{max(row['wall']):.2f} "
                  f"| {statistics.median(row['cpu']):.2f} | {statistics.median(row['system']):.2f} |")
    if result.get("hot_sources"):
        print("\nevery row's source read once, untimed, right before the row (--hot-sources)")
    for name, shares in result.get("resident", {}).items():
        print(f"\n{name}: its source in the page cache before the row (fincore): median {100 * statistics.median(shares):.1f} %, "
              f"min {100 * min(shares):.1f} %")
    for name, seconds in result.get("server_cpu", {}).items():
        print(f"\n{name}: the server's CPU during the row (not in its CPU column; on the same cores): median "
              f"{statistics.median(seconds):.2f} s ({min(seconds):.2f}–{max(seconds):.2f})")
    print(f"\nrows' trees deleted at each round's end, then sync and {result.get('settle', 0):g} s of waiting before the next "
          "round (ext4's recently-deleted inodes: see the module docstring)")
    print(f"\nwork directory marked as a top of directory hierarchies (chattr +T, rows' trees in fresh block groups): "
          f"{'yes' if result.get('spread') else 'no (not ext4, or chattr missing): rows may pay for the last row deletions'}")
    if not result["namespaces"]:
        print("\n(no mount namespace here: the HTTP row is left out; the file:// row moved the source store aside)")
    print("\nsetup (once, not in the table):")
    for name, (wall_s, cpu_s) in result["setup"].items():
        print(f"- {name}: {wall_s:.2f} s wall" + ("" if cpu_s != cpu_s else f", {cpu_s:.2f} s CPU"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--runs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="a synthetic closure, one round: the CI smoke test")
    parser.add_argument("--store", help="full mode: the private store holding the built closure")
    parser.add_argument("--attr", action="append", help=f"full mode: attributes whose closure is copied (default {ATTRS})")
    parser.add_argument("--top", action="append", help="full mode: a store path whose closure is copied, instead of "
                        "evaluating --attr (repeatable; e.g. a store built before the derivations changed)")
    parser.add_argument("--wheel-dir", help="full mode: uv's wheels are the *.whl here, not those the store's build "
                        "logs name (a substituted store has none)")
    parser.add_argument("--peer-src", help="the src/ of another checkout: its substitution rows too, same rounds")
    parser.add_argument("--http-uncompressed", action="store_true",
                        help="also the row of a second serve with NARs uncompressed (its default)")
    parser.add_argument("--direct-writes-off", action="store_true",
                        help="also the file:// row with CUDAPKGS_DIRECT_WRITES=off (every file through the page cache)")
    parser.add_argument("--first-use", metavar="MODULE",
                        help="after each row, time `python -c 'import MODULE'` in what the row wrote "
                             "(full mode: e.g. torch)")
    parser.add_argument("--hot-sources", action="store_true",
                        help="read every row's source (the file:// cache, serve's kept NARs, uv's wheels) once, untimed, "
                             "right before the row: each row reads from memory whatever the rows before it evicted")
    parser.add_argument("--serve-level", type=int, metavar="N",
                        help="also the row of a second zstd serve at --compression-level N (its warm-up compresses the "
                             "closure at that level once, untimed, its CPU printed)")
    parser.add_argument("--http-only", action="store_true",
                        help="leave out the file:// rows and cache (the HTTP rows and uv's only: less disk)")
    parser.add_argument("-j", "--jobs", type=int, help="copy --from -j N in every substitution row (default: the command's)")
    parser.add_argument("--settle", type=float, help="seconds to wait after each round's deletions (default: 61 in full mode, "
                        "0 in tiny mode): ext4 without a journal makes inode creation slow for 60 s after deletions")
    args = parser.parse_args(argv)
    peer = Path(args.peer_src).resolve() if args.peer_src else None
    if args.tiny:
        work = Path(tempfile.mkdtemp(prefix="bench-subst-tiny-"))
        try:
            store_dir, closure, wheels = tiny_closure(work)
            result = bench(store_dir, closure, wheels, work, 1, peer, args.jobs, args.settle or 0.0, args.http_uncompressed,
                           args.direct_writes_off, hot_sources=args.hot_sources, serve_level=args.serve_level,
                           http_only=args.http_only)
        finally:
            remove(work)
        report(result, 1)
        return 0
    if not args.store:
        parser.error("--store is needed (or --tiny)")
    store_dir = Path(args.store).resolve()
    closure, wheels, mirror = full_closure(store_dir, args.attr or ATTRS, args.top,
                                           Path(args.wheel_dir).resolve() if args.wheel_dir else None)
    work = Path(tempfile.mkdtemp(prefix="bench-subst-", dir=store_dir.parent))
    try:
        result = bench(store_dir, closure, wheels, work, args.runs, peer, args.jobs, 61.0 if args.settle is None else args.settle,
                       args.http_uncompressed, args.direct_writes_off, args.first_use, args.hot_sources,
                       serve_level=args.serve_level, http_only=args.http_only)
    finally:
        remove(work)
        if mirror is not None:
            remove(mirror)
    report(result, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
