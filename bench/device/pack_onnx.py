"""Prepare the ONNX Runtime GPU run (here, no GPU): export a model with the store's torch, pack the runtime's closure.

usage: python bench/device/pack_onnx.py [--repo /work/main] [--name onnx] [--window 6] [--store DIR] [--batch 32]
           [--piece-mib 54]

1. Realises, in the store (default: the configured one), ``cudaPackages_13_0.pkgs.pkgsCuda.python312Packages``
   (``allowUnfree``, ``fetchers = ["wheels"]``, ``prebuiltWheels = ["nccl", "libnvshmem"]``,
   ``cudaCapabilities = ["9.0"]``, as build_ml_env.py) ``withPackages([torch, onnx, numpy])`` (the exporter,
   stays here) and ``withPackages([onnxruntime, numpy])`` (the runtime, carried).
2. Runs the exporter in ``env -i``: a small conv net (`MODEL`, seed 0) exported by the TorchScript exporter
   (``torch.onnx.export(dynamo=False)``) to ``<repo>/.carry/NAME/extra/model/model.onnx``, with its input ``x.npy``
   (float32, BATCHx3x224x224, BATCH 16 by default) and torch's CPU output ``y_torch.npy`` (BATCHx1000), and ``meta.json``.
3. Packs the bare CPython 3.12.1 tree the runtime's ``bin/python3`` links to (pyenv's, without test/,
   idlelib, tkinter, ensurepip and ``__pycache__``) as ``extra/cpython-3.12.1.tar.gz`` (unpacked at the same
   path there; 41 MB: a device call of its own, the model's 21 MB another, see run_onnx.sh).
4. Checks the runtime's closure with `cudapkgs verify` (a path changed since registration, e.g. byte code Python
   wrote into it, is refused by the device's import: stops, naming it, unless ``--as-found``), then runs
   ``pack_closure.py --repo REPO --name NAME --window N --piece-mib M --wheels ROOT`` on the runtime only: the
   pieces ``pNNNN`` (+ ``.sha256``), ``manifest.json`` last, and ``wheels/``. 54 MiB pieces by default: with the
   device tool's 64 MiB a call and the ~8 MB working tree of /work/main, 27 calls instead of 48 MiB's 31.

Prints the device calls (docs/ml-stack.md, "ONNX Runtime on the GPU"). Raises CudapkgsError (one line) when a
build fails; exits 1 when the export fails (its stderr's tail printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYENV = Path("/root/.pyenv/versions/3.12.1")
SKIP = {"test", "idlelib", "tkinter", "ensurepip", "__pycache__", "turtledemo", "lib2to3"}

EXPORT = r"""
import json, sys
import numpy as np, torch, onnx
out, batch = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
def block(i, o, stride):
    return [torch.nn.Conv2d(i, o, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(o), torch.nn.ReLU()]
layers = block(3, 64, 2) + block(64, 128, 2) + block(128, 128, 1) + block(128, 256, 2) + block(256, 256, 1) \
    + block(256, 512, 2) + [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(512, 1000)]
model = torch.nn.Sequential(*layers).eval()
for m in model.modules():
    if isinstance(m, torch.nn.BatchNorm2d):  # not the identity: running stats of their own
        m.running_mean.uniform_(-0.1, 0.1); m.running_var.uniform_(0.5, 1.5)
x = torch.randn(batch, 3, 224, 224)
with torch.no_grad():
    y = model(x)
torch.onnx.export(model, (x,), f"{out}/model.onnx", dynamo=False, input_names=["x"], output_names=["y"],
                  opset_version=17)
onnx.checker.check_model(onnx.load(f"{out}/model.onnx"))
np.save(f"{out}/x.npy", x.numpy()); np.save(f"{out}/y_torch.npy", y.numpy())
json.dump({"torch": torch.__version__, "onnx": onnx.__version__, "batch": batch, "torch_file": torch.__file__,
           "y_abs_max": float(y.abs().max())}, open(f"{out}/meta.json", "w"))
print("exported", torch.__version__, onnx.__version__, tuple(x.shape), tuple(y.shape))
"""


def _keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if SKIP & set(Path(info.name).parts) else info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("/work/main"), help="the checkout the device tool sends")
    parser.add_argument("--name", default="onnx")
    parser.add_argument("--window", type=int, default=200,
                        help="pack_closure.py's: at most this many pieces on disk (200: all stay for the lead to send)")
    parser.add_argument("--as-found", action="store_true",
                        help="pack_closure.py's: export paths changed since registration as they are")
    parser.add_argument("--store", default=None)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--piece-mib", type=int, default=54,
                        help="pack_closure.py's: piece size; piece + working tree must stay under the tool's 64 MiB")
    args = parser.parse_args(argv)

    import cudapkgs
    from cudapkgs.realise.scheduler import realise_parallel
    from cudapkgs.store.location import default_store_dir
    from cudapkgs.store.store import Store

    store_dir = args.store or default_store_dir()
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"], "storeDir": store_dir,
                                        "prebuiltWheels": ["nccl", "libnvshmem"], "cudaCapabilities": ["9.0"]})
    ps = pkgs.cudaPackages_13_0.pkgs.pkgsCuda.python312Packages
    exporter = ps.withPackages([ps.torch, ps.onnx, ps.numpy])
    runtime = ps.withPackages([ps.onnxruntime, ps.numpy])
    with Store.open(store_dir) as store:
        realise_parallel(store, [exporter.derivation, runtime.derivation], jobs=args.jobs)
    carry = args.repo / ".carry" / args.name
    extra = carry / "extra"
    (extra / "model").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["env", "-i", f"{exporter.out}/bin/python3", "-c", EXPORT, str(extra / "model"), str(args.batch)],
                          capture_output=True, text=True, cwd="/")
    if done.returncode != 0:
        print(f"export with {exporter.out}/bin/python3 failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return 1
    print(done.stdout.strip())
    (extra / "model" / "runtime.txt").write_text(f"{runtime.out}\n")
    real = os.path.realpath(f"{runtime.out}/bin/python3")
    if not real.startswith(f"{PYENV}/"):
        print(f"the runtime's python3 is {real}, not under {PYENV}: carry that tree instead", file=sys.stderr)
        return 1
    with Store.open(store_dir, read_only=True) as store:  # the device's import refuses a changed path
        problems = store.verify(paths=sorted(store.closure([runtime.out])))
    if problems and not args.as_found:
        print("\n".join(p.message for p in problems), file=sys.stderr)
        print(f"{len(problems)} path(s) of {runtime.out}'s closure fail `cudapkgs verify`: repair them as the lines say, "
              "or pass --as-found", file=sys.stderr)
        return 1
    with tarfile.open(extra / "cpython-3.12.1.tar.gz", "w:gz") as tar:
        tar.add(PYENV, arcname=str(PYENV).lstrip("/"), filter=_keep)
    sys.stdout.flush()
    return subprocess.call([sys.executable, str(HERE / "pack_closure.py"), "--repo", str(args.repo), "--name", args.name,
                            "--window", str(args.window), "--piece-mib", str(args.piece_mib), "--wheels", "--store", store_dir, runtime.out,
                            *(["--as-found"] if args.as_found else [])])


if __name__ == "__main__":
    sys.exit(main())
