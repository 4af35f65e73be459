"""cudaComponentHook: CUDA components publish who they are; a build collects them from its inputs.

Nixpkgs: pkgs/development/cuda-modules/packages/cudaComponentHook/{package.nix,cuda-component-hook.sh}
@1ac181a172c70d43e3336c1756d86e6a35f2eccb. A *component* is a package output that contributes a
compiler, headers or libraries (every redist, and any package with ``cudaPublishComponent``).

- `publish` (postFixup): each output of a publishing package gets ``nix-support/cuda-component``,
  the metadata (format 3: component, output, cudaComponentVersion, cudaMajorMinorVersion,
  compiler), and the hook's name in ``nix-support/cudapkgs-setup-hook``, so that every consumer
  collects. A compiler (``cudaCompilerExecutable``, relative to its output) publishes its
  outputBin only. Nixpkgs writes the metadata as Bash's ``declare -p``, sourced by the consumer;
  here it is JSON, read (bounded) and checked field by field, so an input cannot run code.
- `collect` (environment setup): the components among the inputs, by role. One CUDA release per
  role (``NIX_CUDA_MAJOR_MINOR_VERSION``: "conflicting CUDA major-minor versions"), one path per
  role, component and output ("conflicting output cuda_cudart:out"), and a compiler among the
  native inputs becomes ``NIX_CUDA_COMPILER``/``NIX_CUDA_COMPILER_ROOT`` and the default of
  ``CUDACXX`` and ``CUDAToolkit_ROOT`` (a caller's own values win). Roles: with strictDeps,
  host inputs and native compilers (which emit code for the build's host) are the host role,
  other native components the build role (variables suffixed ``_FOR_BUILD``); without
  strictDeps every input is one role, as the hook's ``*:*`` key.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import confine
from .errors import FixupError

__all__ = ["METADATA", "NAME", "ComponentError", "collect", "publish"]

NAME = "cudaComponentHook"
METADATA = "nix-support/cuda-component"
SETUP_HOOK = "nix-support/cudapkgs-setup-hook"
FIELDS = frozenset({"format", "component", "output", "cudaMajorMinorVersion", "cudaComponentVersion", "compiler"})
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_LIMIT = 64 * 1024


class ComponentError(FixupError):
    """Component metadata that is invalid or conflicts with another input's (one line, naming both)."""


def _identifier(description: str, value: Any) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ComponentError(f"cuda-component-hook: invalid {description}: {value}")
    return value


def _compiler_path(root: str, compiler: str) -> str:
    """The compiler's absolute path: relative to its output, never outside it, an executable file."""
    if compiler.startswith("/") or ".." in compiler.split("/"):
        raise ComponentError(f"cuda-component-hook: compiler must be relative to its component output: {compiler}")
    path = os.path.join(root, compiler)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ComponentError(f"cuda-component-hook: compiler is not an executable file: {path}")
    return path


def publish(outputs: Mapping[str, Path], attrs: Mapping[str, Any]) -> list[Path]:
    """Write each published output's metadata and hook marker; nothing without ``cudaPublishComponent``.

    `outputs`: output name -> directory being filled; `attrs`: the derivation's attributes
    (pname, version, cudaComponentName/Version, cudaMajorMinorVersion, cudaCompilerExecutable,
    outputBin). Returns the metadata files written. Raises `ComponentError` for an invalid name
    or a compiler that is not an executable file inside its output.
    """
    if not attrs.get("cudaPublishComponent"):
        return []
    component = _identifier("component name", attrs.get("cudaComponentName") or attrs.get("pname"))
    version = attrs.get("cudaComponentVersion") or attrs.get("version")
    if not version:
        raise ComponentError(f"cuda-component-hook: cudaComponentVersion is required for {component}")
    metadata: dict[str, Any] = {"format": 3, "component": component, "cudaComponentVersion": str(version)}
    if attrs.get("cudaMajorMinorVersion"):
        metadata["cudaMajorMinorVersion"] = str(attrs["cudaMajorMinorVersion"])
    compiler = attrs.get("cudaCompilerExecutable") or ""
    if compiler:
        metadata["compiler"] = compiler
        bin_output = attrs.get("outputBin") if attrs.get("outputBin") in outputs else "out"
        names = [bin_output]
    else:
        names = list(outputs)
    written = []
    for name in names:
        root = outputs[name]
        _identifier("output name", name)
        if compiler:
            _compiler_path(os.fspath(root), compiler)
        support = Path(root) / "nix-support"
        confine.require_real_dirs(root, support / "cuda-component", include_self=True)
        support.mkdir(parents=True, exist_ok=True)
        (support / "cuda-component").write_text(json.dumps({**metadata, "output": name}, sort_keys=True) + "\n")
        hooks_file = support / "cudapkgs-setup-hook"
        present = hooks_file.read_text().split() if hooks_file.is_file() else []
        if NAME not in present:
            # Registration first, as the hook prepends its `source` line to an existing setup hook.
            hooks_file.write_text(" ".join([NAME, *present]) + "\n")
        written.append(support / "cuda-component")
    return written


