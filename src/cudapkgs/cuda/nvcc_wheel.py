"""``cuda_nvcc_wheel``: what NVIDIA's CUDA 12 nvcc wheel has (ptxas, libnvvm, headers), for a set without nvcc.

NVIDIA's ``nvidia-cuda-nvcc-cu12`` wheel (checked on 12.8.93 and 12.9.86: their 30 files each, read
from the zip's directory; shared/reference/pypi-wheels.md section 2) ships ``bin/ptxas``, ``include/crt``,
``include/fatbinary_section.h``, ``include/nvPTXCompiler.h`` and ``nvvm/`` (``libnvvm.so``,
``libdevice.10.bc``, ``nvvm.h``), and not the ``nvcc`` driver, ``cicc``, ``cudafe++``,
``fatbinary``, ``nvlink`` or ``nvcc.profile``.  So with ``fetchers = ["wheels"]`` a CUDA 12
set's ``cuda_nvcc`` stays unavailable (`cudapkgs.fetch.supply`: "nvcc is not in NVIDIA's CUDA 12
wheel"), and everything that compiles with it says so at evaluation; but what only needs the
assembler can still have the set's (JAX's CUDA 12 plugin takes its ptxas from this same wheel, a
dependency of ``jax-cuda12-plugin[with-cuda]``), and Nixpkgs' triton takes
``lib.getExe' cudaPackages.cuda_nvcc "ptxas"`` (pkgs/development/python-modules/triton/default.nix
@005ab72f, ``TRITON_PTXAS_PATH``; triton/bin.nix@1c880b4b links it into the wheel).

This member is that wheel laid out as a redist prefix (`cudapkgs.builders.rewired_wheel.nvidia_wheel`,
every file checked against RECORD, the wheel against the index's sha256), of exactly the set's
``cuda_nvcc`` version.  It is available in a CUDA 12 set whose ``fetchers`` include ``"wheels"``
(the fetcher that takes NVIDIA's wheels) on x86_64 and SBSA, and broken elsewhere with the reason
(on CUDA 13 the nvcc wheel is complete: use ``cuda_nvcc``).  A consumer of ptxas (triton,
`cudapkgs.pkgs.python_modules.triton.ptxas_package`) takes ``cuda_nvcc`` when available (Nixpkgs'
choice, so nothing changes with the default fetchers), else this.  Nixpkgs has no such member: it
fetches NVIDIA's archives, which always have nvcc, and its cuda_nvcc has one output on purpose
("Keep NVCC and NVVM together", pkgs/development/cuda-modules/packages/cuda_nvcc/package.nix@7787668e),
so there is no ptxas output to take instead; a member of its own keeps cuda_nvcc's output path and
meaning the same whatever the fetchers.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NVCC_WHEEL_HAS", "cuda_nvcc_wheel"]

#: Paths of the prefix the wheel must have (checked after unpacking; the build fails without them).
NVCC_WHEEL_HAS = ("bin/ptxas", "nvvm/libdevice/libdevice.10.bc", "include/crt/host_config.h")

# The redist systems whose releases NVIDIA publishes as wheels (Jetson's are not).
_WHEEL_SYSTEMS = ("linux-x86_64", "linux-sbsa")


def _nvcc_wheel_problems(scope: Any, config: Any) -> list[str]:
    """Why the set cannot have ``cuda_nvcc_wheel`` (clauses), [] when it can."""
    name = f"{scope.attr_path}.cuda_nvcc_wheel"
    if str(scope.cudaMajorVersion) != "12":
        return [f"{name} is for CUDA 12 sets (CUDA {scope.cudaMajorMinorVersion}'s nvcc wheel has nvcc: "
                f"use {scope.attr_path}.cuda_nvcc)"]
    import json

    found = []
    if "wheels" not in [str(f) for f in config.fetchers]:
        found.append(f"{name} comes from NVIDIA's nvidia-cuda-nvcc-cu12 wheel, and \"wheels\" is not in the "
                     f"configured fetchers (config key `fetchers`, now {json.dumps(list(config.fetchers))})")
    system = scope.redistSystem
    if system not in _WHEEL_SYSTEMS:
        found.append(f"{name}: NVIDIA publishes no wheels for {system} releases")
    if scope.cuda_nvcc.release is None:
        found.append(f"{name}: the set's cuda manifest has no cuda_nvcc release")
    return found


def cuda_nvcc_wheel(scope: Any, config: Any) -> Any:
    """The member ``cuda_nvcc_wheel`` of the set `scope`: NVIDIA's nvidia-cuda-nvcc-cu12 wheel of
    the set's cuda_nvcc version as a prefix (``out``: bin/ptxas, include, nvvm).

    Evaluates with ``meta.broken`` (the reasons in `_nvcc_wheel_problems`) where the set cannot
    have it; its derivation then refuses with those reasons (`UnavailablePackageError`).
    """
    from ..builders.rewired_wheel import nvidia_wheel
    from ..lib.fixpoint import AttrSet, lazy
    from ..meta import source_meta

    system = scope.backendStdenv.hostNixSystem
    nvcc = scope.cuda_nvcc

    def attrs(final: Any) -> dict[str, Any]:
        version = str(nvcc.version)
        return {
            "pname": "cuda_nvcc_wheel",
            "version": version,
            "name": f"{scope.cudaNamePrefix}-cuda_nvcc_wheel-{version}",
            "outputs": ["out"],
            "nvidiaWheel": {"project": "nvidia-cuda-nvcc-cu12", "version": version, "cudaMajor": 12},
            "wheelRequire": list(NVCC_WHEEL_HAS),
            # nvcc's files hard-code /usr paths (cuda_nvcc/package.nix: allowFHSReferences = true).
            "allowFHSReferences": True,
            "passthru": AttrSet({
                "fromWheel": f"nvidia-cuda-nvcc-cu12=={version}",
                "brokenAssertions": lazy(lambda: [{"message": m, "assertion": False}
                                                  for m in _nvcc_wheel_problems(scope, config)]),
            }, name=f"{scope.attr_path}.cuda_nvcc_wheel.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": f"ptxas, libnvvm and the crt headers of CUDA {version} from NVIDIA's "
                               "nvidia-cuda-nvcc-cu12 wheel (which has no nvcc)",
                "homepage": "https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc",
                "license": nvcc.meta.get("license"),
                "mainProgram": "ptxas",
                "platforms": ["x86_64-linux", "aarch64-linux"],
                "sourceProvenance": ["binaryNativeCode"],
            })),
        }

    return nvidia_wheel(config, attrs, system=system).named(f"{scope.attr_path}.cuda_nvcc_wheel")

