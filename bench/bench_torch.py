"""Realising torch's CUDA 13.0 closure from a warm download cache into a fresh store, against `uv pip install --offline`.

Run:  python bench/bench_torch.py [--runs 2]      (needs the wheels once: about 3 GB through pip)
      python bench/bench_torch.py --env ml [--runs 2]           (torch + torchvision + torchaudio + numpy)
      python bench/bench_torch.py --env onnxruntime [--runs 2]  (the onnxruntime closure)
      python bench/bench_torch.py --tiny          (synthetic small wheels: the CI smoke test; needs uv)
      python bench/bench_torch.py --env ml --keep DIR --setup-only, then --env ml --keep DIR --runs 2
                                                  (the setup once, outside a calm window; only the rounds in it)

Full mode.  Setup (not timed): ``cudapkgs build cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch``
(fetchers = ["wheels"], prebuiltWheels = ["nccl", "libnvshmem"]) into the store that every run reuses,
which fills the wheel cache ($XDG_CACHE_HOME/cudapkgs/wheels; pip checks each wheel against the index
or the package's pin once).  The files each build used are read from the build logs: NVIDIA's wheels
and torch's and triton's from the wheel cache, the small pure-Python wheels from their fixed-output
store paths (copied to a source mirror, so later runs need no pip).  The closure's parts that are no
wheel (zlib built from source, rdma-core from Debian packages, the compiler wrapper, the interpreter's
record) are exported once and imported into each fresh store before its timed run.

``--env`` picks what is realised: ``torch`` (the attribute above), ``ml`` and ``onnxruntime`` (the
``withPackages`` environments of bench/ml_env_packages.py: the same set's default interpreter with
torch, torchvision, torchaudio and numpy, or with onnxruntime), each measured the same way.

Each run, alternating: (1) the store emptied and those parts imported (not timed), then
``cudapkgs build --no-link -j auto`` of torch timed as a process: evaluation, every wheel's sha256
checked again while it unpacks, every member against RECORD, outputs split, ELF run paths rewired,
byte code compiled, ``import torch`` checked, NAR hash and reference scan, registration; (2) a fresh
``uv venv`` and ``uv pip install --offline --no-deps`` of the same wheel files with an empty uv cache
(uv unpacks each wheel into its cache, then links it into the venv); (3) the same with
``--compile-bytecode`` (uv compiles no byte code by default; cudapkgs does, as Nixpkgs does: this
row is the same work, and the ratio against it is printed below the table).  Disk: the store without its
download cache (``du``, apparent allocation), the venv alone, and venv + uv's cache (hard links
counted once).  Printed: medians, wall and CPU ratios (CPU: user + system of the process and its
children, from wait4), the load average before and after.

Tiny mode: three synthetic wheels built here (one with an ELF library whose DT_RPATH points into
an ``nvidia/`` tree, as torch's do), rewired to a one-library "set" by the same builder, against uv
installing the same files; one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
ATTR = "cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch"
OFF_ENV = "CUDAPKGS_DIRECT_WRITES"  # store/direct_writes.py: auto (the default), on, off
OFF_ROW_SUFFIX = ", direct writes off"
ENV_FILE = str(REPO / "bench" / "ml_env_packages.py")
# --env NAME: (attributes, package files) of what is realised.
TARGETS = {"torch": ([ATTR], []), "ml": (["bench_ml_env"], [ENV_FILE]),
           "onnxruntime": (["bench_onnxruntime_env"], [ENV_FILE])}
SETS = ["allowUnfree=true", 'fetchers=["wheels"]', 'prebuiltWheels=["nccl","libnvshmem"]']
# What the build logs say about the wheels they used.
_USED = re.compile(r"^(?:fetched wheel (?P<nvidia>\S+\.whl) from .*\((?P<path>/\S+\.whl)|"
                   r"installed (?P<pinned>\S+\.whl):|unpacked (?P<prebuilt>\S+\.whl):)", re.M)


def run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one process; SystemExit with its output if it fails."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            log.seek(0)
            raise SystemExit(f"{' '.join(command[:8])} ... failed ({proc.returncode}):\n"
                             f"{log.read().decode(errors='replace')[-4000:]}")
    _last_sys[0] = usage.ru_stime
    return elapsed, usage.ru_utime + usage.ru_stime


_last_sys = [0.0]  # the system CPU seconds of the last `run` (the kernel's share: page cache, balloon faults)


def du(*paths: Path) -> int:
    """Bytes allocated under `paths` together (du -s -B1 -c: hard links counted once)."""
    existing = [str(p) for p in paths if p.exists()]
    if not existing:
        return 0
    out = subprocess.run(["du", "-s", "-B1", "-c", *existing], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def uv_binary() -> str:
    found = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    if found is None:
        raise SystemExit("uv is needed for the peer row: pip install uv")
    return found


def make_writable(root: Path) -> None:
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o755)


def remove(path: Path) -> None:
    if path.exists():
        make_writable(path)
        shutil.rmtree(path)


def cudapkgs_build(store: Path, attrs: list[str], *extra: str, files: list[str] = ()) -> list[str]:
    command = [sys.executable, "-m", "cudapkgs", "build", "--no-link", "-j", "auto", "--set", f"storeDir={store}"]
    for s in SETS:
        command += ["--set", s]
    for f in files:
        command += ["-f", f]
    return [*command, *extra, *attrs]


def used_wheels(store: Path, cache: Path) -> tuple[list[Path], list[Path]]:
    """(wheels from the wheel cache, fixed-output wheels in the store) the setup build's logs name."""
    cached, fixed = set(), set()
    for log in (store / ".logs").glob("*.log"):
        for match in _USED.finditer(log.read_text(errors="replace")):
            if match["path"]:
                cached.add(Path(match["path"]))
            else:
                cached.add(cache / (match["pinned"] or match["prebuilt"]))
    for entry in store.iterdir():
        if entry.is_file() and entry.name.endswith(".whl"):
            fixed.add(entry)
    missing = [p for p in cached if not p.is_file()]
    if missing:
        raise SystemExit(f"the logs name wheels the cache lacks: {missing[:3]}")
    return sorted(cached), sorted(fixed)


