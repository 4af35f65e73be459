"""Capability strings to NVCC and CMake flags (Nixpkgs' ``_cuda.lib`` string helpers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .db import all_sorted_cuda_capabilities
from .errors import EvalError, did_you_mean
from .lib.versions import major, natural_sort, version_at_least

__all__ = [
    "dots_to_underscores",
    "drop_dots",
    "format_capabilities",
    "get_cuda_system_features",
    "mk_cmake_cuda_architectures_string",
    "mk_cuda_system_feature",
    "mk_gencode_flag",
    "mk_real_architecture",
    "mk_virtual_architecture",
]


def drop_dots(s: str) -> str:
    """Remove every dot: ``"10.0a"`` → ``"100a"``."""
    return s.replace(".", "")


def dots_to_underscores(s: str) -> str:
    """Replace every dot with an underscore: ``"12.6"`` → ``"12_6"``."""
    return s.replace(".", "_")


def mk_real_architecture(cap: str) -> str:
    """The real (SASS) architecture of *cap*: ``"9.0a"`` → ``"sm_90a"``."""
    return "sm_" + drop_dots(cap)


def mk_virtual_architecture(cap: str) -> str:
    """The virtual (PTX) architecture of *cap*: ``"9.0a"`` → ``"compute_90a"``."""
    return "compute_" + drop_dots(cap)


def mk_gencode_flag(prefix: str, cap: str) -> str:
    """An NVCC flag: ``mk_gencode_flag("sm", "8.9")`` → ``"-gencode=arch=compute_89,code=sm_89"``."""
    d = drop_dots(cap)
    return f"-gencode=arch=compute_{d},code={prefix}_{d}"


def mk_cmake_cuda_architectures_string(caps: Sequence[str]) -> str:
    """A CMAKE_CUDA_ARCHITECTURES value: ``["8.9", "10.0a"]`` → ``"89;100a"``."""
    return ";".join(map(drop_dots, caps))


def _record(info: Mapping[str, Mapping[str, Any]], cap: str, who: str) -> Mapping[str, Any]:
    try:
        return info[cap]
    except KeyError:
        raise EvalError(f"{who}: unknown CUDA capability {cap}{did_you_mean(cap, info)}") from None


def format_capabilities(
    cuda_capability_to_info: Mapping[str, Mapping[str, Any]],
    cuda_capabilities: Sequence[str],
    cuda_forward_compat: bool,
) -> dict[str, Any]:
    """``formatCapabilities``: every flag form of *cuda_capabilities*, plus forward-compatible PTX if asked."""
    caps = list(cuda_capabilities)
    if cuda_forward_compat and not caps:
        raise EvalError(
            "formatCapabilities: forward compatibility needs at least one CUDA capability "
            "to emit PTX for, but the capability list is empty"
        )
    real = [mk_real_architecture(c) for c in caps]
    virtual = [mk_virtual_architecture(c) for c in caps]
    gencode = [mk_gencode_flag("sm", c) for c in caps]
    arches = list(real)
    if cuda_forward_compat:
        # PTX for the last capability as given (not the highest), as Nixpkgs does.
        gencode.append(mk_gencode_flag("compute", caps[-1]))
        arches.append(virtual[-1])
    names = dict.fromkeys(_record(cuda_capability_to_info, c, "formatCapabilities")["archName"] for c in caps)
    return {
        "cudaCapabilities": caps,
        "cudaForwardCompat": cuda_forward_compat,
        "realArches": real,
        "virtualArches": virtual,
        "gencode": gencode,
        "arches": arches,
        "archNames": natural_sort(names),
        "cmakeCudaArchitecturesString": mk_cmake_cuda_architectures_string(caps),
        "gencodeString": " ".join(gencode),
    }


def mk_cuda_system_feature(cap: str) -> str:
    """The Nix system feature naming *cap*: ``"8.9"`` → ``"cuda-sm-89"``."""
    return "cuda-sm-" + drop_dots(cap)


def _base(cap: str) -> str:
    return cap.rstrip("abcdefghijklmnopqrstuvwxyz")


def _satisfies(gpu: str, required: str, record: Mapping[str, Any]) -> bool:
    if record["isArchitectureSpecific"]:
        return _base(required) == gpu
    if record["isFamilySpecific"]:
        return major(required) == major(gpu) and version_at_least(gpu, _base(required))
    return version_at_least(gpu, required)


def get_cuda_system_features(gpu_caps: Sequence[str], info: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The system features a builder with GPUs of *gpu_caps* advertises: the union of each GPU's closure."""
    who = "_cuda.lib.getCudaSystemFeatures"
    known = all_sorted_cuda_capabilities(info)
    features: dict[str, None] = {}  # ordered set: lib.unique keeps first occurrences
    for gpu in gpu_caps:
        rec = _record(info, gpu, who)
        if rec["isArchitectureSpecific"] or rec["isFamilySpecific"]:
            raise EvalError(f"{who}: {gpu} is a feature set rather than a GPU; pass {_base(gpu)}")
        for cap in known:
            if _satisfies(gpu, cap, info[cap]):
                features[mk_cuda_system_feature(cap)] = None
    return list(features)
