"""`cudaPackages.tests`: the attribute of each ported test and the module that makes it.

Names are Nixpkgs' (pkgs/development/cuda-modules/packages/tests/<name>.nix); each module has a
function of the module's name taking (scope, config, system) and returning the test package (or
an attribute set of them). Loaded on first read, one module per test.
"""

from __future__ import annotations

import importlib
from typing import Any

from ...lib.fixpoint import AttrSet, lazy

# attribute -> (module, function)
TESTS: dict[str, tuple[str, str]] = {
    "redists-unpacked": ("cudapkgs.cuda.aggregates", "redists_unpacked"),
    "redists-installed": ("cudapkgs.cuda.aggregates", "redists_installed"),
}


def tests(scope: Any, config: Any, system: str) -> AttrSet:
    """The set's `tests` attribute: every entry of `TESTS`, lazily."""

    def make(module: str, function: str) -> Any:
        return getattr(importlib.import_module(module), function)(scope, config, system)

    return AttrSet(
        {name: lazy(lambda m=m, f=f: make(m, f)) for name, (m, f) in TESTS.items()},
        name=f"{scope.attr_path}.tests",
    )
