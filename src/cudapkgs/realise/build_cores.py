"""How many cores one build may use: NIX_BUILD_CORES, as Nix's ``cores`` setting."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["CORES_VARIABLE", "build_cores"]

CORES_VARIABLE = "CUDAPKGS_CORES"  # set by `cudapkgs build --cores N`


def build_cores(environ: Mapping[str, str] | None = None) -> int:
    """NIX_BUILD_CORES of a build here: how many cores one build may use (its ``make -j``/``ninja -j``).

    Nix's ``cores`` setting (nix.conf; ``--cores`` on the command line; manual, "Tuning Cores and
    Jobs"): NIX_BUILD_CORES is ``cores``, or every CPU of the machine when it is 0 or unset. Here it
    comes from ``$CUDAPKGS_CORES`` (what ``cudapkgs build --cores N`` sets). It is the build's
    environment, not its derivation: the store path does not change with it. Raises `ConfigError`
    for a value that is not a whole number ≥ 0.
    """
    value = (os.environ if environ is None else environ).get(CORES_VARIABLE, "").strip()
    every = os.cpu_count() or 1
    if not value:
        return every
    if not value.isdigit() or len(value) > 6:
        from ..errors import ConfigError

        raise ConfigError(f"{CORES_VARIABLE}={value!r}: the number of cores a build may use must be a whole "
                          "number (0: every CPU)")
    return int(value) or every
