"""Tables over the package tree: a set's components and the capability database."""

from __future__ import annotations

from typing import Any

from . import db, licenses
from .errors import CudapkgsError
from .package import Package


def _status(package: Package) -> str:
    meta = package.meta
    if meta.available:
        return "available"
    if package.release is None:
        manifest = package.redistName
        return f"absent: not in the {manifest} {package.manifestVersion} manifest"
    problems = meta.problems
    if "unsupported" in problems or "broken" in problems:
        failed = [m for ok, m in package.platformAssertions + package.brokenAssertions if not ok]
        kind = "broken" if "broken" in problems and "unsupported" not in problems else "unsupported"
        return f"{kind}: " + "; ".join(failed)
    if not licenses.is_free(meta.license):
        return f"unfree ({licenses.license_names(meta.license)}): allow with allowUnfree or allowUnfreePredicate"
    return "unavailable"


def list_components(scope: Any) -> list[dict[str, Any]]:
    """One row per component of a CUDA set: pname, version, license, outputs, available, status."""
    rows = []
    for name in scope:
        value = scope[name]
        if not isinstance(value, Package) or "redistName" not in value:
            continue
        try:
            rows.append(
                {
                    "attr": name,
                    "pname": value.pname,
                    "version": value.version,
                    "license": licenses.license_names(value.meta.license),
                    "outputs": list(value.outputs),
                    "available": bool(value.meta.available),
                    "status": _status(value),
                }
            )
        except CudapkgsError as error:
            rows.append(
                {"attr": name, "pname": name, "version": "?", "license": "?", "outputs": [],
                 "available": False, "status": f"error: {error}"}
            )
    return rows


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
