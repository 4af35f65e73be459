"""Tables over the package tree: a set's components and the capability database."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import db, licenses
from .errors import CudapkgsError
from .package import Package


def _status(package: Package) -> str:
    meta = package.meta
    if meta.get("available", True):
        return "available"
    if "release" in package and package.release is None:
        return f"absent: not in the {package.redistName} {package.manifestVersion} manifest"
    problems = meta.get("problems") or {}
    if "unsupported" in problems or "broken" in problems:
        if "platformAssertions" in package:
            failed = [m for ok, m in package.platformAssertions + package.brokenAssertions if not ok]
        else:
            failed = [p["message"] for p in problems.values()]
        kind = "broken" if "broken" in problems and "unsupported" not in problems else "unsupported"
        return f"{kind}: " + "; ".join(failed)
    license = meta.get("license")
    if not licenses.is_free(license):
        return f"unfree ({licenses.license_names(license)}): allow with allowUnfree or allowUnfreePredicate"
    return "unavailable"


def _row(attr: str, package: Package) -> dict[str, Any]:
    try:
        return {
            "attr": attr,
            "pname": package.pname,
            "version": package.version,
            "license": licenses.license_names(package.meta.get("license")),
            "outputs": list(package.outputs),
            "available": bool(package.meta.get("available", True)),
            "status": _status(package),
        }
    except CudapkgsError as error:
        return {"attr": attr, "pname": attr.rsplit(".", 1)[-1], "version": "?", "license": "?", "outputs": [],
                "available": False, "status": f"error: {error}"}


def list_components(scope: Any) -> list[dict[str, Any]]:
    """One row per component of a CUDA set: pname, version, license, outputs, available, status."""
    return [
        _row(name, value)
        for name in scope
        if isinstance(value := scope[name], Package) and "redistName" in value
    ]


def list_all(pkgs: Any) -> list[dict[str, Any]]:
    """Every package a listing reaches, as Nixpkgs' tools do: the top level's packages, and
    the members of sets marked `recurseForDerivations` (the default CUDA set, as `cudaPackages.*`)."""
    rows = []
    for name in pkgs:
        value = pkgs[name]
        if isinstance(value, Package):
            rows.append(_row(name, value))
        elif isinstance(value, Mapping) and value.get("recurseForDerivations") is True:
            rows.extend(
                _row(f"{name}.{member}", package)
                for member in value
                if isinstance(package := value[member], Package)
            )
    return sorted(rows, key=lambda row: row["attr"])


def capability_table(pkgs: Any, cuda_major_minor: str) -> list[dict[str, Any]]:
    """Every capability record plus `supported` and `default` for one CUDA release."""
    from .cuda.package_sets import set_name_for_cuda_version

    set_name_for_cuda_version(cuda_major_minor)  # an unknown release is an error, not an empty table
    info = pkgs._cuda.db.cudaCapabilityToInfo
    rows = []
    for capability in db.all_sorted_cuda_capabilities(info):
        record = dict(info[capability])
        record["supported"] = db.capability_is_supported(cuda_major_minor, info[capability])
        record["default"] = record["supported"] and db.capability_is_default(cuda_major_minor, info[capability])
        rows.append(record)
    return rows
