"""torch's passthru.tests, as Nixpkgs' (pkgs/development/python-modules/torch/tests/default.nix@2ff66c69).

``compileCpu``: ``torch.compile`` of ``sin(x) + cos(y)`` on the CPU (mk-torch-compile-check.nix
with ``feature = null``: inductor compiles C++, so the host compiler is on PATH and HOME is a
writable directory, as its ``writableTmpDirAsHomeHook``).  ``cuda.cudaAvailable`` and
``cuda.compileCuda`` (mk-runtime-check.nix, mk-torch-compile-check.nix with ``feature =
"cuda"``) need a GPU: ``requiredSystemFeatures = ["cuda"]``, so ``cudapkgs test`` builds them
only where one is and reports them skipped elsewhere.  Each test's build is the test: a
failing script fails it.  ``tester-compileCpu``, ``tester-cudaAvailable`` and ``tester-compileCuda``
are the same checks as Nixpkgs has them (tests/default.nix@2ff66c69): ``cudaPackages.writeGpuTestPython``
programs, which ``cudapkgs test`` runs on this machine where it has their feature (none for the CPU one),
each with ``.gpuCheck`` the build that runs it.

``mnist-example`` (tests/mnist-example/default.nix@371f570e, script.py@3dc4f60b): Nixpkgs trains its
784-512-512-10 ReLU network with cross-entropy and SGD on FashionMNIST, which it downloads from
AWS S3 and reads through torchvision.  cudapkgs' tests download nothing (a deviation, said in
docs/ml-stack.md): the same network trains for 6 epochs on seven-segment digits 0-9 drawn
28x28 by a fixed generator (shifted by up to 2 pixels, dimmed and with Gaussian noise), 3000 to
train and 500 held out, and must reach a held-out accuracy of at least 0.97 and a mean training
loss below 0.1 in the last epoch (on this machine: 1.000 and 0.0016, 8 s of CPU).  It runs on the CPU;
``cuda.mnist-example`` is the same on ``cuda`` (``requiredSystemFeatures = ["cuda"]``).  Every
script's last line is ``PASS: …`` with the value it checked: what ``cudapkgs test`` shows.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MNIST", "torch_tests"]

COMPILE = """\
import torch


@torch.compile
def opt_foo2(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b


x, y = torch.randn(10, 10{device}), torch.randn(10, 10{device})
got = opt_foo2(x, y)
difference = (got - (torch.sin(x) + torch.cos(y))).abs().max().item()
assert difference <= 1e-6, (difference, got)  # fused: a few ulps apart
print(f"PASS: torch.compile(sin(x) + cos(y)) on {{got.device}} equals eager, max |difference| {{difference:.2e}}")
"""
AVAILABLE = """\
import torch
message = f"{torch.cuda.is_available()=} and {torch.version.cuda=}"
assert torch.cuda.is_available() and torch.version.cuda, message
print(f"PASS: {message}")
"""
MNIST = """\
import torch
from torch import nn

device = "{device}"
assert device == "cpu" or torch.cuda.is_available(), "no CUDA device"
generator = torch.Generator().manual_seed(0)
torch.manual_seed(0)
# Seven-segment digits on a 28x28 grid: each segment a bar of 3 pixels, as (rows, columns).
SEGMENTS = {{"a": (slice(4, 7), slice(8, 21)), "b": (slice(4, 15), slice(18, 21)),
            "c": (slice(13, 25), slice(18, 21)), "d": (slice(22, 25), slice(8, 21)),
            "e": (slice(13, 25), slice(8, 11)), "f": (slice(4, 15), slice(8, 11)),
            "g": (slice(13, 16), slice(8, 21))}}
DIGITS = ["abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg"]
glyphs = torch.zeros(10, 28, 28)
for digit, segments in enumerate(DIGITS):
    for name in segments:
        glyphs[digit][SEGMENTS[name]] = 1.0


def dataset(count):
    labels = torch.randint(0, 10, (count,), generator=generator)
    shifts = torch.randint(-2, 3, (count, 2), generator=generator)
    images = torch.stack([torch.roll(glyphs[label], (int(dy), int(dx)), (0, 1))
                          for label, (dy, dx) in zip(labels, shifts)])
    images = images * (0.6 + 0.4 * torch.rand(count, 1, 1, generator=generator))
    images = (images + 0.25 * torch.randn(count, 28, 28, generator=generator)).clamp(0.0, 1.0)
    return images.unsqueeze(1), labels


train_x, train_y = dataset(3000)
test_x, test_y = dataset(500)
model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 10)).to(device)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(6):
    model.train()
    order = torch.randperm(len(train_x), generator=generator)
    losses = []
    for start in range(0, len(order), 64):
        batch = order[start:start + 64]
        loss = loss_fn(model(train_x[batch].to(device)), train_y[batch].to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    mean_loss = sum(losses) / len(losses)
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x.to(device)).argmax(1).cpu() == test_y).float().mean().item()
    print(f"epoch {{epoch + 1}}: mean training loss {{mean_loss:.4f}}, held-out accuracy {{accuracy:.3f}}")
