"""tests/flags.nix@47e400a9c08440381a8e23f205463cab43b1b816: `formatCapabilities` of 7.5 and 8.6 with
forward compatibility gives exactly these names and flags; checked while evaluating."""

from __future__ import annotations

from typing import Any

from .common import TOUCH, check, evaluated, run_command

EXPECTED = {
    "cudaCapabilities": ["7.5", "8.6"],
    "cudaForwardCompat": True,
    "archNames": ["Ampere", "Turing"],
    "realArches": ["sm_75", "sm_86"],
    "virtualArches": ["compute_75", "compute_86"],
    "arches": ["sm_75", "sm_86", "compute_86"],
    "gencode": ["-gencode=arch=compute_75,code=sm_75", "-gencode=arch=compute_86,code=sm_86",
                "-gencode=arch=compute_86,code=compute_86"],
    "gencodeString": "-gencode=arch=compute_75,code=sm_75 -gencode=arch=compute_86,code=sm_86 "
                     "-gencode=arch=compute_86,code=compute_86",
    "cmakeCudaArchitecturesString": "75;86",
}


def flags(cuda: Any, config: Any, system: str) -> Any:
    """The flags test of the set `cuda`."""
    def checks() -> None:
        _cuda = cuda.auto_args["_cuda"]
        info = _cuda.bootstrapData.cudaCapabilityToInfo
        check(cuda, "flags", "7.5" in info and "8.6" in info, "the test requires both 7.5 and 8.6 be known CUDA capabilities")
        actual = dict(_cuda.lib.formatCapabilities({"cudaCapabilityToInfo": info, "cudaCapabilities": ["7.5", "8.6"],
                                                    "cudaForwardCompat": True}))
        check(cuda, "flags", actual == EXPECTED, f"expected {EXPECTED}, got {actual}")

    return run_command(cuda, config, "flags", TOUCH, {"assertionsHold": evaluated(checks)})
