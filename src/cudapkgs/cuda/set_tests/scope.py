"""tests/scope.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb, the parts about one scope: `callPackages`
hands each grouped package callPackage's arguments, each member keeps its own, member overrides
re-evaluate it, explicit arguments win, and generic functions keep explicit arguments through
overrides. Checked while evaluating (by comparing derivation paths, as Nixpkgs does). The parts
about cross-compilation stages and spliced roles have no counterpart here (no cross)."""

from __future__ import annotations

from typing import Any

from ...stdenv import mk_derivation
from .common import TOUCH, check, evaluated, run_command


def scope(cuda: Any, config: Any, system: str) -> Any:
    """The scope test of the set `cuda`."""

    def consumer(cuda_nvcc: Any, cuda_cudart: Any, label: str = "default") -> Any:
        return mk_derivation(config, {"name": f"cuda-scope-consumer-{label}", "nativeBuildInputs": [cuda_nvcc],
                                      "buildInputs": [cuda_cudart], "dontUnpack": True, "buildPhase": TOUCH},
                             system=cuda.backendStdenv.hostNixSystem)

    def grouped_fn(cuda_nvcc: Any, cuda_cudart: Any, label: str = "default") -> dict[str, Any]:
        return {"first": consumer(cuda_nvcc, cuda_cudart, label),
                "second": consumer(cuda_nvcc, cuda_cudart, "second")}

    def checks() -> None:
        individual = cuda.call_package(consumer)
        grouped = cuda.callPackages(grouped_fn)

        def same(label: str, actual: Any, expected: Any) -> None:
            check(cuda, "scope", actual.drvPath == expected.drvPath, label)

        same("callPackages must use callPackage's arguments", grouped.first, individual)
        same("each group member must retain its own arguments", grouped.second, individual.override(label="second"))
        same("group member overrides must re-evaluate the member", grouped.first.override(label="override"),
             individual.override(label="override"))
        same("callPackages explicit arguments must override defaults",
             cuda.callPackages(grouped_fn, {"label": "explicit"}).first, individual.override(label="explicit"))

        def generic(**args: Any) -> dict[str, Any]:
            return {"member": mk_derivation(config, {"name": "member", "value": args.get("extra", "missing")},
                                            system=cuda.backendStdenv.hostNixSystem)}

        member = cuda.callPackages(generic, {"extra": "explicit"}).member
        check(cuda, "scope", member.value == "explicit"
              and member.override(lambda old: {"extra": old["extra"] + "-updated"}).value == "explicit-updated",
              "generic grouped functions and their overrides must retain explicit arguments")

    return run_command(cuda, config, "scope", TOUCH, {"assertionsHold": evaluated(checks)})
