"""cmake's setup hook (the environment part): CMAKE_PREFIX_PATH over the inputs.

Nixpkgs: pkgs/by-name/cm/cmake/setup-hook.sh (addCMakeParams puts every input on
CMAKE_PREFIX_PATH, so find_package / find_library / find_program search them).
The configure phase itself is `cudapkgs.builders.cmake`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["setup"]


def setup(env: dict[str, str], closures: Any, *, base: Mapping[str, str]) -> None:
    """Prepend host then native inputs to CMAKE_PREFIX_PATH (CMake reads it from the environment)."""
    paths = [p for p in dict.fromkeys([*closures.host, *closures.native])]
    inherited = [e for e in base.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if e]
    merged = list(dict.fromkeys([*paths, *inherited]))
    if merged:
        env["CMAKE_PREFIX_PATH"] = os.pathsep.join(merged)
