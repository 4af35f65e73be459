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
    """Prepend the inputs' site-packages to PYTHONPATH.

    Run as root, with store site-packages on PYTHONPATH, also ``PYTHONDONTWRITEBYTECODE=1`` (unless
    `base` sets it): any interpreter started there (the store's ``python3``, which is the host's
    behind a link, ``python3 -S``) imports the store's modules through PYTHONPATH, where no ``.pth``
    is run, so `pycache_guard` cannot be installed, and root ignores the store's read-only modes:
    a module without valid byte code for that interpreter had its ``__pycache__/*.pyc`` written into
    the store path (`cudapkgs verify`: hash-mismatch). A deviation from Nixpkgs' hook, whose store is a
    read-only mount. Any other user cannot write there, so nothing is set for them.
    """
    found = site_packages_dirs(list(dict.fromkeys([*closures.host, *closures.native])))
    inherited = [e for e in base.get("PYTHONPATH", "").split(os.pathsep) if e]
    merged = list(dict.fromkeys([*found, *inherited]))
    if merged:
        env["PYTHONPATH"] = os.pathsep.join(merged)
    if found and _as_root() and "PYTHONDONTWRITEBYTECODE" not in base:
        env["PYTHONDONTWRITEBYTECODE"] = "1"


def _as_root() -> bool:
    return os.geteuid() == 0
