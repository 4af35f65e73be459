"""Tables over the package tree: a set's components and the capability database."""

from __future__ import annotations

import re
import warnings
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
        return f"absent from the {package.redistName} {package.manifestVersion} manifest"
    problems = meta.get("problems") or {}
    if "unsupported" in problems or "broken" in problems:
        if "platformAssertions" in package:
            failed = [m for ok, m in package.platformAssertions + package.brokenAssertions if not ok]
            # An assertion's message says what should hold ("libssl.so.1.1 is available"), as in Nixpkgs'
            # brokenAssertions; shown bare it would read as the opposite of the problem.
            text = "failed assertion" + ("s" if len(failed) > 1 else "") + ": " + "; ".join(failed)
        else:
            text = "; ".join(p["message"] for p in problems.values())
        match = _NO_BUILD.search(text)
        if match is not None:  # "<pname> <version> has no build for linux-x86_64 (available: linux-aarch64)"
            return f"not for {match.group(1)}" + (f" {match.group(2).strip()}" if match.group(2) else "")
        kind = "broken" if "broken" in problems and "unsupported" not in problems else "unsupported"
        return f"{kind}: {text}"
    license = meta.get("license")
    if not licenses.is_free(license):
        return f"unfree ({licenses.license_names(license)}; allowUnfree or allowUnfreePredicate allows it)"
    return "unavailable"


_NO_BUILD = re.compile(r"has no build for (\S+)(?: with CUDA \S+)?(\s*\(.*\))?")


def _row(attr: str, package: Package) -> dict[str, Any]:
    try:
        return {
            "attr": attr,
            "pname": package.pname if "pname" in package else attr.rsplit(".", 1)[-1],
            "version": package.version if "version" in package else "",
            "license": licenses.license_names(package.meta.get("license")),
            "outputs": list(package.outputs),
            "available": bool(package.meta.get("available", True)),
            "status": _status(package),
        }
    except CudapkgsError as error:
        return {"attr": attr, "pname": attr.rsplit(".", 1)[-1], "version": "?", "license": "?", "outputs": [],
                "available": False, "status": f"error: {error}"}


def list_components(scope: Any) -> list[dict[str, Any]]:
    """One row per component of a CUDA set: pname, version, license, outputs, available, status.

    Aliases (another name for a component, e.g. ``cusparselt``) are left out, without
    their deprecation warnings.
    """
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in scope:
            value = scope[name]
            if isinstance(value, Package) and "redistName" in value:
                row = _row(name, value)
                if row["pname"] == name or row["version"] == "?":
                    rows.append(row)
    return rows


def mark_built(rows: list[dict[str, Any]], scope: Any, store_dir: str) -> None:
    """Set ``row["built"]`` (True when every output of an available component is valid in the store)."""
    import os
    import sqlite3

    db_file = os.path.join(store_dir, ".meta", "db.sqlite")
    wanted: dict[str, list[str]] = {}
    for row in rows:
        row["built"] = False
        if not row["available"]:
            continue
        try:
            outputs = list(scope[row["attr"]].derivation.outputs.values())
        except CudapkgsError:
            continue
        wanted[row["attr"]] = outputs
    if not wanted or not os.path.exists(db_file):
        return
    try:
        with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True) as conn:
            valid = {p for (p,) in conn.execute("SELECT path FROM ValidPaths")}
    except sqlite3.Error:
        return
    for row in rows:
        outputs = wanted.get(row["attr"])
        if outputs and all(p in valid for p in outputs):
            row["built"] = True
            row["status"] = "built"


def list_all(pkgs: Any) -> list[dict[str, Any]]:
    """Every package a listing reaches, as Nixpkgs' tools do: the top level's packages, and
    the members of sets marked `recurseForDerivations` (the default CUDA set, as `cudaPackages.*`)."""
    with warnings.catch_warnings():  # aliases are listed by name, without their deprecation warnings
        warnings.simplefilter("ignore")
        return _list_all(pkgs)


def _list_all(pkgs: Any) -> list[dict[str, Any]]:
    rows = []
    for name in pkgs:
        try:
            value = pkgs[name]
        except CudapkgsError as error:  # one broken package is a row saying why, not a failed listing
            if name.startswith("_") or name[:1].isupper():
                continue
            rows.append({"attr": name, "pname": name, "version": "?", "license": "?", "outputs": [],
                         "available": False, "status": f"error: {error}"})
            continue
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
    from .package_sets import set_name_for_cuda_version

    set_name_for_cuda_version(cuda_major_minor)  # an unknown release is an error, not an empty table
    info = pkgs._cuda.db.cudaCapabilityToInfo
    rows = []
    for capability in db.all_sorted_cuda_capabilities(info):
        record = dict(info[capability])
        record["supported"] = db.capability_is_supported(cuda_major_minor, info[capability])
        record["default"] = record["supported"] and db.capability_is_default(cuda_major_minor, info[capability])
        rows.append(record)
    return rows


