"""License records and the unfree gate (Nixpkgs' `lib.licenses` and `allowUnfreeCudaPredicate`).

A package's `meta.license` is a `License`, a list of them, or a `LicenseExpression`
(Nixpkgs' compound form with `licenseType`). This module imports nothing from
`cudapkgs.config`; it reads the configuration through `permits_unfree()` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any, Literal, TypeAlias

from . import errors
from .lib.records import FrozenRecord

__all__ = [
    "License",
    "LicenseExpression",
    "LicenseValue",
    "CUDA_LICENSE_NAMES",
    "allow_unfree_cuda_predicate",
    "check_unfree_allowed",
    "cuda_licenses",
    "evaluate_property",
    "is_free",
    "license_for_redist",
    "license_names",
]


class License(FrozenRecord):
    """One license, as in Nixpkgs' `lib.licenses` (an immutable value: equal when every field is)."""

    __slots__ = ("short_name", "full_name", "free", "redistributable", "spdx_id")
    short_name: str
    full_name: str
    free: bool
    redistributable: bool
    spdx_id: str | None

    def __init__(self, short_name: str, full_name: str, free: bool, redistributable: bool,
                 spdx_id: str | None = None) -> None:
        self._init(short_name, full_name, free, redistributable, spdx_id)

    def to_nix(self) -> dict[str, Any]:
        """The Nix attribute set, e.g. ``{"shortName": "CUDA EULA", ...}``."""
        record: dict[str, Any] = {
            "shortName": self.short_name,
            "fullName": self.full_name,
            "free": self.free,
            "redistributable": self.redistributable,
        }
        if self.spdx_id is not None:
            record["spdxId"] = self.spdx_id
        return record


class LicenseExpression(FrozenRecord):
    """A compound license: all of `licenses` ("and") or any one of them ("or"); raises ValueError
    for another `license_type`."""

    __slots__ = ("license_type", "licenses")
    license_type: Literal["and", "or"]
    licenses: tuple[License | LicenseExpression, ...]

    def __init__(self, license_type: Literal["and", "or"], licenses: Iterable[License | LicenseExpression]) -> None:
        if license_type not in ("and", "or"):
            raise ValueError(f'license_type must be "and" or "or", not {license_type!r}')
        # Accept any iterable, but keep the record hashable.
        self._init(license_type, tuple(licenses))

    def to_nix(self) -> dict[str, Any]:
        return {"licenseType": self.license_type, "licenses": [l.to_nix() for l in self.licenses]}


# a type alias for type checkers (a string at run time: no `typing.Union` without importing typing)
LicenseValue: TypeAlias = "License | LicenseExpression | list[License] | tuple[License, ...] | None"

_CUDA_EULA = "CUDA Toolkit End User License Agreement (EULA)"

nvidiaCuda = License("CUDA EULA", _CUDA_EULA, free=False, redistributable=False)
nvidiaCudaRedist = License("CUDA EULA", _CUDA_EULA, free=False, redistributable=True)
cudnn = License(
    "cuDNN EULA",
    "cuDNN SUPPLEMENT TO SOFTWARE LICENSE AGREEMENT FOR NVIDIA SOFTWARE DEVELOPMENT KITS",
    free=False,
    redistributable=False,
)
cusparse_lt = License(
    "cuSPARSELt EULA",
    "cuSPARSELt SUPPLEMENT TO SOFTWARE LICENSE AGREEMENT FOR NVIDIA SOFTWARE DEVELOPMENT KITS",
    free=False,
    redistributable=False,
)
cutensor = License(
    "cuTENSOR EULA",
    "cuTENSOR SUPPLEMENT TO SOFTWARE LICENSE AGREEMENT FOR NVIDIA SOFTWARE DEVELOPMENT KITS",
    free=False,
    redistributable=False,
)
tensorrt = License(
    "TensorRT EULA",
    "TensorRT SUPPLEMENT TO SOFTWARE LICENSE AGREEMENT FOR NVIDIA SOFTWARE DEVELOPMENT KITS",
    free=False,
    redistributable=False,
)
math_sdk_sla = License(
    "NVIDIA Math SDK SLA",
    "LICENSE AGREEMENT FOR NVIDIA MATH LIBRARIES SOFTWARE DEVELOPMENT KITS",
    free=False,
    redistributable=False,
)

