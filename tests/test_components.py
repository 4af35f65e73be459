"""The component table: membership, outputs, dependency conditions."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cudapkgs.cuda.components import component_specs, parse_condition

from conftest import MANIFESTS

# In the manifests but not packaged (as in Nixpkgs): the driver, Windows-only tools.
NOT_PACKAGED = {"nvidia_driver", "visual_studio_integration", "nsight_vse"}
# In the manifests, but the newest Nixpkgs has no expression for them: no attribute
# (NixOS/nixpkgs pkgs/development/cuda-modules/packages/ has neither cudnn_jit.nix nor
# cuda_compat_orin.nix at 1dbbce67809cafa79ee16b2100ac05ebd23e267b; the set is by-name).
NOT_IN_NIXPKGS = {"cudnn_jit", "cuda_compat_orin"}
NOT_PACKAGED |= NOT_IN_NIXPKGS


def test_every_manifest_component_has_an_entry():
    in_manifests: dict[str, set[str]] = {}
    for path in MANIFESTS.glob("*/redistrib_*.json"):
        data = json.loads(path.read_text())
        names = {k for k, v in data.items() if isinstance(v, dict)}
        in_manifests.setdefault(path.parent.name, set()).update(names)
    specs = component_specs()
    for product, names in in_manifests.items():
        assert names - NOT_PACKAGED <= set(specs[product]), (product, sorted(names - NOT_PACKAGED - set(specs[product])))


def test_outputs_follow_nixpkgs_for_cudart():
    cudart = component_specs()["cuda"]["cuda_cudart"]
    assert cudart.outputs == ("out", "dev", "include", "lib", "static", "stubs")
    assert cudart.propagated_build_outputs == ("static", "stubs")


@pytest.mark.parametrize(
    ("when", "cuda_mm", "version", "jetson", "expected"),
    [
        ("CUDA >= 13.0 (copied to nvvm/)", "13.0", "1", False, True),
        ("CUDA >= 13.0", "12.9", "1", False, False),
        ("CUDA < 13.0 (nvPTXCompiler.h symlink)", "12.9", "1", False, True),
        ("libcublas version >= 12.8 (libcublasLt dlopens libnvrtc)", "13.0", "12.8.5.5", False, True),
        ("libcublas version >= 12.8", "12.6", "12.6.4.1", False, False),
        ("Jetson CUDA capability", "12.6", "1", True, True),
        ("Jetson CUDA capability and cuda_compat != null", "12.6", "1", False, False),
    ],
)
def test_conditions(when, cuda_mm, version, jetson, expected):
    cuda = SimpleNamespace(cudaMajorMinorVersion=cuda_mm, backendStdenv=SimpleNamespace(hasJetsonCudaCapability=jetson))
    assert parse_condition(when)(SimpleNamespace(version=version), cuda) is expected


def test_an_unreadable_condition_is_an_error_not_a_missing_edge():
    with pytest.raises(ValueError, match="cannot read the dependency condition 'when the moon is full'"):
        parse_condition("when the moon is full")
