"""What the set tests share: a named test derivation and evaluation-time assertions.

Nixpkgs' tests are `runCommand`s or `mkDerivation`s named `${cudaNamePrefix}-tests-<name>`;
tests that check evaluation (flags, scope, redist-variants) `assert` while evaluating and build
an empty `$out`. Here the same: `check` raises `EvalError` naming the test, from `evaluated`, an
attribute of the test's derivation, so evaluating the test's derivation (`drvPath`, a build,
`cudapkgs test`) fails when an assertion does, while merely listing the tests does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import EvalError
from ...stdenv import mk_derivation

TOUCH = 'touch "$out"\n'


def check(cuda: Any, test: str, holds: bool, message: str) -> None:
    """Raise `EvalError` "<set>.tests.<test>: <message>" unless `holds`."""
    if not holds:
        raise EvalError(f"{cuda.attr_path}.tests.{test}: {message}")


def run_command(cuda: Any, config: Any, test: str, script: str, attrs: Mapping[str, Any] | None = None,
                *, suffix: str = "") -> Any:
    """A test whose build is `script` (a shell script that must create ``$out``), named
    ``<cudaNamePrefix>-tests-<test>[-<suffix>]``; `attrs` are further mkDerivation attributes."""
    name = f"{cuda.cudaNamePrefix}-tests-{test}" + (f"-{suffix}" if suffix else "")
    return mk_derivation(
        config,
        {
            "name": name,
            "dontUnpack": True,
            "dontConfigure": True,
            "dontInstall": True,
            "buildPhase": script,
            **dict(attrs or {}),
        },
        system=cuda.backendStdenv.hostNixSystem,
        name=f"{cuda.attr_path}.tests.{test}" + (f".{suffix}" if suffix else ""),
    )


def evaluated(checks: Any) -> Any:
    """A derivation attribute that runs `checks()` (which raises through `check`) when the
    derivation is evaluated, and is then true."""
    from ...lib.fixpoint import lazy

    def run() -> bool:
        checks()
        return True

    return lazy(run)


def first_arch(cuda: Any) -> str:
    """The first requested capability without its dot ("90"), as the nvcc tests use it."""
    return cuda.cudaConfig.cudaCapabilities[0].replace(".", "")


def dev_output(package: Any) -> Any:
    """`lib.getDev package` as a derivation attribute: the dev output's path (else the first
    output's), which makes the package an input."""
    outputs = list(package["outputs"])
    return package["dev" if "dev" in outputs else outputs[0]]


def broken_meta(message: str, **extra: Any) -> dict[str, Any]:
    """`meta` of a test that cannot run here: broken, unavailable, and `message` as its one problem
    (what `cudapkgs test` reports as the reason it was skipped)."""
    return {"broken": True, "available": False, "problems": {"broken": {"kind": "broken", "message": message}},
            **extra}


def meta_of(*packages: Any) -> dict[str, Any]:
    """`meta` of a test that needs `packages`: unavailable, with their problems, when one of them is
    broken or unsupported here (an unfree package not allowed is left to the licence check, so that
    `cudapkgs test` counts it apart)."""
    problems: dict[str, Any] = {}
    for package in packages:
        meta = package.meta
        if meta.get("available", True):
            continue
        for key, problem in dict(meta.get("problems") or {}).items():
            problems[key if key not in problems else f"{package.name}.{key}"] = problem
    return {"available": False, "problems": problems} if problems else {}


def wheels_lack_nvcc(cuda: Any, config: Any) -> dict[str, Any]:
    """`meta` making a test needing `cuda`'s nvcc unavailable when sources come only from NVIDIA's
    wheels (config `fetchers = ["wheels"]`) and the set is CUDA 12, whose nvcc has no wheel (the
    nvidia-cuda-nvcc-cu12 wheel carries ptxas, not nvcc; cuda/nvcc_wheel.py); else {}."""
    if tuple(config.fetchers) == ("wheels",) and str(cuda.cudaMajorVersion) == "12":
        return broken_meta(f"needs {cuda.attr_path}.cuda_nvcc, and CUDA 12's nvcc has no wheel: with "
                           'fetchers = ["wheels"] it cannot be fetched (add "redist" where NVIDIA\'s archives are reachable)')
    return {}


def backend_cc(cuda: Any) -> tuple[Any, dict[str, Any]]:
    """(`cuda.backendCC`, {}) or (None, `meta` saying why a test needing it cannot run): the host has no
    compiler, or none this release's nvcc accepts (backendCC's evaluation error, kept as the reason)."""
    from ...host.compiler import HostCompilerError

    try:
        cc = cuda.backendCC
    except HostCompilerError as error:
        return None, broken_meta(str(error))
    if cc is None:
        return None, broken_meta(f"{cuda.attr_path}.backendCC is null: this machine has no C/C++ compiler "
                                 "(see `cudapkgs doctor`)")
    return cc, {}
