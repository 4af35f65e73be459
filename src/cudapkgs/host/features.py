"""System features this machine offers builds (Nix's `system-features`): "cuda" and `cuda-sm-*` from its GPUs, or $CUDAPKGS_SYSTEM_FEATURES."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping
from typing import Any
from .. import programs


def gpu_capabilities() -> list[str]:
    """The compute capabilities of this machine's NVIDIA GPUs ("9.0", …), [] without any."""
    smi = programs.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


@functools.cache
def _detected_features() -> frozenset[str]:
    from .. import db
    from ..flags import get_cuda_system_features

    capabilities = gpu_capabilities()
    if not capabilities:
        return frozenset()
    info = db.cuda_capability_to_info()
    known = [c for c in capabilities if c in info]
    return frozenset({"cuda", *get_cuda_system_features(known, info)})


def host_system_features(env: Mapping[str, str] = os.environ) -> frozenset[str]:
    """What this machine offers builds: $CUDAPKGS_SYSTEM_FEATURES, else what its GPUs give."""
    declared = env.get("CUDAPKGS_SYSTEM_FEATURES")
    if declared is not None:
        return frozenset(declared.split())
    return _detected_features()


def missing_features(drv: Any, offered: frozenset[str] | None = None) -> list[str]:
    """The `requiredSystemFeatures` of a derivation this machine does not offer."""
    required = drv.attrs.get("requiredSystemFeatures") or []
    if not required:
        return []
    offered = host_system_features() if offered is None else offered
    return [f for f in required if f not in offered]
