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