def full(args: argparse.Namespace, uv: str) -> dict:
    """Alternating rounds for `args.env` (a TARGETS key): the cudapkgs build into a fresh store, then each PEERS row.

    Every round's store and venvs are deleted before the next (only one of them on disk at a time);
    returns {"rows": {label: {"wall": [s], "cpu": [s], "disk": {what: bytes}}}, "wheels": n,
    "bytes": total wheel bytes, "load": (before, after)}.  SystemExit when a build or uv fails.
    """
    attrs, files = TARGETS[args.env]
    from cudapkgs.store.store import Store

    kept = Path(args.keep).resolve() if args.keep else None
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=True)
    scratch = kept or Path(tempfile.mkdtemp(prefix=f"bench-{args.env}-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudapkgs" / "wheels"
    store = scratch / "store"
    mirror = scratch / "mirror"
    listed = scratch / "wheels.json"
    try:
        setup = json.loads(listed.read_text()) if listed.is_file() else {}
        if setup.get("env") == args.env and (scratch / "non-wheel.tar").is_file():  # --keep: the setup is done
            wheels = [Path(w) for w in setup["wheels"]]
        else:
            wheels = _setup(store, attrs, files, env, cache, mirror, scratch / "non-wheel.tar")
            listed.write_text(json.dumps({"env": args.env, "wheels": [str(w) for w in wheels]}))
        if args.setup_only:
            return {}
        mirror_set = ["--set", f'sourceMirrors=["{mirror}"]']
        rows: dict[str, dict[str, list[float]]] = {}

        def record(name: str, wall: float, cpu: float, disk: dict[str, int]) -> None:
            row = rows.setdefault(name, {"wall": [], "cpu": [], "sys": []})
            row["wall"].append(wall)
            row["cpu"].append(cpu)
            row["sys"].append(_last_sys[0])
            row.setdefault("disk", disk)

        load_before = os.getloadavg()
        for i in range(args.runs):
            # With --direct-off, a second build with direct writes off, before or after the first in turn.
            builds = [("", env), (OFF_ROW_SUFFIX, {**env, OFF_ENV: "off"})] if args.direct_off else [("", env)]
            for suffix, build_env in (builds if i % 2 == 0 else builds[::-1]):
                remove(store)
                with Store.open(store) as s:
                    from cudapkgs.store.transfer import import_closure

                    import_closure(s, scratch / "non-wheel.tar")
                wall, cpu = run(cudapkgs_build(store, attrs, *mirror_set, files=files), build_env)
                record("cudapkgs build -j auto, fresh store, warm wheel cache" + suffix, wall, cpu,
                       {"store": du(store) - du(store / ".cache")})
                remove(store)  # the disk it took is recorded; the venvs need the room
            for name, flags in PEERS.items():
                venv, uv_cache = scratch / f"venv-{i}", scratch / f"uv-cache-{i}"
                uv_env = {**env, "UV_CACHE_DIR": str(uv_cache), "VIRTUAL_ENV": str(venv)}
                subprocess.run([uv, "venv", "-q", str(venv)], env=uv_env, check=True)
                wall, cpu = run([uv, "pip", "install", "-q", "--offline", "--no-deps", *flags, "--python",
                                 str(venv / "bin" / "python"), *map(str, wheels)], uv_env)
                record(name, wall, cpu, {"venv": du(venv), "venv+cache": du(venv, uv_cache)})
                remove(venv)
                remove(uv_cache)
        load_after = os.getloadavg()
        return {"rows": rows, "wheels": len(wheels), "bytes": sum(w.stat().st_size for w in wheels),
                "load": (load_before, load_after)}
    finally:
        if kept is None:
            remove(scratch)
        else:
            remove(store)


def _setup(store: Path, attrs: list[str], files: list[str], env: dict[str, str], cache: Path, mirror: Path,
           exported: Path) -> list[Path]:
    """One build into `store` (fills the wheel cache), the small wheels copied to `mirror`, the
    closure's non-wheel parts exported to `exported`; returns the wheel files uv is given."""
    import cudapkgs
    from cudapkgs.store.store import Store
    from cudapkgs.store.transfer import export_closure

    remove(store)
    run(cudapkgs_build(store, attrs, files=files), env)  # setup: fills the wheel cache
    nvidia, fixed = used_wheels(store, cache)
    remove(mirror)
    mirror.mkdir()
    for wheel in fixed:  # <hash>-name.whl -> name.whl, as fetchPypi asks a source mirror for it
        shutil.copyfile(wheel, mirror / wheel.name[33:])
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"], "storeDir": str(store),
                                        "prebuiltWheels": ["nccl", "libnvshmem"]})
    # Every output: a derivation is built unless all its outputs are valid (zlib's dev and
    # static outputs left out made every timed run compile zlib).
    non_wheel = [p for pkg in (pkgs.zlib, pkgs["rdma-core"], pkgs.stdenv.cc, pkgs.python3)
                 for p in pkg.derivation.outputs.values()]
    with Store.open(store) as s:
        export_closure(s, [p for p in non_wheel if s.is_valid(p)], exported)
    return nvidia + sorted(mirror.iterdir())


