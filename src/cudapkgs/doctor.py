"""`cudapkgs doctor`: this machine as cudapkgs sees it, and what to do about each problem.

Everything is read from the local machine, without evaluating a package set and
without the network: the GPUs (NVML, else ``/proc/driver/nvidia``, else PCI devices
in sysfs), the driver and the CUDA majors it can run, where ``libcuda.so.1`` will come
from for programs built here, whether ``cuda_compat`` would be needed, the host
compilers and which sets' nvcc accept them, the system features builds may require,
the store and cache sizes, and the manifests in use.

Minimum driver per CUDA major (minor version compatibility): NVIDIA, "CUDA
Compatibility", Minor Version Compatibility, Table 1
(https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html):
CUDA 13.x needs a driver >= 580, 12.x >= 525, 11.x >= 450.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MIN_DRIVER_BY_MAJOR", "Report", "Problem", "Note", "diagnose", "runnable_majors", "pci_nvidia_gpus"]

#: CUDA major -> minimum driver branch (NVIDIA "CUDA Compatibility", Minor Version Compatibility, Table 1).
MIN_DRIVER_BY_MAJOR: Mapping[int, int] = {11: 450, 12: 525, 13: 580}

NIXOS_DRIVER_DIR = "/run/opengl-driver/lib"


@dataclass(frozen=True, slots=True)
class Problem:
    """Something that will not work, and what to do about it."""

    what: str
    fix: str

    def to_json(self) -> dict[str, str]:
        return {"problem": self.what, "fix": self.fix}


@dataclass(frozen=True, slots=True)
class Note:
    """Something that works, but could be made sturdier, and how."""

    what: str
    suggestion: str

    def to_json(self) -> dict[str, str]:
        return {"note": self.what, "suggestion": self.suggestion}


@dataclass
class Report:
    """Everything `diagnose` found; ``to_json`` is what ``cudapkgs doctor --json`` prints."""

    gpus: list[dict[str, Any]] = field(default_factory=list)
    gpu_source: str | None = None
    driver: str | None = None
    runnable: dict[str, Any] = field(default_factory=dict)
    libcuda: dict[str, Any] = field(default_factory=dict)
    compat: list[dict[str, Any]] = field(default_factory=list)
    compilers: list[dict[str, Any]] = field(default_factory=list)
    backend_compilers: list[dict[str, Any]] = field(default_factory=list)
    system_features: list[str] = field(default_factory=list)
    store: dict[str, Any] = field(default_factory=dict)
    caches: list[dict[str, Any]] = field(default_factory=list)
    manifests: dict[str, Any] = field(default_factory=dict)
    #: one entry per fetcher and source host probed: {"what", "url", "answers", "reason"}; None: not probed
    hosts: list[dict[str, Any]] | None = None
    problems: list[Problem] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    @property
    def dask_worker_resources(self) -> str:
        """The ``dask worker --resources`` value for this machine: its system features, one unit each
        (see docs/distributed.md; start one worker per GPU with CUDA_VISIBLE_DEVICES)."""
        from .realise.dask_executor import resources_string

        return resources_string(self.system_features)

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus,
            "gpuSource": self.gpu_source,
            "driver": self.driver,
            "runnableCudaMajors": self.runnable,
            "libcuda": self.libcuda,
            "cudaCompat": self.compat,
            "hostCompilers": self.compilers,
            "backendCompilers": self.backend_compilers,
            "systemFeatures": self.system_features,
            "daskWorkerResources": self.dask_worker_resources,
            "store": self.store,
            "caches": self.caches,
            "manifests": self.manifests,
            "hosts": self.hosts,
            "problems": [p.to_json() for p in self.problems],
            "notes": [n.to_json() for n in self.notes],
        }


def _branch(version: str | None) -> int | None:
    if not version:
        return None
    match = re.match(r"([0-9]+)", version)
    return int(match.group(1)) if match else None


def runnable_majors(driver: str | None) -> dict[str, Any]:
    """For each CUDA major: whether a driver ``driver`` (e.g. "570.211.01") runs it, and the minimum."""
    branch = _branch(driver)
    return {
        str(major): {"minimumDriver": f">= {minimum}", "runs": branch is not None and branch >= minimum}
        for major, minimum in sorted(MIN_DRIVER_BY_MAJOR.items())
    }


def pci_nvidia_gpus(sysfs: str | os.PathLike[str] = "/sys") -> list[dict[str, str]]:
    """NVIDIA display/3D controllers on the PCI bus (vendor 0x10de, class 0x03xxxx), driver or not."""
    found = []
    root = Path(sysfs) / "bus" / "pci" / "devices"
    try:
        devices = sorted(root.iterdir())
    except OSError:
        return []
    for device in devices:
        try:
            vendor = (device / "vendor").read_text().strip()
            klass = (device / "class").read_text().strip()
        except OSError:
            continue
        if vendor.lower() == "0x10de" and klass.lower().startswith("0x03"):
            driver = device / "driver"
            found.append({"busId": device.name, "driver": os.path.basename(os.readlink(driver)) if driver.is_symlink() else ""})
    return found


def _gpus(report: Report, procfs: str, sysfs: str, nvml: Any) -> None:
    from .containers.discovery import discover

    inventory = None
    try:
        inventory = discover("auto", nvml=nvml, procfs=procfs)
    except Exception:  # noqa: BLE001 - a broken NVML must not stop the diagnosis
        inventory = None
    if inventory is not None:
        report.driver = inventory.driver_version
        report.gpu_source = inventory.source
        report.gpus = [{"index": g.index, "name": g.name, "uuid": g.uuid, "busId": g.bus_id} for g in inventory.gpus]
    pci = pci_nvidia_gpus(sysfs)
    if not report.gpus and pci:
        report.gpu_source = "sysfs"
        report.gpus = [{"index": i, "name": "", "uuid": "", "busId": d["busId"], "kernelDriver": d["driver"]}
                       for i, d in enumerate(pci)]
        if report.driver is None:
            report.problems.append(Problem(
                f"{len(pci)} NVIDIA GPU(s) on the PCI bus but no NVIDIA driver loaded "
                f"(kernel driver: {', '.join(sorted({d['driver'] or 'none' for d in pci}))})",
                "install NVIDIA's driver (its kernel module and libcuda.so.1) and load the nvidia module",
            ))
    report.runnable = runnable_majors(report.driver)


def _libcuda(report: Report, driver_lib_dir: str | None, ld_cache: str) -> None:
    from .containers import ldcache

    try:
        entries = [e for e in ldcache.read(ld_cache) if e.name == "libcuda.so.1" and e.is_64bit]
    except (OSError, ValueError):
        entries = []
    from_cache = entries[0].path if entries else None
    nixos = os.path.isdir(NIXOS_DRIVER_DIR)
    chosen = driver_lib_dir or NIXOS_DRIVER_DIR
    where = "driverLibDir" if driver_lib_dir else "the default (/run/opengl-driver/lib, NixOS's)"
    found_there = os.path.exists(os.path.join(chosen, "libcuda.so.1"))
    # The loader (the host's: programs built here use the host's glibc) looks in the run path,
    # then in the ld cache (ld.so(8)): a program finds libcuda.so.1 through either.
    loaded = os.path.join(chosen, "libcuda.so.1") if found_there else from_cache
    report.libcuda = {
        "runpathDir": chosen,
        "runpathDirFrom": "driverLibDir" if driver_lib_dir else "default",
        "libcudaInRunpathDir": found_there,
        "ldCache": from_cache,
        "nixosDriverDir": nixos,
        "loadedFrom": loaded,
        "loadedThrough": "run path" if found_there else "ld cache" if from_cache else None,
    }
    if found_there:
        return
    if from_cache:
        directory = os.path.dirname(from_cache)
        report.notes.append(Note(
            f"programs built here find libcuda.so.1 through the ld cache ({from_cache}), not their run path: "
            f"{chosen} ({where}) {'does not exist' if not os.path.isdir(chosen) else 'has no libcuda.so.1'}",
            f'to put the driver in their run path too (a container or chroot has another ld cache), set '
            f'driverLibDir = "{directory}" in ~/.config/cudapkgs/config.toml (or --set driverLibDir=\'"{directory}"\')',
        ))
    elif report.driver is not None or report.gpus:
        report.problems.append(Problem(
            f"no libcuda.so.1 in {chosen} ({where}) nor in the ld cache ({ld_cache})",
            "install the driver's user-space libraries, then set driverLibDir to the directory holding libcuda.so.1",
        ))


def _compat(report: Report, definitions: Mapping[str, Any]) -> None:
    branch = _branch(report.driver)
    for name, definition in definitions.items():
        cuda = definition.cuda_version
        major = int(cuda.split(".")[0])
        minimum = MIN_DRIVER_BY_MAJOR.get(major)
        needed = branch is not None and minimum is not None and branch < minimum
        report.compat.append({"set": name, "cuda": cuda, "minimumDriver": minimum, "needsCudaCompat": needed})
    needing = [c for c in report.compat if c["needsCudaCompat"]]
    if needing:
        majors = sorted({int(c["cuda"].split(".")[0]) for c in needing})
        minimums = ", ".join(f"CUDA {m}.x needs >= {MIN_DRIVER_BY_MAJOR[m]}" for m in majors)
        report.problems.append(Problem(
            f"driver {report.driver} is too old for {', '.join(c['set'] for c in needing)} ({minimums}); "
            f"their programs would need cuda_compat (forward compatibility: data-center GPUs only)",
            "update the driver, or use a set whose CUDA major this driver runs, or add the set's cuda_compat "
            "where its manifest has one for this platform",
        ))


def _compilers(report: Report, definitions: Mapping[str, Any], env: Mapping[str, str]) -> None:
    from . import db
    from .errors import CudapkgsError
    from .host.compiler import find_compilers

    compilers, default = find_compilers(env)
    nvcc_db = db.nvcc_compatibilities()
    majors_minors = [d.cuda_version.rsplit(".", 1)[0] for d in definitions.values()]
    for compiler in compilers:
        accepted = []
        for mm in majors_minors:
            try:
                lo, hi = db.nvcc_host_compiler_range(mm, compiler.kind, nvcc_db)
            except CudapkgsError:
                continue
            if lo <= compiler.major <= hi:
                accepted.append(mm)
        report.compilers.append({
            **compiler.to_json(), "default": compiler == default, "acceptedByNvccOf": accepted,
        })
    from .host.compiler import explain_choice

    for mm in dict.fromkeys(majors_minors):  # backendCC of each release, and why (cuda-modules/backend.nix)
        report.backend_compilers.append(explain_choice(mm, compilers, default, nvcc_db))
    if not compilers:
        report.problems.append(Problem("no GCC or Clang on PATH: nvcc needs a host compiler",
                                       "install gcc/g++ (or clang) and put it on PATH, or set CC/CXX"))
        return
    for mm in majors_minors:
        if not any(mm in c["acceptedByNvccOf"] for c in report.compilers):
            ranges = []
            for kind in ("gcc", "clang"):
                try:
                    lo, hi = db.nvcc_host_compiler_range(mm, kind, nvcc_db)
                    ranges.append(f"{kind} {lo}-{hi}")
                except CudapkgsError:
                    pass
            report.problems.append(Problem(
                f"no host compiler here is accepted by CUDA {mm}'s nvcc (it accepts {' or '.join(ranges)})",
                f"install one of those and put it on PATH (or set CC/CXX) to build CUDA code with CUDA {mm}",
            ))


def _sizes(report: Report, store_dir: str) -> None:
    from .fetch.cache import cache_roots, entries

    from .errors import StoreError
    from .store.store import check_owners

    db_file = Path(store_dir) / ".meta" / "db.sqlite"
    info: dict[str, Any] = {"dir": store_dir, "exists": db_file.exists()}
    try:
        check_owners(store_dir)
    except StoreError as error:  # every command that opens it would refuse it: say so, read nothing of it
        report.problems.append(Problem(str(error), "use a store of your own (storeDir, CUDAPKGS_STORE)"))
        report.store = info
        return
    if db_file.exists():
        import sqlite3

        try:
            with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True) as conn:
                count, size = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM ValidPaths").fetchone()
            info.update(paths=count, narSize=size)
        except sqlite3.Error as error:
            report.problems.append(Problem(f"cannot read the store database {db_file}: {error}",
                                           "run `cudapkgs verify`; if it fails too, move the store aside"))
    report.store = info
    all_entries = entries(store_dir)
    for name, root in cache_roots(store_dir):
        mine = [e for e in all_entries if e.cache == name]
        report.caches.append({"cache": name, "dir": str(root), "entries": len(mine), "size": sum(e.size for e in mine)})


def _manifests(report: Report, manifests_dir: str | None) -> None:
    from .manifests import locate as m

    searched = m.search_directories(manifests_dir)
    counts = {}
    for kind, root in searched:
        try:
            counts[kind] = sum(len(m._versions_in(p)) for p in root.iterdir() if p.is_dir())
        except OSError:
            counts[kind] = 0
    report.manifests = {"directories": [{"kind": k, "path": str(p), "files": counts[k]} for k, p in searched]}
    if searched[0][0] == "override" and not searched[0][1].is_dir():
        report.problems.append(Problem(
            f"the manifest directory {searched[0][1]} (manifestsDir or $CUDAPKGS_MANIFESTS) does not exist",
            "fix or unset it: without it, cudapkgs uses its shipped manifests",
        ))


#: Source hosts that packages cudapkgs builds from source fetch from (fetchFromGitHub) when no source mirror
#: holds the archive; probed by `doctor` beside the configured fetchers.
SOURCE_HOSTS = {"GitHub (fetchFromGitHub sources)": "https://github.com"}


def fetcher_hosts(config: Any, env: Mapping[str, str] = os.environ) -> list[tuple[str, str]]:
    """``(what, URL)`` for each network place the configuration fetches from: each configured fetcher
    (``redist``: NVIDIA's server; ``mirror:<URL>``; ``wheels``: the package index pip and the plan ask),
    each URL source mirror, and `SOURCE_HOSTS`. A local mirror directory is not a host and is left out.
    Raises `ConfigError` when ``$CUDAPKGS_SOURCE_MIRRORS`` holds a relative directory (`xdg.env_paths`)."""
    from .fetch.planning import index_url
    from .platform import REDIST_URL_PREFIX

    from .errors import shown_cache_url

    found: list[tuple[str, str]] = []
    for fetcher in config.fetchers:
        kind, _, where = str(fetcher).partition(":")
        if fetcher == "redist":
            found.append(("fetcher redist (NVIDIA's redist server)", REDIST_URL_PREFIX))
        elif kind == "mirror" and "://" in where and not where.startswith("file://"):
            found.append((f"fetcher {shown_cache_url(fetcher)}", where))  # what is shown: no password
        elif fetcher == "wheels":
            found.append(("fetcher wheels (the package index)", index_url()))
    from .xdg import env_paths  # a URL's "https:" is no separator; a relative directory is refused

    for mirror in list(config.sourceMirrors) + env_paths("CUDAPKGS_SOURCE_MIRRORS", env, urls=True):
        if "://" in mirror and not mirror.startswith("file://"):
            found.append((f"source mirror {shown_cache_url(mirror)}", mirror))
    found += list(SOURCE_HOSTS.items())
    return found


def _hosts(report: Report, config: Any, env: Mapping[str, str], probe: Any) -> None:
    from .fetch.reachability import base_url

    places = fetcher_hosts(config, env)
    answers = probe([url for _what, url in places])
    report.hosts = []
    for what, url in places:
        why = answers.get(base_url(url))
        report.hosts.append({"what": what, "url": base_url(url), "answers": why is None, "reason": why})
    dead = {h["what"] for h in report.hosts if not h["answers"]}
    fetchers = [w for w, _u in places if w.startswith("fetcher ")]
    local = [f for f in config.fetchers if str(f).startswith("mirror:") and "://" not in str(f)]
    if fetchers and all(w in dead for w in fetchers) and not local:
        report.problems.append(Problem(
            "no configured fetcher answers from this machine (" + "; ".join(
                f"{h['what']} at {h['url']}: {h['reason']}" for h in report.hosts if h["what"] in fetchers) + ")",
            "set fetchers to one that answers (a mirror directory: fetchers=[\"mirror:/path\"]), or fix the network or proxy "
            "(HTTPS_PROXY, NO_PROXY)",
        ))
    elif any(w in dead for w in fetchers):
        skipped = [h for h in report.hosts if h["what"] in fetchers and not h["answers"]]
        report.notes.append(Note(
            "; ".join(f"{h['what']} does not answer ({h['url']}: {h['reason']})" for h in skipped)
            + ": builds skip it after one probe and take what the other fetchers have",
            "to not probe it at all, leave it out of fetchers (e.g. --set 'fetchers=[\"wheels\"]')",
        ))
    for h in report.hosts:
        if h["what"] in SOURCE_HOSTS and not h["answers"]:
            report.notes.append(Note(
                f"{h['what']} does not answer ({h['url']}: {h['reason']}): a package built from such a source "
                "(NCCL from source, nccl-tests, gdrcopy, …) cannot be fetched; the ML stack needs none (zlib's "
                "source ships with cudapkgs, NCCL and NVSHMEM are NVIDIA's wheels)",
                "put the archives in a source mirror (config sourceMirrors or $CUDAPKGS_SOURCE_MIRRORS; "
                "docs/architecture.md, Sources)",
            ))


def diagnose(
    config: Any = None,
    *,
    env: Mapping[str, str] = os.environ,
    procfs: str = "/proc",
    sysfs: str = "/sys",
    ld_cache: str = "/etc/ld.so.cache",
    nvml: Any = None,
    probe: Any = None,
) -> Report:
    """Look at this machine; ``config`` is a `cudapkgs.config.Config` (default: the user's).

    ``probe``: None (no network: `Report.hosts` stays None), or a callable ``urls -> {base URL: None or
    reason}`` (`cudapkgs.fetch.reachability.probe`: one bounded HEAD per host, in parallel) asked
    about every place `fetcher_hosts` names; a configuration whose every fetcher is silent is a problem.
    """
    from .config import load_config
    from .package_sets import package_set_definitions
    from .store.location import default_store_dir
    from .host.features import host_system_features

    config = config if config is not None else load_config()
    report = Report()
    definitions = package_set_definitions()
    _gpus(report, procfs, sysfs, nvml)
    _libcuda(report, config.driverLibDir, ld_cache)
    _compat(report, definitions)
    _compilers(report, definitions, env)
    report.system_features = sorted(host_system_features(env)) if report.gpus else sorted(
        (env.get("CUDAPKGS_SYSTEM_FEATURES") or "").split())
    _sizes(report, default_store_dir(config))
    _manifests(report, config.manifestsDir)
    if probe is not None:
        _hosts(report, config, env, probe)
    return report
