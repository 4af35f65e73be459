"""Python's setup hook: PYTHONPATH over the inputs' ``lib/pythonX.Y/site-packages``.

Nixpkgs: pkgs/development/interpreters/python/setup-hook.sh (addPythonPath).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["site_packages_dirs", "setup"]

_PYDIR = re.compile(r"^python3\.\d+$")


def site_packages_dirs(paths: list[str]) -> list[str]:
    """Every existing ``<path>/lib/python3.N/site-packages`` of `paths`, in order."""
    found = []
    for p in paths:
        lib = os.path.join(p, "lib")
        try:
            names = sorted(n for n in os.listdir(lib) if _PYDIR.match(n))
        except OSError:
            continue
        for n in names:
            d = os.path.join(lib, n, "site-packages")
            if os.path.isdir(d):
                found.append(d)
    return found


def setup(env: dict[str, str], closures: Any, *, base: Mapping[str, str]) -> None:
    """Prepend the inputs' site-packages to PYTHONPATH."""
    found = site_packages_dirs(list(dict.fromkeys([*closures.host, *closures.native])))
    inherited = [e for e in base.get("PYTHONPATH", "").split(os.pathsep) if e]
    merged = list(dict.fromkeys([*found, *inherited]))
    if merged:
        env["PYTHONPATH"] = os.pathsep.join(merged)
