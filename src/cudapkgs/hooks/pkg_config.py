"""pkg-config's setup hook: PKG_CONFIG_PATH over the host inputs' ``lib/pkgconfig`` and ``share/pkgconfig``.

Nixpkgs: pkgs/development/tools/misc/pkg-config/setup-hook.sh (addPkgConfigPath).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["SUBDIRS", "setup"]

SUBDIRS = ("lib/pkgconfig", "share/pkgconfig")


def setup(env: dict[str, str], closures: Any, *, base: Mapping[str, str]) -> None:
    """Prepend the host inputs' pkg-config dirs to PKG_CONFIG_PATH."""
    found = [os.path.join(p, d) for p in closures.host for d in SUBDIRS if os.path.isdir(os.path.join(p, d))]
    inherited = [e for e in base.get("PKG_CONFIG_PATH", "").split(os.pathsep) if e]
    merged = list(dict.fromkeys([*found, *inherited]))
    if merged:
        env["PKG_CONFIG_PATH"] = os.pathsep.join(merged)
