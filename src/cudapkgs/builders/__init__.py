"""Builders' default phases, one module each (the generic phases are `cudapkgs.realise.generic`).

| module | Nixpkgs | fires when |
| --- | --- | --- |
| `make` | stdenv's default buildPhase/installPhase | always (a Makefile in the source) |
| `cmake` | cmake's setup-hook (cmakeConfigurePhase) | `cmake` is a native input |
| `python` | buildPythonPackage (pypaBuildHook, pypaInstallHook) | `python3Packages.buildPythonPackage` |
| `rewired_wheel` (+ `_steps`) | torch-bin's wheel install + autoPatchelf + autoAddDriverRunpath, pythonRelaxDeps | a PyPI wheel rewired to a set (torch, triton; NCCL/NVSHMEM wheels) |
"""

from __future__ import annotations


def __getattr__(name: str) -> object:
    """``AHEAD`` (`builders.ahead`: what was done for a build before its inputs were built), imported
    when read: a ContextVar, whose module (contextvars) evaluating a package does not need.  Read as
    ``from . import AHEAD`` by `rewired_wheel_steps.install`, whose source text is hashed into every
    rewired wheel's derivation (`stdenv.generic.python_step`): it stays as it was."""
    if name == "AHEAD":
        from .ahead import AHEAD

        return AHEAD
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
