"""tests/redist-variants.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b: which archive of a release a set
takes, by CUDA variant (patch, then minor, then major; another patch or minor never), with ``source``
and ``linux-all`` winning over per-system archives. Checked while evaluating, on synthetic releases
through the same `Release.supported_releases` every component uses."""

from __future__ import annotations

from typing import Any

from ...manifests.model import Artifact, Release
from .common import TOUCH, check, evaluated, run_command


def _payload(name: str) -> Artifact:
    return Artifact(relative_path=f"{name}.tar.xz", sha256="0" * 64, md5=None, size=None)


def _select(cuda: Any, variants: tuple[str, ...] | None, systems: dict[str, Any]) -> dict[str, str]:
    release = Release(pname="variant-selection-test", name="variant-selection-test", license=None,
                      license_path=None, version="1.0", cuda_variants=variants, systems=systems)
    chosen = release.supported_releases(cuda.cudaMajorMinorPatchVersion)
    return {system: artifact.relative_path.removesuffix(".tar.xz") for system, artifact in chosen.items()}


def cases(cuda: Any) -> dict[str, tuple[Any, dict[str, str]]]:
    """name -> (what `_select` returns, what Nixpkgs expects), the test file's eight cases."""
    mj, mm, mmp = cuda.cudaMajorVersion, cuda.cudaMajorMinorVersion, cuda.cudaMajorMinorPatchVersion
    major, minor, patch = f"cuda{mj}", f"cuda{mm}", f"cuda{mmp}"
    other_minor, other_patch = f"cuda{mj}.9999", f"cuda{mm}.9999"
    p = _payload
    return {
        "PatchPreferenceAndMinorFallback": (
            _select(cuda, (mj, mm, mmp, f"{mm}.9999"), {
                "linux-x86_64": {major: p("major"), minor: p("minor"), patch: p("patch"), other_patch: p("wrong-patch")},
                "linux-sbsa": {minor: p("arm-minor"), other_patch: p("wrong-patch")},
            }),
            {"linux-x86_64": "patch", "linux-sbsa": "arm-minor"}),
        "RejectOtherPatch": (_select(cuda, (f"{mm}.9999",), {"linux-x86_64": {other_patch: p("wrong-patch")}}), {}),
        "ExactMinor": (
            _select(cuda, (mm,), {"linux-x86_64": {minor: p("minor")}, "linux-sbsa": {minor: p("arm-minor")}}),
            {"linux-x86_64": "minor", "linux-sbsa": "arm-minor"}),
        "MajorFallbackAndMinorPreference": (
            _select(cuda, (mj, mm), {"linux-x86_64": {major: p("major"), minor: p("minor")},
                                     "linux-sbsa": {major: p("arm-major")}}),
            {"linux-x86_64": "minor", "linux-sbsa": "arm-major"}),
        "RejectOtherMinor": (_select(cuda, (f"{mj}.9999",), {"linux-x86_64": {other_minor: p("wrong-minor")}}), {}),
        "UnversionedPlatform": (_select(cuda, None, {"linux-x86_64": p("unversioned")}), {"linux-x86_64": "unversioned"}),
        "UniversalPriority": (_select(cuda, None, {"linux-all": p("universal"), "linux-x86_64": p("platform")}),
                              {"linux-all": "universal"}),
        "SourcePriority": (_select(cuda, None, {"source": p("source"), "linux-all": p("universal"),
                                                "linux-x86_64": p("platform")}), {"source": "source"}),
    }


def redist_variants(cuda: Any, config: Any, system: str) -> Any:
    """The redist-variants test of the set `cuda`."""
    def checks() -> None:
        failures = {name: got for name, (got, expected) in cases(cuda).items() if got != expected}
        check(cuda, "redist-variants", not failures, f"failed cases: {failures}")

    return run_command(cuda, config, "redist-variants", TOUCH, {"assertionsHold": evaluated(checks)})