def _search_from_source(pkgs: Any, definitions: Mapping[str, Any], matches: Any) -> list[dict[str, Any]]:
    """Rows for the packages every set builds from source (nccl, cutlass, …; `cuda.scope.FROM_SOURCE`),
    with the version each versioned set has; evaluating one reads no manifest and builds nothing."""
    from .cuda.scope import FROM_SOURCE

    rows = []
    for attr in FROM_SOURCE:
        sets: dict[str, str] = {}
        description = ""
        for set_name in definitions:
            try:
                package = pkgs[set_name][attr]
                sets[set_name] = str(package.version)
                description = description or str(package.meta.get("description") or "")
            except CudapkgsError:
                continue
        if sets and matches(attr, description):
            rows.append({"name": attr, "product": None, "description": description, "nvidiaName": "", "sets": sets})
    return rows


def search(words: list[str], *, manifests_dir: str | None = None, pkgs: Any = None) -> list[dict[str, Any]]:
    """Packages whose name, description or NVIDIA name contains every word (case-insensitive).

    CUDA components are searched across every versioned set, from the component table
    and each set's manifests (no package is evaluated); with ``pkgs``, the packages each
    set builds from source (nccl, cutlass, saxpy, ...) and the top level's own packages too.  Each row: ``name``, ``description``, ``nvidiaName``
    and ``sets`` (set name -> component version, only where the set's manifest has it).
    """
    from .cuda.components import component_specs
    from .package_sets import package_set_definitions
    from .manifests import load_manifest
    from .lib.versions import major_minor

    needles = [w.lower() for w in words]

    def matches(*texts: str) -> bool:
        haystack = " ".join(t for t in texts if t).lower()
        return all(n in haystack for n in needles)

    definitions = package_set_definitions()
    manifests: dict[tuple[str, str], Any] = {}

    def manifest(product: str, version: str) -> Any:
        key = (product, version)
        if key not in manifests:
            try:
                manifests[key] = load_manifest(product, version, directory=manifests_dir)
            except CudapkgsError:
                manifests[key] = None
        return manifests[key]

    rows = []
    for product, specs in component_specs().items():
        for pname, spec in specs.items():
            if spec.alias_of:
                continue
            sets: dict[str, str] = {}
            nvidia_name = ""
            for set_name, definition in definitions.items():
                choices = definition.products.get(product)
                if not choices:
                    continue
                version = next((c.version for c in choices if c.when is None), choices[-1].version)
                found = manifest(product, version)
                if found is None:
                    continue
                mm = major_minor(definition.cuda_version)
                release = found.releases.get(spec.release_pname(mm)) or found.releases.get(spec.pname_for(mm))
                if release is not None:
                    sets[set_name] = release.version
                    nvidia_name = nvidia_name or release.name
            if matches(pname, spec.description, nvidia_name):
                rows.append({"name": pname, "product": product, "description": spec.description,
                             "nvidiaName": nvidia_name, "sets": sets})
    if pkgs is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows.extend(_search_from_source(pkgs, definitions, matches))
            for name in pkgs:
                try:
                    value = pkgs[name]
                except CudapkgsError:
                    continue
                if isinstance(value, Package):
                    try:
                        description = str(value.meta.get("description") or "")
                    except CudapkgsError:
                        description = ""
                    if matches(name, description):
                        rows.append({"name": name, "product": None, "description": description, "nvidiaName": "", "sets": {}})
            rows.extend(_search_python(pkgs, matches))
    return sorted(rows, key=lambda r: r["name"])


def _search_python(pkgs: Any, matches: Any) -> list[dict[str, Any]]:
    """Rows for the members of ``python3Packages`` (torch, triton, pycuda, the pinned wheels), named
    ``python3Packages.<name>``; a member that cannot be evaluated here is matched by name only."""
    try:
        python = pkgs["python3Packages"]
    except (CudapkgsError, KeyError):
        return []
    rows = []
    for name in python:
        try:
            value = python[name]
        except CudapkgsError:
            value = None
        if value is not None and not isinstance(value, Package):
            continue
        try:
            description = str(value.meta.get("description") or "") if value is not None else ""
        except CudapkgsError:
            description = ""
        if matches(f"python3Packages.{name}", description):
            rows.append({"name": f"python3Packages.{name}", "product": None, "description": description,
                         "nvidiaName": "", "sets": {}})
    return rows