def read_metadata(path: str) -> dict[str, Any] | None:
    """The metadata an input output publishes, None when it is no component; `ComponentError`
    for a file that is not a small regular JSON object with known fields in format 3."""
    from ..inputs import InputFileError, read_input_file

    file = os.path.join(path, METADATA)
    if not os.path.lexists(file):
        return None
    try:  # a regular file, read without blocking and bounded (an input is hostile)
        text = read_input_file(file, what="component metadata", max_bytes=_LIMIT).decode("utf-8", "replace")
    except InputFileError as error:
        raise ComponentError(f"cuda-component-hook: {error}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise ComponentError(f"cuda-component-hook: invalid component metadata in {file}") from None
    if not isinstance(data, dict):
        raise ComponentError(f"cuda-component-hook: invalid component metadata in {file}")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise ComponentError(f'cuda-component-hook: unknown field "{unknown[0]}" in {file}')
    if data.get("format") != 3 or not data.get("component") or not data.get("output") \
            or not data.get("cudaComponentVersion"):
        raise ComponentError(f"cuda-component-hook: invalid component metadata in {file}")
    _identifier("component name", data["component"])
    _identifier("output name", data["output"])
    return data


def _export_unique(env: dict[str, str], name: str, value: str, description: str, base: Mapping[str, str]) -> None:
    existing = env.get(name) or base.get(name)
    if existing and existing != value:
        raise ComponentError(
            f"cuda-component-hook: conflicting {description} for {name}: existing {existing}, new {value}"
        )
    env[name] = value


def collect(env: dict[str, str], native: Sequence[str], host: Sequence[str], *, strict: bool,
            base: Mapping[str, str] = {}) -> dict[str, str]:
    """Collect the components among the input paths into `env` (see the module docstring).

    `native`/`host`: the input paths of each kind, propagation included, in order; `base`: the
    variables the caller set (``env`` of the derivation), which are never replaced. Returns the
    registry ``"<role>:<component>:<output>" -> path``. Raises `ComponentError` on a conflict.
    """
    registry: dict[str, str] = {}
    roles = [("native", p) for p in native] + [("host", p) for p in host]
    seen: set[tuple[str, str]] = set()
    for kind, path in roles:
        data = read_metadata(path)
        if data is None:
            continue
        compiler = data.get("compiler") or ""
        if not strict:
            role, suffix = "*:*", ""
        elif kind == "host" or compiler:
            role, suffix = "host", ""
        else:
            role, suffix = "build", "_FOR_BUILD"
        if (role, path) in seen:
            continue
        seen.add((role, path))
        compiler_path = _compiler_path(path, compiler) if compiler else ""
        if data.get("cudaMajorMinorVersion"):
            _export_unique(env, f"NIX_CUDA_MAJOR_MINOR_VERSION{suffix}", str(data["cudaMajorMinorVersion"]),
                           "CUDA major-minor versions", {})
        key = f"{role}:{data['component']}:{data['output']}"
        existing = registry.get(key)
        if existing is not None and existing != path:
            raise ComponentError(
                f"cuda-component-hook: conflicting output {data['component']}:{data['output']} for dependency "
                f"role {role}: existing {existing}, new {path}"
            )
        registry[key] = path
        # A compiler is a build tool only when it runs here: among the native inputs.
        if compiler and (not strict or kind == "native"):
            _export_unique(env, f"NIX_CUDA_COMPILER{suffix}", compiler_path, "CUDA compilers", {})
            _export_unique(env, f"NIX_CUDA_COMPILER_ROOT{suffix}", path, "CUDA compiler roots", {})
            if not base.get("CUDACXX"):
                env["CUDACXX"] = compiler_path
            if not base.get("CUDAToolkit_ROOT") and not env.get("CUDAToolkit_ROOT"):
                env["CUDAToolkit_ROOT"] = path
    return registry