assert accuracy >= 0.97 and mean_loss < 0.1, (accuracy, mean_loss)
print(f"PASS: MNIST-style training on {{device}}: held-out accuracy {{accuracy:.3f}} >= 0.97, "
      f"last epoch's mean loss {{mean_loss:.4f}} < 0.1")
"""


def _test(ps: Any, pkgs: Any, config: Any, system: str, torch: Any, name: str, script: str, cuda: bool) -> Any:
    from ...stdenv import mk_derivation

    return mk_derivation(pkgs, {
        "pname": f"torch-{name}",
        "version": torch.version,
        "nativeBuildInputs": [ps.python],
        "buildInputs": [torch.derivation],
        "script": script,
        "dontUnpack": True, "dontConfigure": True, "dontFixup": True,
        "buildPhase": 'export HOME="$TMPDIR"; printf "%s" "$script" > test.py; python3 test.py | tee log',
        "installPhase": 'install -Dm644 log "$out/log"',
        **({"requiredSystemFeatures": ["cuda"]} if cuda else {}),
        "meta": {"description": f"torch {torch.version}: {name}"},
    }, system=system, name=f"python3Packages.torch.tests.{'cuda.' if cuda else ''}{name}")


def torch_tests(ps: Any, pkgs: Any, config: Any, system: str, torch: Any) -> dict[str, Any]:
    """{"tester-compileCpu": …, "tester-cudaAvailable": …, "tester-compileCuda": …, "compileCpu": …,
    "mnist-example": …, "cuda": {"cudaAvailable": …, "compileCuda": …, "mnist-example": …}} for the torch package whose attributes are `torch`
    (its fixed point: ``version``, ``derivation``); the tester-* are writeGpuTestPython programs."""
    from ...lib.fixpoint import lazy

    def tester(name: str, script: str, feature: str | None) -> Any:
        # tests/default.nix@2ff66c69: mk-runtime-check.nix / mk-torch-compile-check.nix are
        # cudaPackages.writeGpuTestPython programs (run with `cudapkgs test`, or their .gpuCheck built)
        # Deviation: the writer gets this torch's own Python set (Nixpkgs' gets the default python3Packages,
        # whose assertion refuses a torch of python312Packages; here that torch's testers run with its Python).
        return lazy(lambda: pkgs.cudaPackages.writeGpuTestPython.override({"python3Packages": ps})(
            {"name": name, "feature": feature, "libraries": [torch.derivation]}, script))

    return {
        "tester-compileCpu": tester("torch-compile-cpu", COMPILE.format(device=""), None),
        "tester-cudaAvailable": tester("cudaAvailable", AVAILABLE, "cuda"),
        "tester-compileCuda": tester("torch-compile-cuda", COMPILE.format(device=', device="cuda"'), "cuda"),
        "compileCpu": _test(ps, pkgs, config, system, torch, "compileCpu", COMPILE.format(device=""), False),
        "mnist-example": _test(ps, pkgs, config, system, torch, "mnist-example", MNIST.format(device="cpu"), False),
        "cuda": {
            "mnist-example": _test(ps, pkgs, config, system, torch, "mnist-example", MNIST.format(device="cuda"), True),
            "cudaAvailable": _test(ps, pkgs, config, system, torch, "cudaAvailable", AVAILABLE, True),
            "compileCuda": _test(ps, pkgs, config, system, torch, "compileCuda",
                                 COMPILE.format(device=', device="cuda"'), True),
        },
    }