# The peers, each run after cudapkgs in every round. uv compiles no byte code by default; cudapkgs
# does (as Nixpkgs' Python builders do), so the second row is the same work.
PEER = "uv pip install --offline --no-deps, uv cache empty"
PEER_PYC = "uv pip install --offline --no-deps --compile-bytecode, uv cache empty"
PEERS = {PEER: [], PEER_PYC: ["--compile-bytecode"]}

TINY_FILE = '''
"""bench_torch --tiny: three synthetic wheels rewired to a one-library "set"."""
import json, os
from cudapkgs.builders.rewired_wheel import rewired_wheel
from cudapkgs.stdenv import mk_derivation

SPEC = json.loads(os.environ["BENCH_TINY"])


def tinylib(config):
    return mk_derivation(config, {"pname": "tinylib", "version": "1", "stdenvCc": None, "src": SPEC["lib"],
                                  "dontConfigure": True, "dontBuild": True, "installPhase": 'cp -r lib "$out/"'})


def tinywheels(config, python3, tinylib):
    from cudapkgs.lib.fixpoint import AttrSet
    return AttrSet({w["name"]: rewired_wheel(config, python3, {
        "pname": w["name"], "version": "1.0", "wheel": {"file": w["file"], "sha256": w["sha256"]},
        "buildInputs": [tinylib], "pythonRemoveDeps": w["remove"], "pythonImportsCheck": [w["name"]],
    }) for w in SPEC["wheels"]}, name="tinywheels")


def tinyenv(config, python3, tinywheels):
    """The three rewired wheels in one interpreter environment, as --env ml's withPackages."""
    from cudapkgs.builders.python import with_packages
    return with_packages(config, python3, [tinywheels[w["name"]] for w in SPEC["wheels"]])
'''


