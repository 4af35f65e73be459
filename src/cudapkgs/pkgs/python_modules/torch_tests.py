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
"""

from __future__ import annotations

from typing import Any

__all__ = ["torch_tests"]

COMPILE = """\
import torch


@torch.compile
def opt_foo2(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b


x, y = torch.randn(10, 10{device}), torch.randn(10, 10{device})
got = opt_foo2(x, y)
assert torch.allclose(got, torch.sin(x) + torch.cos(y), atol=1e-6), got  # fused: a few ulps apart
print(got)
"""
AVAILABLE = """\
import torch
message = f"{torch.cuda.is_available()=} and {torch.version.cuda=}"
assert torch.cuda.is_available() and torch.version.cuda, message
print(message)
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
    "cuda": {"cudaAvailable": …, "compileCuda": …}} for the torch package whose attributes are `torch`
    (its fixed point: ``version``, ``derivation``); the tester-* are writeGpuTestPython programs."""
    from ...lib.fixpoint import lazy

    def tester(name: str, script: str, feature: str | None) -> Any:
        # tests/default.nix@2ff66c69: mk-runtime-check.nix / mk-torch-compile-check.nix are
        # cudaPackages.writeGpuTestPython programs (run with `cudapkgs test`, or their .gpuCheck built)
        return lazy(lambda: pkgs.cudaPackages.writeGpuTestPython(
            {"name": name, "feature": feature, "libraries": [torch.derivation]}, script))

    return {
        "tester-compileCpu": tester("torch-compile-cpu", COMPILE.format(device=""), None),
        "tester-cudaAvailable": tester("cudaAvailable", AVAILABLE, "cuda"),
        "tester-compileCuda": tester("torch-compile-cuda", COMPILE.format(device=', device="cuda"'), "cuda"),
        "compileCpu": _test(ps, pkgs, config, system, torch, "compileCpu", COMPILE.format(device=""), False),
        "cuda": {
            "cudaAvailable": _test(ps, pkgs, config, system, torch, "cudaAvailable", AVAILABLE, True),
            "compileCuda": _test(ps, pkgs, config, system, torch, "compileCuda",
                                 COMPILE.format(device=', device="cuda"'), True),
        },
    }
