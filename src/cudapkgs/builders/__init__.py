"""Builders' default phases, one module each (the generic phases are `cudapkgs.realise.generic`).

| module | Nixpkgs | fires when |
| --- | --- | --- |
| `make` | stdenv's default buildPhase/installPhase | always (a Makefile in the source) |
| `cmake` | cmake's setup-hook (cmakeConfigurePhase) | `cmake` is a native input |
| `python` | buildPythonPackage (pypaBuildHook, pypaInstallHook) | `python3Packages.buildPythonPackage` |
| `rewired_wheel` (+ `_steps`) | torch-bin's wheel install + autoPatchelf + autoAddDriverRunpath, pythonRelaxDeps | a PyPI wheel rewired to a set (torch, triton; NCCL/NVSHMEM wheels) |
"""

from __future__ import annotations

from contextvars import ContextVar
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

#: What was done for the build running in this context before its inputs were built (an install
#: of a rewired wheel, `cudapkgs.realise.install_ahead`), for its Python steps to take; None when
#: nothing was.  Set by the generic builder around the phases.
AHEAD: ContextVar[Any] = ContextVar("cudapkgs_build_ahead", default=None)
