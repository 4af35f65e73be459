"""multiple-outputs.sh's propagation: the dev output carries the package's propagated inputs and outputs.

Nixpkgs: pkgs/build-support/setup-hooks/multiple-outputs.sh (``_multioutPropagateDev``)
and pkgs/stdenv/generic/setup.sh (``propagatedBuildInputs`` and
``propagatedNativeBuildInputs`` written to ``$outputDev/nix-support/``).  With
more than one output, the dev output (else the first) propagates
``propagatedBuildOutputs``, by default the bin, include and lib outputs
(``outputBin``, ``outputInclude``, ``outputLib``) other than itself, so that a
dependent naming the package (its dev output) gets all of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path  # annotations; pathlib is imported where a path is made
    from typing import Any


__all__ = ["output_for", "propagate"]

_FALLBACKS = {
    "outputDev": ("dev",),
    "outputBin": ("bin",),
    "outputInclude": ("include", "dev"),
    "outputLib": ("lib",),
}


def output_for(var: str, outputs: Sequence[str]) -> str:
    """multiple-outputs.sh's choice for `var` (outputDev, outputBin, …): the first present fallback, else the first output."""
    return next((o for o in _FALLBACKS[var] if o in outputs), outputs[0])


def propagate(outputs: Mapping[str, Path], final: Mapping[str, str], attrs: Mapping[str, Any]) -> dict[str, list[str]]:
    """Write the dev output's propagated files; return {file: paths written}.

    `outputs` are the directories being filled, `final` their store paths, `attrs`
    the derivation's (``propagatedBuildInputs``, ``propagatedNativeBuildInputs``:
    store paths; ``propagatedBuildOutputs``: output names, or absent for the default).
    """
    from pathlib import Path

    names = list(outputs)
    dev = output_for("outputDev", names)
    build = list(attrs.get("propagatedBuildInputs") or ())
    if len(names) > 1:
        chosen = attrs.get("propagatedBuildOutputs")
        if chosen is None:
            chosen = [output_for(v, names) for v in ("outputBin", "outputInclude", "outputLib")]
        build += [final[o] for o in dict.fromkeys(chosen) if o in final and o != dev]
    native = list(attrs.get("propagatedNativeBuildInputs") or ())
    written: dict[str, list[str]] = {}
    for relative, paths in ((PROPAGATED_BUILD, build), (PROPAGATED_NATIVE, native)):
        paths = list(dict.fromkeys(paths))
        if not paths:
            continue
        target = Path(outputs[dev]) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(" ".join(paths) + "\n")
        written[os.fspath(relative)] = paths
    return written


PROPAGATED_BUILD = "nix-support/propagated-build-inputs"


PROPAGATED_NATIVE = "nix-support/propagated-native-build-inputs"