def tiny(uv: str) -> dict:
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "tests" / "builders"))
    import hashlib

    from elf_builders import BAR_C, shared_lib
    from test_rewired_wheel import demo_files, make_wheel

    scratch = Path(tempfile.mkdtemp(prefix="bench-torch-tiny-"))
    try:
        cache_home = scratch / "cache"
        cache = cache_home / "cudapkgs" / "wheels"
        cache.mkdir(parents=True)
        python = f"cp{sys.version_info.major}{sys.version_info.minor}"
        host = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                              capture_output=True, text=True).stdout.strip() or python
        specs = []
        for name in ("demo", "demotwo", "demothree"):
            files = {k.replace("demo", name, 1): v for k, v in demo_files(scratch / f"src-{name}").items()}
            files = {k: v for k, v in files.items() if "/bin/" not in k}
            if name != "demo":
                files = {k: v for k, v in files.items() if not k.endswith(".so")}
                files[f"{name}/__init__.py"] = (b"VALUE = 1\n", 0o644)
            files[f"{name}-1.0.dist-info/METADATA"] = (
                f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: nvidia-cublas==13.1.1.3\n".encode(), 0o644)
            wheel = make_wheel(scratch / f"{name}-1.0-{host}-{host}-linux_x86_64.whl",
                               {k.replace("demo-1.0.dist-info", f"{name}-1.0.dist-info"): v for k, v in files.items()},
                               dist_info=f"{name}-1.0.dist-info")
            shutil.copy(wheel, cache / wheel.name)
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            (cache / (wheel.name + ".sha256")).write_text(digest + "\n")
            specs.append({"name": name, "file": wheel.name, "sha256": digest, "remove": ["nvidia-*"]})
        lib = scratch / "lib-src" / "lib"
        shared_lib(lib / "libbar.so.1", BAR_C, "libbar.so.1")
        package_file = scratch / "tiny.py"
        package_file.write_text(TINY_FILE)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
               "XDG_CACHE_HOME": str(cache_home),
               "BENCH_TINY": json.dumps({"lib": str(lib.parent), "wheels": specs})}
        store = scratch / "store"
        attrs = ["tinyenv"]  # the environment, as --env ml and --env onnxruntime realise theirs
        wall, cpu = run(cudapkgs_build(store, attrs, files=[str(package_file)]), env)
        env_paths = [p for p in store.iterdir() if "-python3-env-" in p.name and p.is_dir()]
        if len(env_paths) != 1 or not (env_paths[0] / "bin" / "python3").exists():
            raise SystemExit(f"the tiny environment was not realised: {sorted(p.name for p in store.iterdir())[:20]}")
        probe = subprocess.run([str(env_paths[0] / "bin" / "python3"), "-c",
                                "import " + ", ".join(s["name"] for s in specs)], capture_output=True, text=True)
        if probe.returncode != 0:
            raise SystemExit(f"the tiny environment does not import its wheels: {probe.stderr[-2000:]}")
        rows = {"cudapkgs build -j auto, fresh store, warm wheel cache": {"wall": [wall], "cpu": [cpu], "sys": [_last_sys[0]],
                                                                           "disk": {"store": du(store) - du(store / ".cache")}}}
        wheels = [cache / s["file"] for s in specs]
        for name, flags in PEERS.items():
            venv, uv_cache = scratch / f"venv{len(rows)}", scratch / f"uv-cache{len(rows)}"
            uv_env = {**env, "UV_CACHE_DIR": str(uv_cache), "VIRTUAL_ENV": str(venv)}
            subprocess.run([uv, "venv", "-q", "--python", "/usr/bin/python3", str(venv)], env=uv_env, check=True)
            wall, cpu = run([uv, "pip", "install", "-q", "--offline", "--no-deps", *flags, "--python",
                             str(venv / "bin" / "python"), *map(str, wheels)], uv_env)
            rows[name] = {"wall": [wall], "cpu": [cpu], "sys": [_last_sys[0]], "disk": {"venv": du(venv), "venv+cache": du(venv, uv_cache)}}
        return {"rows": rows, "wheels": len(wheels), "bytes": sum(w.stat().st_size for w in wheels),
                "load": (os.getloadavg(), os.getloadavg())}
    finally:
        remove(scratch)


