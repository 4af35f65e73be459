"""backendStdenv: a set's target capabilities, redist system and evaluation assertions.

Follows Nixpkgs' mainline `cuda-modules/backendStdenv`: the capabilities are the
user's `cudaCapabilities` or the set's defaults, and reading any attribute checks
the assertions (unrecognized / too old / too new capabilities, Jetson rules), all
failures reported together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .. import db
from ..errors import FailedAssertionsError
from ..lib.fixpoint import AttrSet
from ..platform import get_redist_system, jetson_min_sbsa_capability
from ..lib.versions import version_at_least, version_older

Assertion = tuple[bool, str]


def _json(items: Sequence[str]) -> str:
    return json.dumps(list(items), separators=(",", ":"))


def failed_assertions_string(assertions: Sequence[Assertion]) -> str:
    """Nixpkgs' _mkFailedAssertionsString: "\\n- message" for every failed assertion."""
    return "".join("\n- " + message for ok, message in assertions if not ok)


def capability_lists(
    cuda_major_minor: str, requested: Sequence[str], info: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The capability attributes of backendStdenv (no assertions checked)."""
    supported = db.supported_capabilities(cuda_major_minor, info)
    default = db.default_capabilities(cuda_major_minor, info)
    capabilities = list(requested) if requested else default

    def having(flag: str) -> list[str]:
        return [c for c in capabilities if c in info and info[c][flag]]

    jetson = having("isJetson")
    arch_specific = having("isArchitectureSpecific")
    family_specific = having("isFamilySpecific")
    return {
        "supportedCudaCapabilities": supported,
        "defaultCudaCapabilities": default,
        "cudaCapabilities": capabilities,
        "requestedJetsonCudaCapabilities": jetson,
        "hasJetsonCudaCapability": bool(jetson),
        "requestedArchitectureSpecificCudaCapabilities": arch_specific,
        "hasArchitectureSpecificCudaCapability": bool(arch_specific),
        "requestedFamilySpecificCudaCapabilities": family_specific,
        "hasFamilySpecificCudaCapability": bool(family_specific),
    }


def assertions(
    cuda_major_minor: str,
    capabilities: Sequence[str],
    jetson: Sequence[str],
    host_nix_system: str,
    host_redist_system: str,
    info: Mapping[str, Mapping[str, Any]],
) -> list[Assertion]:
    """The mainline backendStdenv assertions, in Nixpkgs' order."""
    v = cuda_major_minor
    known = [c for c in capabilities if c in info]
    unrecognized = [c for c in capabilities if c not in info]
    too_old = [
        c for c in known if info[c]["maxCudaMajorMinorVersion"] is not None
        and version_older(info[c]["maxCudaMajorMinorVersion"], v)
    ]
    too_new = [c for c in known if version_older(v, info[c]["minCudaMajorMinorVersion"])]
    # Thor (10.1) splits linux-aarch64 from linux-sbsa; from CUDA 13.0 Orin (8.7) is SBSA too
    # (cudaConfig.nix@1ac181a1: "pre-SBSA (<min>)" wording).
    sbsa_min = jetson_min_sbsa_capability(v)
    era = "pre-Thor (10.1)" if sbsa_min == "10.1" else f"pre-SBSA ({sbsa_min})"
    post_era = "post-Thor (10.1)" if sbsa_min == "10.1" else f"SBSA ({sbsa_min} and newer)"
    pre_thor = [c for c in jetson if version_older(c, sbsa_min)]
    post_thor = [c for c in jetson if version_at_least(c, sbsa_min)]
    others = [c for c in capabilities if c not in pre_thor]
    return [
        (not unrecognized, f"Requested unrecognized CUDA capabilities: {_json(unrecognized)}"),
        (not too_old, f"Requested CUDA capabilities which are too old for CUDA {v}: {_json(too_old)}"),
        (not too_new, f"Requested CUDA capabilities which are too new for CUDA {v}: {_json(too_new)}"),
        (
            not jetson or host_nix_system == "aarch64-linux",
            f"Requested Jetson CUDA capabilities ({_json(jetson)}) require hostPlatform "
            f"({host_nix_system}) to be aarch64-linux",
        ),
        (
            not pre_thor or pre_thor == list(capabilities),
            f"Requested {era} Jetson CUDA capabilities ({_json(pre_thor)}) cannot be "
            f"specified with other capabilities ({_json(others)})",
        ),
        (
            not pre_thor or host_redist_system == "linux-aarch64",
            f"Requested {era} Jetson CUDA capabilities ({_json(pre_thor)}) require computed "
            f"NVIDIA hostRedistSystem ({host_redist_system}) to be linux-aarch64",
        ),
        (
            not post_thor or host_redist_system == "linux-sbsa",
            f"Requested {post_era} Jetson CUDA capabilities ({_json(post_thor)}) require computed "
            f"NVIDIA hostRedistSystem ({host_redist_system}) to be linux-sbsa",
        ),
    ]


CUDA_CONFIG_KEYS = (
    "cudaForwardCompat", "supportedCudaCapabilities", "defaultCudaCapabilities", "cudaCapabilities",
    "requestedJetsonCudaCapabilities", "hasJetsonCudaCapability",
)


def cuda_config(
    *,
    set_name: str,
    cuda_major_minor: str,
    cuda_capabilities: Sequence[str],
    cuda_forward_compat: bool,
    info: Mapping[str, Mapping[str, Any]],
) -> AttrSet:
    """A set's `cudaConfig` (cuda-modules/cudaConfig.nix@1ac181a1): the GPU configuration without
    compilers or platforms. Its assertions are the capability ones (unrecognized, too old, too new,
    pre-SBSA Jetsons mixed with others); raises `FailedAssertionsError`
    "<set>.cudaConfig has failed assertions:…" when one fails."""
    lists = capability_lists(cuda_major_minor, cuda_capabilities, info)
    checks = assertions(
        cuda_major_minor, lists["cudaCapabilities"], lists["requestedJetsonCudaCapabilities"],
        "aarch64-linux", "", info,
    )
    # cudaConfig.nix keeps the first three and the pre-SBSA mixing rule (index 4); the platform
    # rules (3, 5, 6) stay with backendStdenv, which knows the host.
    kept = [checks[i] for i in (0, 1, 2, 4)]
    failures = failed_assertions_string(kept)
    if failures:
        raise FailedAssertionsError(
            f"{set_name}.cudaConfig has failed assertions:{failures}",
            hint=capabilities_hint(cuda_major_minor, info),
        )
    values = {"cudaForwardCompat": cuda_forward_compat, **lists}
    return AttrSet({key: values[key] for key in CUDA_CONFIG_KEYS}, name=f"{set_name}.cudaConfig")


def capabilities_hint(cuda_major_minor: str, info: Mapping[str, Mapping[str, Any]]) -> str:
    """What a user can ask for instead: the capabilities CUDA ``cuda_major_minor`` supports
    (`cudaCapabilities` entries), and the command that lists them with their limits."""
    supported = db.supported_capabilities(cuda_major_minor, info)
    return (f"CUDA {cuda_major_minor} supports the capabilities {', '.join(supported)}; "
            f"`cudapkgs capabilities --cuda {cuda_major_minor}` lists them")


def host_platform(system: str) -> AttrSet:
    """A Nixpkgs-style hostPlatform for a system string such as "aarch64-linux"."""
    cpu, _, kernel = system.partition("-")
    return AttrSet(
        {
            "system": system,
            "isLinux": kernel == "linux",
            "isDarwin": kernel == "darwin",
            "isAarch64": cpu == "aarch64",
            "isx86_64": cpu == "x86_64",
        },
        name="hostPlatform",
    )


def backend_stdenv(
    *,
    set_name: str,
    cuda_major_minor: str,
    cuda_capabilities: Sequence[str],
    cuda_forward_compat: bool,
    system: str,
    info: Mapping[str, Mapping[str, Any]],
) -> AttrSet:
    """Compute a set's backendStdenv; raises FailedAssertionsError if an assertion fails."""
    attrs = capability_lists(cuda_major_minor, cuda_capabilities, info)
    redist_system = get_redist_system(attrs["cudaCapabilities"], cuda_major_minor, system, info)
    checks = assertions(
        cuda_major_minor,
        attrs["cudaCapabilities"],
        attrs["requestedJetsonCudaCapabilities"],
        system,
        redist_system,
        info,
    )
    failures = failed_assertions_string(checks)
    if failures:
        raise FailedAssertionsError(
            f"{set_name}.backendStdenv has failed assertions:{failures}",
            hint=capabilities_hint(cuda_major_minor, info),
        )
    attrs.update(
        {
            "hostNixSystem": system,
            "hostRedistSystem": redist_system,
            "hostPlatform": host_platform(system),
            "cudaForwardCompat": cuda_forward_compat,
        }
    )
    return AttrSet(attrs, name=f"{set_name}.backendStdenv")


def with_compiler(stdenv: AttrSet, backend_cc: Any) -> AttrSet:
    """`stdenv` with its compiler: ``cc`` (the set's `backendCC`, from the thunk `backend_cc`; None
    when the host has no compiler nvcc accepts), ``hasCC``, and ``override``, which returns the
    stdenv with some of its attributes replaced (``override(cc=None)``: ``hasCC`` follows ``cc``
    unless given), as Nixpkgs' stdenv adapters change a stdenv through its ``override``
    (tests/backend-stdenv.nix@1dbbce67: ``backendStdenv.override { cc = null; hasCC = false; }``)."""
    from ..lib.fixpoint import lazy

    def override(changes: Any = None, /, **kw: Any) -> AttrSet:
        new = {**dict(changes or {}), **kw}
        if "cc" in new:
            cc = new["cc"]
            return with_compiler(stdenv, lambda: cc).update(new)
        return with_compiler(stdenv, backend_cc).update(new)

    return stdenv.update({
        "cc": lazy(backend_cc),
        "hasCC": lazy(lambda: backend_cc() is not None),
        "override": override,
    })