mit = License("MIT", "MIT License", free=True, redistributable=True, spdx_id="MIT")
bsd3 = License(
    'BSD-3-Clause', 'BSD 3-clause "New" or "Revised" License', free=True, redistributable=True, spdx_id="BSD-3-Clause"
)
asl20 = License("Apache-2.0", "Apache License 2.0", free=True, redistributable=True, spdx_id="Apache-2.0")
# Nixpkgs lib/licenses.nix: issl (free = false; redistributable defaults to free) and
# unfreeRedistributable (free = false, redistributable = true); torch-bin's license with bsd3.
issl = License("issl", "Intel Simplified Software License", free=False, redistributable=False)
unfreeRedistributable = License("unfreeRedistributable", "Unfree redistributable", free=False, redistributable=True)

# Nixpkgs' `cudaLicenses` (nvidiaCutlassDsl is left out: its record was not retrieved).
_CUDA_LICENSES: tuple[License, ...] = (
    nvidiaCuda,
    nvidiaCudaRedist,
    cudnn,
    cusparse_lt,
    cutensor,
    tensorrt,
    math_sdk_sla,
)

CUDA_LICENSE_NAMES: frozenset[str] = frozenset(l.short_name for l in _CUDA_LICENSES)

# Per-package licenses that override buildRedist's default (§7.2), by pname.
_PNAME_LICENSES: dict[str, License] = {
    "cudnn": cudnn,
    "tensorrt": tensorrt,
    "libcusparse_lt": cusparse_lt,
    "libcutensor": cutensor,
}


def cuda_licenses() -> tuple[License, ...]:
    """NVIDIA's CUDA licenses, which `allow_unfree_cuda_predicate` accepts."""
    return _CUDA_LICENSES


# The license names data/redist_components.toml may use (Nixpkgs' attribute names).
LICENSES_BY_NAME: dict[str, License] = {
    "cudnn": cudnn,
    "nvidiaCusparse_lt": cusparse_lt,
    "nvidiaCutensor": cutensor,
    "tensorrt": tensorrt,
    "nvidiaCuda": nvidiaCuda,
    "nvidiaCudaRedist": nvidiaCudaRedist,
    "math_sdk_sla": math_sdk_sla,
}


def license_for_redist(redist_name: str, pname: str, name: str | None = None) -> list[License]:
    """The `meta.license` buildRedist gives a package of NVIDIA's redist `redist_name`.

    `name` is the expression's own license (a key of `LICENSES_BY_NAME`); without it the
    package's known override, else buildRedist's default: nvidiaCudaRedist for the `cuda`
    redist, nvidiaCuda otherwise (buildRedist/default.nix@1dbbce67). libcudss sets none
    (libcudss.nix@1ce00c19), so it has the default.
    """
    if name is not None:
        return [LICENSES_BY_NAME[name]]
    if pname in _PNAME_LICENSES:
        return [_PNAME_LICENSES[pname]]
    if redist_name == "cuda":
        return [nvidiaCudaRedist]
    return [nvidiaCuda]


def evaluate_property(f: Callable[[Any], bool], default: bool, license_value: Any) -> bool:
    """Fold `f` over a license value: "and" needs all, "or" any; empty gives `default`."""
    if isinstance(license_value, LicenseExpression):
        results = [evaluate_property(f, default, l) for l in license_value.licenses]
        if not results:
            return default
        return all(results) if license_value.license_type == "and" else any(results)
    if isinstance(license_value, (list, tuple)):
        results = [evaluate_property(f, default, l) for l in license_value]
        return all(results) if results else default
    return bool(f(license_value))


def _field(license: Any, key: str, attr: str, default: Any) -> Any:
    """`license.<key> or default`, for License records and Nix-style mappings alike."""
    if isinstance(license, Mapping):
        return license.get(key, default)
    return getattr(license, attr, default)


