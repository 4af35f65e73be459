"""Pack the ML environment as a teammate gets it (a signed zstd binary cache) for the lent GPU machine, in pieces.

usage: python bench/device/pack_ml_cache.py --store DIR [--repo /work/main] [--name mlc] [--piece-mib 50]
           [--bench-wheels NAME2] [--window N]

Realises (or finds) build_ml_env.py's environment and torch's testers (Nixpkgs' ``passthru.tests``
``tester-cudaAvailable`` and ``tester-compileCuda``: writeGpuTestPython programs, run where the GPU is) in
the store DIR, makes an ed25519 signing key (``cudapkgs key generate``) and ``cudapkgs copy --to
file://WORK/cache --sign-key`` their closures (zstd, signed: issue 34's team cache), then cuts one
uncompressed tar of

* ``cache/`` (every NAR and signed narinfo), ``public.key``, ``roots.txt`` (env, testers, torch, numpy);
* ``cpython-3.12.1.tar.gz`` (pyenv's tree the env's ``bin/python3`` links to; pack_onnx.py's filter) and
  ``wheels/`` (cudapkgs' own dependencies for the device's Python 3.12: pack_closure.DEVICE_WHEELS)

into pieces of ``--piece-mib`` MiB under ``<repo>/.carry/NAME/`` with a ``manifest.json`` that
receive_piece.sh reads (each piece's size and sha256, the whole tar's sha256, the roots, the store directory).
With ``--bench-wheels NAME2`` a second piece set NAME2 holds what ``bench_substitute_ml.py --wheel-dir``
needs there: the wheels the store's build logs name for the closure of torch and numpy (NVIDIA's, torch's,
triton's from the wheel cache, copied, never changed; the fixed-output ones from the store) and a ``uv``
binary. ``--window N``: at most N pieces on disk at once (the pieces are sent and deleted meanwhile).

On the device (``carry`` = the piece and the manifest): ``bash bench/device/receive_piece.sh .carry/NAME/pNNNN``
for every piece, then ``bash bench/device/substitute_ml_env.sh NAME [NAME2]``.
Exits 1 naming what is missing (a package that failed to build: its message).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "bench"))

from build_ml_env import PACKAGES  # noqa: E402
from pack_closure import DEVICE_WHEELS, _StreamPieces  # noqa: E402
from pack_onnx import PYENV, _keep  # noqa: E402

TESTERS = ("tester-cudaAvailable", "tester-compileCuda")


def cudapkgs_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudapkgs", *args]


def realise_all(store_dir: str, python: str, capability: str) -> dict[str, str]:
    """{"env", "torch", "numpy", "tester-…": store path}, each realised in `store_dir` (CudapkgsError if one fails)."""
    import cudapkgs
    from cudapkgs.realise.scheduler import realise_parallel
    from cudapkgs.store.store import Store
    from cudapkgs.testers import collect_tests

    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"], "storeDir": store_dir,
                                        "prebuiltWheels": ["nccl", "libnvshmem"], "cudaCapabilities": [capability]})
    ps = pkgs.cudaPackages_13_0.pkgs.pkgsCuda[f"{python}Packages"]
    env = ps.withPackages([ps[name] for name in PACKAGES])
    tests = collect_tests(ps.torch)
    wanted = {"env": env, "torch": ps.torch, "numpy": ps.numpy, **{t: tests[t] for t in TESTERS}}
    with Store.open(store_dir) as store:
        realise_parallel(store, [p.derivation for p in wanted.values()], jobs=2)
    return {k: p.out for k, p in wanted.items()}


_USED = re.compile(r"^(?:fetched wheel (?P<nvidia>\S+\.whl) from .*\((?P<path>/\S+\.whl)|"
                   r"installed (?P<pinned>\S+\.whl):|unpacked (?P<prebuilt>\S+\.whl):)", re.M)


def closure_wheels(store, closure: list[str], cache: Path) -> list[Path]:
    """The wheels `closure`'s builds used: those its paths' build logs name (``.logs/<deriver>.log``, as
    bench_torch.used_wheels reads them: NVIDIA's, torch's, triton's in the wheel cache `cache`), and the
    fixed-output wheels in the store (``<hash>-<name>-<version>-….whl``) of the pure-Python packages in it.
    SystemExit when a log names a wheel the cache lacks."""
    store_dir = Path(store.store_dir)
    logs = {os.path.basename(store.query(p).deriver or "")[:-4] for p in closure}
    found: set[Path] = set()
    for name in logs:
        log = store_dir / ".logs" / f"{name}.log"
        if not name or not log.is_file():
            continue
        for match in _USED.finditer(log.read_text(errors="replace")):
            found.add(Path(match["path"]) if match["path"] else cache / (match["pinned"] or match["prebuilt"]))
    named = {os.path.basename(p)[33:].lower().replace("_", "-") for p in closure}  # "filelock-4.0.8"
    for entry in store_dir.iterdir():
        if entry.is_file() and entry.name.endswith(".whl"):
            dist, version = entry.name[33:].split("-")[:2]
            if f"{dist.lower().replace('_', '-')}-{version}" in named:
                found.add(entry)
    missing = [p for p in found if not p.is_file()]
    if missing:
        raise SystemExit(f"the logs name wheels the cache lacks: {missing[:3]}")
    return sorted(found)


def pack(members: list[tuple[Path, str]], folder: Path, piece_mib: int, window: int, extra: dict) -> dict:
    """One tar of `members` ((source, name in the tar)) cut into `folder`/pNNNN; writes and returns the manifest."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    pieces = _StreamPieces(folder, piece_mib << 20, window)
    with tarfile.open(fileobj=pieces, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for source, name in members:
            tar.add(source, arcname=name)
    pieces.close()
    manifest = {"pieces": pieces.pieces, "size": pieces.total, "sha256": pieces.whole.hexdigest(), **extra}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--repo", type=Path, default=Path("/work/main"), help="the checkout the device tool sends")
    parser.add_argument("--name", default="mlc")
    parser.add_argument("--bench-wheels", metavar="NAME2", help="also the wheels and uv for bench_substitute_ml.py")
    parser.add_argument("--work", type=Path, default=None, help="where the key and the cache go (default: beside the store)")
    parser.add_argument("--python", default="python312")
    parser.add_argument("--capability", default="9.0")
    parser.add_argument("--piece-mib", type=int, default=50)
    parser.add_argument("--window", type=int, default=1_000_000)
    parser.add_argument("--bench-only", action="store_true", help="only the --bench-wheels pieces (NAME packed already)")
    args = parser.parse_args(argv)

    from cudapkgs.fetch.wheel_lookup import wheel_cache_directory
    from cudapkgs.store.store import Store

    store_dir = str(Path(args.store).resolve())
    roots = realise_all(store_dir, args.python, args.capability)
    for key, path in roots.items():
        print(f"{key}: {path}")
    work = args.work or Path(store_dir).with_name(Path(store_dir).name + "-cache")
    work.mkdir(parents=True, exist_ok=True)
    secret, cache = work / "secret.key", work / "cache"
    if not secret.exists():
        out = subprocess.run(cudapkgs_cli("key", "generate", "--name", "gpu7-ml-1", "--out", str(secret)),
                             check=True, capture_output=True, text=True).stdout
        (work / "public.key").write_text(next(l.strip() for l in out.splitlines() if l.startswith("gpu7-ml-1:")) + "\n")
    start = time.monotonic()
    subprocess.run(cudapkgs_cli("copy", "--to", f"file://{cache}", "--sign-key", str(secret), "--store", store_dir,
                                *roots.values()), check=True)
    print(f"copy --to file://{cache} (zstd, signed): {time.monotonic() - start:.1f} s")
    (work / "roots.txt").write_text("".join(f"{k} {v}\n" for k, v in roots.items()))
    with Store.open(store_dir) as store:
        closure = sorted(store.closure(list(roots.values())))
        nar = sum(store.query(p).nar_size for p in closure)
        bench_closure = sorted(store.closure([roots["torch"], roots["numpy"]]))
    wheels = work / "wheels"
    if not wheels.exists():
        wheels.mkdir()
        subprocess.run([sys.executable, "-I", "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                        "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                        "--platform", "any", "-d", str(wheels), *DEVICE_WHEELS], check=True, cwd=wheels)
    cpython = work / "cpython-3.12.1.tar.gz"
    if not cpython.exists():
        with tarfile.open(cpython, "w:gz") as tar:
            tar.add(PYENV, arcname=str(PYENV).lstrip("/"), filter=_keep)
    members = [(cache, "cache"), (work / "public.key", "public.key"), (work / "roots.txt", "roots.txt"),
               (cpython, cpython.name), (wheels, "wheels")]
    extra = {"roots": list(roots.values()), "storeDir": store_dir, "paths": len(closure), "narBytes": nar,
             "publicKey": (work / "public.key").read_text().strip()}
    if not args.bench_only:
        manifest = pack(members, args.repo / ".carry" / args.name, args.piece_mib, args.window, extra)
        print(f"{args.name}: {len(closure)} paths, NAR {nar / 2**30:.2f} GiB, tar {manifest['size'] / 2**30:.2f} GiB, "
              f"{len(manifest['pieces'])} pieces")
    if args.bench_wheels:
        with Store.open(store_dir) as store:
            used = closure_wheels(store, bench_closure, wheel_cache_directory())
        uv = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
        if uv is None:
            raise SystemExit("no uv binary: pip install uv")
        # fixed-output wheels are stored as <hash>-name.whl: uv needs the name alone
        members = [(w, "wheels/" + (w.name[33:] if w.parent == Path(store_dir) else w.name)) for w in used]
        members.append((Path(uv), "uv"))
        second = pack(members, args.repo / ".carry" / args.bench_wheels, args.piece_mib, args.window,
                      {"roots": [roots["torch"], roots["numpy"]], "storeDir": store_dir, "paths": len(bench_closure),
                       "wheels": [name for _, name in members[:-1]]})
        print(f"{args.bench_wheels}: {len(used)} wheels, {sum(w.stat().st_size for w in used) / 2**30:.2f} GiB, "
              f"{len(second['pieces'])} pieces; bench closure {len(bench_closure)} paths")
    return 0


if __name__ == "__main__":
    sys.exit(main())
