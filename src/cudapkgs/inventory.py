"""Tables over the package tree: a set's components and the capability database."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from . import db, licenses
from .errors import CudapkgsError, UnfreeLicenseError
from .lib.lazy import recurses
from .package import Package


def _status(package: Package, config: Any = None, meta: Any = None) -> str:
    """A row's status in words.  With `config`, a package whose own license is unfree and not
    permitted says so before any broken assertion, as Nixpkgs' check-meta orders its reasons
    (pkgs/stdenv/generic/check-meta.nix@1494b459, ``checkValidity``: "unfree" before "broken").
    `meta`: the package's ``meta`` when the caller has read it already."""
    if meta is None:
        meta = package["meta"]
    if meta.get("available", True):
        return "available"
    if "release" in package and package.release is None:
        return f"absent from the {package.redistName} {package.manifestVersion} manifest"
    license = meta.get("license")
    if config is not None and not licenses.is_free(license) and not config.permits_unfree(package):
        return _unfree(license)
    problems = meta.get("problems") or {}
    if "unsupported" in problems or "broken" in problems:
        if "platformAssertions" in package:
            failed = [m for ok, m in package.platformAssertions + package.brokenAssertions if not ok]
            # An assertion's message says what should hold ("libssl.so.1.1 is available"), as in Nixpkgs'
            # brokenAssertions; shown bare it would read as the opposite of the problem.
            text = "failed assertion" + ("s" if len(failed) > 1 else "") + ": " + "; ".join(failed)
        else:  # a message's "...assertions:\n- a\n- b" on one line: a table row is one line
            text = "; ".join(p["message"] for p in problems.values()).replace(":\n- ", ": ").replace("\n- ", "; ")
            text = " ".join(text.split("\n"))
        match = _NO_BUILD.search(text)
        if match is not None:  # "<pname> <version> has no build for linux-x86_64 (available: linux-aarch64)"
            return f"not for {match.group(1)}" + (f" {match.group(2).strip()}" if match.group(2) else "")
        kind = "broken" if "broken" in problems and "unsupported" not in problems else "unsupported"
        return f"{kind}: {text}"
    if "source" in problems and "_sourceSupply" in package:
        from .fetch.supply import describe

        could = [c.strip('"').split(":", 1)[0].split('"', 1)[0] for c in _could(package)]
        return (f"no fetcher can supply it (could: {', '.join(could) or 'none'}): "
                f"{describe(package._sourceSupply)}")
    if not licenses.is_free(license):
        return _unfree(license)
    return "unavailable"


def _unfree(license: Any) -> str:
    names = licenses.license_names(license, unfree_only=True) or licenses.license_names(license)
    return f"unfree ({names}; allowUnfree or allowUnfreePredicate allows it)"


_NO_BUILD = re.compile(r"has no build for (\S+)(?: with CUDA \S+)?(\s*\(.*\))?")


def _row(attr: str, package: Package, config: Any = None) -> dict[str, Any]:
    # Read as items, in the order they always were (the first error is the row's), meta once: an
    # attribute read (`package.meta`) tries the class first, and CPython 3.11 formats the
    # AttributeError it discards (about 2,500 instructions; six a row: docs/eval-cache.md)
    try:
        pname = package["pname"] if "pname" in package else attr.rsplit(".", 1)[-1]
        version = package["version"] if "version" in package else ""
        meta = package["meta"]
        license = licenses.license_names(meta.get("license"))
        outputs = list(package["outputs"])
        return {
            "attr": attr,
            "pname": pname,
            "version": version,
            "license": license,
            "outputs": outputs,
            "available": bool(meta.get("available", True)),
            "status": _status(package, config, meta),
        }
    except CudapkgsError as error:
        return {"attr": attr, "pname": attr.rsplit(".", 1)[-1], "version": "?", "license": "?", "outputs": [],
                "available": False, "status": f"error: {error}"}


def _could(package: Package) -> list[str]:
    from .fetch.supply import could_supply

    facts = package._sourceFacts
    return could_supply([r.fetcher for r in package._sourceSupply], **facts) if facts is not None else []