def _as_list(license_value: Any) -> list[Any]:
    # Nix's `toList`; a missing license counts as no licenses.
    if license_value is None:
        return []
    if isinstance(license_value, (list, tuple)):
        return list(license_value)
    return [license_value]


def _is_expression(license_value: Any) -> bool:
    if isinstance(license_value, LicenseExpression):
        return True
    return isinstance(license_value, Mapping) and "licenseType" in license_value


def _to_expression(license_value: Any) -> Any:
    """Turn a Nix-style ``{"licenseType": ..., "licenses": [...]}`` mapping into a `LicenseExpression`."""
    if isinstance(license_value, Mapping) and "licenseType" in license_value:
        return LicenseExpression(
            license_value["licenseType"], tuple(_to_expression(l) for l in license_value.get("licenses", ()))
        )
    return license_value


def _meta_license(package: Any) -> Any:
    meta = package.get("meta") if isinstance(package, Mapping) else getattr(package, "meta", None)
    if meta is None:
        return None
    return _field(meta, "license", "license", None)


def allow_unfree_cuda_predicate(package: Any) -> bool:
    """Nixpkgs' `allowUnfreeCudaPredicate`: true when every license is free or one of NVIDIA's CUDA licenses."""
    license_value = _meta_license(package)
    if _is_expression(license_value):
        # Compound expressions compare whole records, as Nixpkgs does.
        nix_records = [l.to_nix() for l in _CUDA_LICENSES]

        def allowed(l: Any) -> bool:
            if _field(l, "free", "free", False):
                return True
            return (l.to_nix() if isinstance(l, License) else l) in nix_records

        return evaluate_property(allowed, True, _to_expression(license_value))
    return all(
        _field(l, "free", "free", False) or _field(l, "shortName", "short_name", None) in CUDA_LICENSE_NAMES
        for l in _as_list(license_value)
    )


def is_free(license_value: Any) -> bool:
    """True when the license value does not make a package unfree."""
    # Nixpkgs' check-meta reads `l.free or true`: a license that does not say is free.
    if _is_expression(license_value):
        return evaluate_property(lambda l: bool(_field(l, "free", "free", True)), True, _to_expression(license_value))
    return all(_field(l, "free", "free", True) for l in _as_list(license_value))


def _leaves(license_value: Any) -> Iterator[Any]:
    license_value = _to_expression(license_value)
    if isinstance(license_value, LicenseExpression):
        for l in license_value.licenses:
            yield from _leaves(l)
    else:
        for l in _as_list(license_value):
            if isinstance(l, (LicenseExpression, Mapping)) and _is_expression(l):
                yield from _leaves(l)
            else:
                yield l


def license_names(license_value: Any, *, unfree_only: bool = False) -> str:
    """Short names for messages, e.g. "CUDA EULA" or "cuDNN EULA, MIT"; duplicates dropped."""
    names: list[str] = []
    for l in _leaves(license_value):
        if unfree_only and _field(l, "free", "free", True):
            continue
        name = _field(l, "shortName", "short_name", None) or _field(l, "fullName", "full_name", None) or str(l)
        if name not in names:
            names.append(name)
    return ", ".join(names)


def check_unfree_allowed(config: Any, package: Any, *, name: str) -> None:
    """Raise `UnfreeLicenseError` unless `package` is free or `config` permits it."""
    license_value = _meta_license(package)
    if is_free(license_value) or config.permits_unfree(package):
        return
    names = license_names(license_value, unfree_only=True) or license_names(license_value)
    if allow_unfree_cuda_predicate(package):
        how = ("Allow it with --set allowUnfree=true, or --set allowUnfreePredicate=cuda "
               "(NVIDIA's CUDA licenses only), or that key in ~/.config/cudapkgs/config.toml.")
    else:  # "cuda" would not do: naming it sent users round in a circle
        how = ("Allow it with --set allowUnfree=true, or that key in ~/.config/cudapkgs/config.toml "
               f"(allowUnfreePredicate=cuda covers NVIDIA's CUDA licenses only, not {names}).")
    raise errors.UnfreeLicenseError(f'Package "{name}" has an unfree license ("{names}"), refusing to use it. ' + how)