def report(result: dict, runs: int, what: str = ATTR) -> None:
    rows = result["rows"]
    before, after = result["load"]
    print(f"realised: {what}")
    print(f"wheels: {result['bytes'] / 2**20:.1f} MiB in {result['wheels']} files; runs: {runs}; {os.cpu_count()} CPUs; "
          f"load average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}\n")
    peer = PEER
    wall = {k: statistics.median(v["wall"]) for k, v in rows.items()}
    cpu = {k: statistics.median(v["cpu"]) for k, v in rows.items()}
    print("| what | median wall s | min–max s | × uv | CPU s | CPU × uv | of it system s | disk |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, row in rows.items():
        disk = ", ".join(f"{k} {v / 2**30:.2f} GiB" if v > 2**28 else f"{k} {v / 2**20:.1f} MiB" for k, v in row["disk"].items())
        system = f"{statistics.median(row['sys']):.2f}" if row.get("sys") else ""
        print(f"| {name} | {wall[name]:.2f} | {min(row['wall']):.2f}–{max(row['wall']):.2f} | {wall[name] / wall[peer]:.2f} "
              f"| {cpu[name]:.2f} | {cpu[name] / max(cpu[peer], 1e-9):.2f} | {system} | {disk} |")
    ours = next(k for k in rows if k.startswith("cudapkgs") and not k.endswith(OFF_ROW_SUFFIX))
    print(f"\ncudapkgs against uv --compile-bytecode (the same byte code compiled): wall "
          f"{wall[ours] / wall[PEER_PYC]:.2f}x, CPU {cpu[ours] / max(cpu[PEER_PYC], 1e-9):.2f}x")
    if ours + OFF_ROW_SUFFIX in rows:
        off = ours + OFF_ROW_SUFFIX
        print(f"with direct writes off: wall {wall[off] / wall[PEER_PYC]:.2f}x, CPU {cpu[off] / max(cpu[PEER_PYC], 1e-9):.2f}x; "
              f"on ({os.environ.get(OFF_ENV) or 'auto'}) / off: wall {wall[ours] / wall[off]:.2f}x, CPU {cpu[ours] / cpu[off]:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--runs", type=int, default=2)
    parser.add_argument("--env", choices=sorted(TARGETS), default="torch",
                        help="what is realised and installed: torch alone, the ML environment, onnxruntime's closure")
    parser.add_argument("--tiny", action="store_true", help="synthetic small wheels, one run: the CI smoke test")
    parser.add_argument("--keep", metavar="DIR", help="the scratch directory, kept: its setup (build, small wheels, "
                        "exported non-wheel parts) is done once and reused by later runs with the same DIR")
    parser.add_argument("--setup-only", action="store_true", help="with --keep: do the setup, time nothing")
    parser.add_argument("--direct-off", action="store_true", help=f"a row more each round: the build with "
                        f"{OFF_ENV}=off (the other row as the environment says: auto unless set)")
    args = parser.parse_args(argv)
    uv = uv_binary()
    if args.setup_only and not args.keep:
        parser.error("--setup-only needs --keep DIR")
    result = tiny(uv) if args.tiny else full(args, uv)
    if not result:
        print(f"set up in {args.keep}")
        return 0
    report(result, 1 if args.tiny else args.runs,
           "tinyenv (withPackages of the three wheels)" if args.tiny else " ".join(TARGETS[args.env][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