def mark_sources(rows: list[dict[str, Any]], scope: Any, fetchers: Any, store_dir: str,
                 prober: Any = "default") -> tuple[dict[str, tuple[str, str]], bool]:
    """Set ``row["source"]`` of every row of `list_components` to `source_of` its package, with the
    fetcher a build would use now.

    As `cudapkgs.realise.planning.plan` decides it (`cudapkgs.fetch.reachability.settle_fetchers`):
    the hosts of the network fetchers chosen for sources not on this machine are probed once, in
    parallel, each under `cudapkgs.fetch.reachability.PROBE_SECONDS` (``prober``: a callable
    ``urls -> {base URL: None or reason}``; the default is `reachability.probe`, none when
    ``$CUDAPKGS_PROBE_HOSTS=0``; None: ask no host), and a fetcher whose host does not answer is
    left out for every row. Returns ``({fetcher: (base URL, reason)} skipped, whether hosts were
    asked)``.
    """
    from .fetch.reachability import default_prober, network_url, settle_fetchers

    fetchers = tuple(fetchers)
    packages: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for row in rows:
            try:
                packages[row["attr"]] = scope[row["attr"]]
            except CudapkgsError as error:
                packages[row["attr"]] = error

        def sources(skip: frozenset[str]) -> dict[str, dict[str, Any] | None]:
            kept = tuple(f for f in fetchers if f not in skip)
            found: dict[str, dict[str, Any] | None] = {}
            for attr, package in packages.items():
                try:
                    if isinstance(package, CudapkgsError):
                        raise package
                    found[attr] = source_of(package, scope, kept, store_dir)
                except CudapkgsError as error:
                    found[attr] = _unsourced(str(error))
            return found

        if prober == "default":
            prober = default_prober()
        skipped: dict[str, tuple[str, str]] = {}
        answered: set[str] = set()
        found: dict[tuple[str, ...], dict[str, Any]] = {}
        if prober is not None:
            def chosen(skip: frozenset[str]) -> Iterator[tuple[str, str]]:
                found[tuple(sorted(skip))] = these = sources(skip)
                for source in these.values():
                    if source and source["fetcher"] and source["cached"] is None:
                        url = network_url(source["fetcher"])
                        if url is not None:
                            yield source["fetcher"], url

            skipped, answered = settle_fetchers(chosen, prober)
        final = found.get(tuple(sorted(skipped))) or sources(frozenset(skipped))
        for row in rows:
            source = final[row["attr"]]
            if source is not None and source["fetcher"] in answered:
                source = {**source, "untried": None}  # its host answered just now
            row["source"] = source
    return skipped, prober is not None


def _unsourced(reason: str) -> dict[str, Any]:
    return {"fetcher": None, "file": None, "size": None, "cached": None, "untried": None, "reason": reason}


#: The fetcher kinds of the fetcher table, as the ``fetchers`` config key names them.
TABLE_FETCHERS = ("redist", "mirror:<dir or URL>", "wheels")


def fetcher_table(pkgs: Any, set_names: list[str]) -> list[dict[str, Any]]:
    """Set × component × fetcher: what each kind of fetcher can supply, from names alone (`fetch.supply`).

    One row per component of any of ``set_names``: ``{"component", "sets": {set_name:
    {"version", "redist", "mirror", "wheels"} or None}}``, where each fetcher entry is the file
    it would fetch (an archive name, or ``project==version``) or ``{"reason": ...}``, and None
    means the set has no release of it for ``pkgs.system``.  Needs no network and no store.
    """
    from .fetch.supply import supply

    by_component: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for set_name in set_names:
            scope = pkgs[set_name]
            for name in scope:
                package = scope[name]
                if not (isinstance(package, Package) and "redistName" in package) or package.pname != name:
                    continue
                if name not in by_component:
                    by_component[name] = {}
                    order.append(name)
                facts = package._sourceFacts
                if facts is None:
                    by_component[name][set_name] = None
                    continue
                cell: dict[str, Any] = {"version": package.version}
                for fetcher, key in (("redist", "redist"), ("mirror:/", "mirror"), ("wheels", "wheels")):
                    found = supply(fetcher, **facts)
                    cell[key] = found.file if found.can else {"reason": found.reason}
                by_component[name][set_name] = cell
    return [{"component": c, "sets": {s: by_component[c].get(s) for s in set_names}} for c in order]


