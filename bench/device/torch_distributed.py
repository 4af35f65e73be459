"""torch.distributed from any torch: an all_reduce's bus bandwidth and a DistributedDataParallel step.

Run under torchrun (one process per GPU, or per CPU slot with gloo):

    python -m torch.distributed.run --nproc-per-node=2 bench/device/torch_distributed.py \
        --backend nccl --device cuda --size-mib 1024 --out DIR
    python -m torch.distributed.run --nproc-per-node=2 bench/device/torch_distributed.py \
        --backend gloo --device cpu --size-mib 16 --out DIR          # the CPU dry run of the same code
    python bench/device/torch_distributed.py --reference --device cuda --out DIR   # one process, full batch

Each rank writes ``DIR/rank-N.json`` (the reference run ``DIR/reference.json``):

* ``allreduce``: the sum checked exactly (every element must equal n(n-1)/2 + n·iteration pattern, see
  below), the median time of ``--iters`` timed calls after ``--warmup``, the algorithm bandwidth
  (bytes / time, GB/s = 1e9 B/s) and the bus bandwidth (algbw · 2(n-1)/n, nccl-tests' definition for
  all-reduce: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md#allreduce);
* ``ddp``: the loss after each of ``--steps`` SGD steps of a small MLP on fixed data and a checksum of
  the final parameters. Rank r trains on its half of the batch; DDP averages the gradients, and with a
  mean loss over equal halves that is the full batch's gradient, so the losses (averaged over ranks)
  and parameters must equal those of the one-process ``--reference`` run (compare_ddp in
  bench/device/compare_torch_distributed.py; TF32 is off so both runs do the same arithmetic);
* ``libraries``: every libnccl / libcudart / libcuda / libcublas mapped in this process
  (``/proc/self/maps``, read after the collectives ran), and ``torch.__file__``,
  ``torch.__version__``, ``torch.cuda.nccl.version()`` where CUDA is there.

The environment is the caller's: NVLink multicast must be off on the lent machines (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1); this script refuses to start without them
when ``--backend nccl``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
LIBRARIES = ("libnccl", "libcudart", "libcuda.so", "libcublas", "libtorch_cuda")
BATCH, WIDTH, CLASSES = 64, 256, 10


def mapped_libraries() -> dict[str, list[str]]:
    """{library stem: sorted distinct paths} of the CUDA libraries in /proc/self/maps (bounded: 16 MiB)."""
    with open("/proc/self/maps", "rb") as maps:
        text = maps.read(16 << 20).decode(errors="replace")
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        path = line.split(None, 5)[5].strip() if len(line.split(None, 5)) == 6 else ""
        name = os.path.basename(path)
        for stem in LIBRARIES:
            if name.startswith(stem):
                found.setdefault(stem, set()).add(path)
    return {stem: sorted(paths) for stem, paths in found.items()}


def make_data(torch, device):
    """The fixed batch (BATCH x WIDTH inputs, BATCH labels) and initial model, the same in every process."""
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(BATCH, WIDTH, generator=generator)
    y = torch.randint(0, CLASSES, (BATCH,), generator=generator)
    torch.manual_seed(4321)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, CLASSES))
    return x.to(device), y.to(device), model.to(device)


def train(torch, model, x, y, steps: int) -> list[float]:
    """`steps` SGD steps (lr 0.1) on the mean cross-entropy; the loss before each step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach().cpu()))
    return losses


def checksum(torch, model) -> list[float]:
    """Per-parameter sums of the parameters (float64 on the CPU), in model order."""
    return [float(p.detach().double().cpu().sum()) for p in model.parameters()]


def sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def allreduce(torch, dist, device, size_mib: int, warmup: int, iters: int) -> dict:
    """Time all_reduce(SUM) of a float32 tensor of `size_mib` MiB; check the result exactly."""
    world, rank = dist.get_world_size(), dist.get_rank()
    count = size_mib * (1 << 20) // 4
    tensor = torch.empty(count, dtype=torch.float32, device=device)
    times = []
    for i in range(warmup + iters):
        tensor.fill_(float(rank + 1))
        sync(torch, device)
        start = time.perf_counter()
        dist.all_reduce(tensor)
        sync(torch, device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    expected = world * (world + 1) / 2  # small integers: exact in float32
    wrong = int((tensor != expected).sum().item())
    seconds = statistics.median(times)
    algbw = count * 4 / seconds / 1e9
    return {"bytes": count * 4, "iters": iters, "median_s": seconds, "min_s": min(times), "algbw_GBps": algbw,
            "busbw_GBps": algbw * 2 * (world - 1) / world, "wrong": wrong, "expected": expected}


def describe(torch) -> dict:
    info = {"torch_file": torch.__file__, "torch_version": torch.__version__, "python": sys.executable}
    if torch.cuda.is_available():
        info["device_name"] = torch.cuda.get_device_name()
        try:
            info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            info["nccl_version"] = f"{type(error).__name__}: {error}"
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--size-mib", type=int, default=1024, help="all_reduce size (default 1024 = 1 GiB)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--steps", type=int, default=5, help="DDP / reference SGD steps")
    parser.add_argument("--reference", action="store_true", help="one process, the full batch, no collective")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.backend == "nccl" and not args.reference:
        missing = {k: v for k, v in MULTICAST_OFF.items() if os.environ.get(k) != v}
        if missing:
            print(f"refusing to start: NVLink multicast must be off ({' '.join(f'{k}={v}' for k, v in missing.items())})",
                  file=sys.stderr)
            return 2
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reference:
        device = torch.device(args.device)
        x, y, model = make_data(torch, device)
        losses = train(torch, model, x, y, args.steps)
        record = {"mode": "reference", "losses": losses, "checksum": checksum(torch, model), **describe(torch),
                  "libraries": mapped_libraries()}
        (args.out / "reference.json").write_text(json.dumps(record, indent=1))
        print(json.dumps({k: record[k] for k in ("losses", "checksum")}))
        return 0

    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group(args.backend, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    result = allreduce(torch, dist, device, args.size_mib, args.warmup, args.iters)
    x, y, model = make_data(torch, device)
    shard = BATCH // world
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if args.device == "cuda" else None)
    local_losses = train(torch, ddp, x[rank * shard:(rank + 1) * shard], y[rank * shard:(rank + 1) * shard],
                         args.steps)
    # The full batch's loss is the mean of the ranks' (equal halves, mean loss).
    losses = torch.tensor(local_losses, dtype=torch.float64, device=device)
    dist.all_reduce(losses)
    record = {"mode": "ddp", "rank": rank, "world": world, "backend": args.backend, "allreduce": result,
              "losses": (losses / world).tolist(), "local_losses": local_losses,
              "checksum": checksum(torch, ddp.module), **describe(torch), "libraries": mapped_libraries()}
    (args.out / f"rank-{rank}.json").write_text(json.dumps(record, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"all_reduce {result['bytes'] / 2**20:.0f} MiB x{world} ({args.backend}): busbw "
              f"{result['busbw_GBps']:.2f} GB/s, algbw {result['algbw_GBps']:.2f} GB/s, wrong {result['wrong']}")
        print(f"ddp losses {record['losses']}")
    return 1 if result["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