def fetcher_table_markdown(rows: list[dict[str, Any]], set_names: list[str], system: str) -> str:
    """`fetcher_table` as Markdown: a component × set matrix, then why each missing wheel is missing."""
    short = [s.removeprefix("cudaPackages_").replace("_", ".") for s in set_names]
    lines = [
        f"# Which fetcher can supply each component ({system})",
        "",
        "Generated by `cudapkgs list --fetchers --markdown --system <system>` (tests/test_fetcher_table.py checks",
        "that this file is current); do not edit by hand. For every versioned set and every component with a",
        f"release for {system}: **R** the archive from `\"redist\"` (NVIDIA's server) or a",
        "`\"mirror:<dir or URL>\"` laid out like it; **W** NVIDIA's PyPI wheel (`\"wheels\"`); "
        "— no release for this platform.",
        "A component that none of the configured `fetchers` can supply is unavailable (`meta.available`",
        "is false), as Nixpkgs makes a redistributable without a source unavailable.",
        "",
        "**Which of them answer is decided once, before anything is built** (`cudapkgs.fetch.reachability`):",
        "the plan probes each network host its sources would come from (NVIDIA's server for `redist`, a",
        "`mirror:<URL>`, GitHub for a `fetchFromGitHub` source no mirror holds) with one `HEAD` each, all at",
        "once, 4 s each. A fetcher whose host does not answer is skipped for the whole plan, and `build`/`shell`/`test`",
        "evaluate again without it (what `fetchers = [\"wheels\"]` gives: triton takes `cuda_nvcc_wheel`'s",
        "ptxas); `--dry-run` prints `skipped for this plan: fetcher redist (… does not answer: …)` (`--json`:",
        "`skippedFetchers`), and `build`/`shell` say it on stderr when they fetch or build something (not on a",
        "start with nothing to do). `cudapkgs doctor` probes the same hosts, and the package index and GitHub, and says",
        "which answer (`--offline` skips it). `CUDAPKGS_PROBE_HOSTS=0` turns probing off (the hosts are then",
        "assumed to answer, and a failure shows at fetch time, falling over to the next fetcher).",
        "",
        "Sources besides NVIDIA's: zlib 1.3.1 (scipy's libgfortran needs libz) ships with cudapkgs",
        "(`cudapkgs/data/sources/zlib-1.3.1.tar.gz`, the GitHub tag's archive, 1.5 MiB, zlib licence; see its",
        "SOURCES.md), a source mirror tried after the configured ones and before GitHub, checked against",
        "Nixpkgs' NAR hash like any mirror's copy; NCCL and NVSHMEM are NVIDIA's PyPI wheels by default",
        "(`prebuiltWheels`, docs/ml-stack.md). The ML closure then needs PyPI alone.",
        "",
        "| component | " + " | ".join(short) + " |",
        "| --- | " + " | ".join("---" for _ in short) + " |",
    ]
    missing: dict[str, dict[str, list[str]]] = {}
    wheel_names: dict[str, list[str]] = {}
    for row in rows:
        cells = []
        for set_name, label in zip(set_names, short):
            cell = row["sets"].get(set_name)
            if cell is None:
                cells.append("—")
                continue
            wheel = cell["wheels"]
            if isinstance(wheel, dict):
                cells.append("R")
                missing.setdefault(row["component"], {}).setdefault(wheel["reason"], []).append(label)
            else:
                cells.append("R W")
                project = wheel.split("==", 1)[0]
                if project not in wheel_names.setdefault(row["component"], []):
                    wheel_names[row["component"]].append(project)
        lines.append(f"| {row['component']} | " + " | ".join(cells) + " |")
    lines += ["", "## The wheels", ""]
    lines += [f"- {c}: {', '.join(f'`{p}`' for p in names)}" for c, names in wheel_names.items()]
    lines += ["", "## Why there is no wheel", ""]
    for component, reasons in missing.items():
        text = "; ".join(f"{reason} ({', '.join(labels)})" for reason, labels in reasons.items())
        lines.append(f"- {component}: {text}")
    return "\n".join(lines) + "\n"


def source_of(package: Package, scope: Any, fetchers: Any, store_dir: str) -> dict[str, Any] | None:
    """Which of ``fetchers`` would serve the source of a redist package of the set ``scope``, as the
    build plan decides it.

    ``{"fetcher", "file", "size" (bytes, None when unknown: a wheel not cached), "cached"
    (where it already is, or None), "untried" (the host not contacted), "reason" (why no
    fetcher can, else None)}``; None for a package without a release on this platform.
    Uses `cudapkgs.fetch.planning.choose_source`, so caches and mirror directories count;
    nothing is downloaded and no index is asked.
    """
    from .fetch.planning import SourcePlanError, choose_source

    if "preferredRelease" not in package or package.preferredRelease is None:
        return None
    system, artifact = package.preferredRelease
    attrs = {"pname": package.pname, "version": package.version, "redistName": package.redistName,
             "cudaMajorMinorVersion": scope.cudaMajorMinorVersion, "redistSystem": system}
    src = {"relativePath": artifact.relative_path, "sha256": artifact.sha256, "size": artifact.size}
    try:
        choice = choose_source(attrs, src, tuple(fetchers), store_dir)
    except SourcePlanError as error:
        return _unsourced(str(error))
    return {"fetcher": choice.fetcher, "file": choice.what, "size": choice.size, "cached": choice.cached,
            "untried": choice.untried, "reason": None}


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
    the members of sets marked `recurseForDerivations` (`lib.lazy.recurse_into_attrs`: the default CUDA
    set, as `cudaPackages.*`, and python3Packages, as Nixpkgs' all-packages.nix marks both)."""
    with warnings.catch_warnings():  # aliases are listed by name, without their deprecation warnings
        warnings.simplefilter("ignore")
        return _list_all(pkgs)


def _list_all(pkgs: Any) -> list[dict[str, Any]]:
    rows = []
    config = pkgs.config
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
            rows.append(_row(name, value, config))
        elif recurses(value):
            for member in value:
                try:
                    package = value[member]
                except CudapkgsError as error:  # a member that does not evaluate is a row saying why
                    rows.append({"attr": f"{name}.{member}", "pname": member, "version": "?", "license": "?",
                                 "outputs": [], "available": False, "status": f"error: {error}"})
                    continue
                if isinstance(package, Package):
                    rows.append(_row(f"{name}.{member}", package, config))
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


def search(words: list[str], *, manifests_dir: str | None = None, pkgs: Any = None, prober: Any = None,
           skipped: dict[str, tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Packages whose name, description or NVIDIA name contains every word (case-insensitive).

    CUDA components are searched across every versioned set, from the component table
    and each set's manifests (no package is evaluated); with ``pkgs``, the packages each
    set builds from source (nccl, cutlass, saxpy, ...) and the top level's own packages (with the members of sets marked recurseForDerivations, as "python3Packages.pycuda") too.  Each row: ``name``, ``description``, ``nvidiaName``
    and ``sets`` (set name -> component version, only where the set's manifest has it; a top-level
    package's row has ``sets`` empty and its own ``version``, "" when it does not evaluate); with
    ``pkgs``, a component's row also has ``fetchers`` (set name -> the first of ``pkgs.config.fetchers``
    that can supply it, "" when none can, None without a release for this platform).

    With ``prober`` (a callable ``urls -> {base URL: None or reason}``, `reachability.probe` or
    `reachability.default_prober`'s answer), the fetcher named is the one a build would use now, as
    `cudapkgs.realise.planning.plan` decides it (`reachability.settle_fetchers`): a network
    fetcher whose host does not answer is left out for every row, and put in ``skipped``
    (``{fetcher: (base URL, reason)}``). Without it, no host is asked.
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
    fetchers = tuple(pkgs.config.fetchers) if pkgs is not None else None
    host_systems: dict[str, str | None] = {}
    can: dict[str, tuple[str, ...]] = {}  # a release's file -> the configured fetchers that can supply it

    def served_by(set_name: str, definition: Any, product: str, pname: str, release: Any) -> str | None:
        """A key of ``can`` for the release on this platform, its value the configured fetchers that can
        supply it (`fetch.supply`); None without a release for this platform (or without `pkgs`)."""
        if fetchers is None:
            return None
        from .fetch.supply import supply

        if set_name not in host_systems:
            try:
                host_systems[set_name] = pkgs[set_name].backendStdenv.hostRedistSystem
            except CudapkgsError:
                host_systems[set_name] = None
        host = host_systems[set_name]
        chosen = release.preferred_release(definition.cuda_version, host) if host else None
        if chosen is None:
            return None
        system, artifact = chosen
        facts = {"product": product, "pname": pname, "version": release.version,
                 "cuda_major": int(definition.cuda_version.split(".")[0]), "relative_path": artifact.relative_path,
                 "redist_system": host if system in ("source", "linux-all") else system, "size": artifact.size}
        key = f"{set_name}\0{artifact.relative_path}"  # a wheel's name depends on the set's CUDA major
        can[key] = tuple(f for f in fetchers if supply(f, **facts).can)
        return key

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
            served: dict[str, str | None] = {}
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
                        served[set_name] = served_by(set_name, definition, product, spec.pname_for(mm), release)
            if matches(pname, spec.description, nvidia_name):
                rows.append({"name": pname, "product": product, "description": spec.description,
                             "nvidiaName": nvidia_name, "sets": sets,
                             **({"fetchers": served} if fetchers is not None else {})})
    if fetchers is not None:
        _settle_served(rows, can, prober, skipped)
    if pkgs is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows.extend(_search_from_source(pkgs, definitions, matches))
            for name, value in _top_level_packages(pkgs):
                try:
                    if isinstance(value, CudapkgsError):
                        raise value
                    description = str(value.meta.get("description") or "")
                except CudapkgsError as error:  # e.g. pycuda reads cudart, which is unfree
                    description = _unevaluated(error)
                if matches(name, description):
                    try:
                        version = str(value.version) if not isinstance(value, CudapkgsError) and "version" in value else ""
                    except CudapkgsError:
                        version = ""
                    rows.append({"name": name, "product": None, "description": description, "nvidiaName": "",
                                 "sets": _ml_versions(pkgs, definitions, name), "version": version})
    return sorted(rows, key=lambda r: r["name"])


def _settle_served(rows: list[dict[str, Any]], can: Mapping[str, tuple[str, ...]], prober: Any,
                   skipped: dict[str, tuple[str, str]] | None = None) -> None:
    """Replace each release file in the rows' ``fetchers`` by the first fetcher of ``can[file]`` a build
    would use: with ``prober``, the network fetchers whose host does not answer left out."""
    from .fetch.reachability import network_url, settle_fetchers

    dead: dict[str, tuple[str, str]] = {}
    if prober is not None:
        def chosen(skip: frozenset[str]) -> Iterator[tuple[str, str]]:
            for fetchers in set(can.values()):
                first = next((f for f in fetchers if f not in skip), None)
                url = network_url(first) if first is not None else None
                if url is not None:
                    yield first, url  # type: ignore[misc]

        dead = settle_fetchers(chosen, prober)[0]
    if skipped is not None:
        skipped.update(dead)
    for row in rows:
        served = row.get("fetchers")
        if served:
            for set_name, file in served.items():
                if file is not None:
                    served[set_name] = next((f for f in can[file] if f not in dead), "")


def _ml_versions(pkgs: Any, definitions: Mapping[str, Any], name: str) -> dict[str, str]:
    """Set name -> version of python3Packages' ML package `name` ("python3Packages.torchvision") in each
    versioned set's ``pkgs.pkgsCuda`` where it is not broken: torch and its companions, JAX's plugins and
    CuPy are paired with each set's CUDA (issue 31); {} for any other package.  A set where it does not
    evaluate is left out.

    The versions are read with unfree licenses allowed (the same configuration, system and overlays
    otherwise): a package whose only fault is the user's license gate (torch needs cuBLAS, under the
    CUDA EULA) is listed, as ``nix search`` lists unfree packages; reading a version builds nothing."""
    from .pkgs.python_modules import ML_PACKAGES
    from .top_level import TopLevel, top_level

    scope, _, member = name.partition(".")
    if scope != "python3Packages" or member not in ML_PACKAGES:
        return {}
    if isinstance(pkgs, TopLevel) and not pkgs.config.allowUnfree:
        config, system, overlays = pkgs._import
        pkgs = top_level(config.replace(allowUnfree=True), system, overlays)
    found: dict[str, str] = {}
    for set_name in definitions:
        try:
            package = pkgs[set_name].pkgs.pkgsCuda.python3Packages[member]
            if not package.meta.get("broken"):  # a set that cannot have it (torch 2.9.1 on 12.6) is left out
                found[set_name] = str(package.version)
        except CudapkgsError:
            continue
    return found




def _unevaluated(error: CudapkgsError) -> str:
    """The description column of a package whose evaluation failed: why, in one short line."""
    if isinstance(error, UnfreeLicenseError):
        return "(not evaluated: it or an input is unfree; allowUnfree or allowUnfreePredicate allows it)"
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"(not evaluated: {first[:160]})"


def _top_level_packages(pkgs: Any) -> Iterator[tuple[str, Package | CudapkgsError]]:
    """(attribute path, package) for the top level's packages and those of the sets marked
    ``recurseForDerivations`` (`lib.lazy.recurse_into_attrs`, as Nixpkgs' ``recurseIntoAttrs
    python3Packages`` makes ``nix search`` descend: "python3Packages.pycuda"), but the CUDA sets,
    which `search` reads from their manifests.  A member of a subset that fails to evaluate (pycuda without
    allowUnfree: it reads cudart's outputs) comes with its error instead, so that searching for
    it still finds it and says why; a top-level attribute that fails is left out."""
    from .package_sets import aliases, package_set_definitions

    cuda_sets = {*package_set_definitions(), *aliases()}
    for name in pkgs:
        try:
            value = pkgs[name]
        except CudapkgsError:
            continue
        if isinstance(value, Package):
            yield name, value
        elif recurses(value) and name not in cuda_sets:
            for member in value:
                try:
                    package = value[member]
                except CudapkgsError as error:
                    yield f"{name}.{member}", error
                    continue
                if isinstance(package, Package):
                    yield f"{name}.{member}", package
