"""Planning a realisation: what is valid, what a binary cache substitutes, what is fetched and built.

`plan` answers "what would be fetched and built" with one validity query: the `Plan` (roots, builds
in dependency order, fetches with their sources and sizes, substitutes, the fetchers skipped as
unreachable). `cudapkgs.realise.scheduler.run` executes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..derivation import Derivation
from ..lib.records import FrozenRecord
from .realise import _check_fixed_inputs, missing

__all__ = ["Fetch", "PINNED_WHEEL_FETCHER", "Plan", "plan"]


class Fetch(FrozenRecord):
    """A source a build needs: file name, size in bytes (None if unknown), URLs.

    ``choice`` (NVIDIA redistributables) names the fetcher expected to serve it, with that
    fetcher's size (a wheel's, not the archive's) and whether a cache already holds it.
    (A record, not a dataclass: dataclasses cost a build's start-up 8 ms.)
    """

    __slots__ = ("drv", "name", "size", "urls", "choice")
    drv: Derivation
    name: str
    size: int | None
    urls: tuple[str, ...]
    choice: Any  # cudapkgs.fetch.planning.SourceChoice

    def __init__(self, drv: Derivation, name: str, size: int | None, urls: tuple[str, ...], choice: Any = None) -> None:
        self._init(drv, name, size, urls, choice)

    @property
    def cached(self) -> bool:
        return self.choice is not None and self.choice.cached is not None

    @property
    def download_size(self) -> int | None:
        """Bytes this source will download: 0 when cached, the chosen fetcher's size otherwise."""
        if self.cached:
            return 0
        return self.choice.size if self.choice is not None else self.size


class Plan(FrozenRecord):
    """What realising `roots` takes: paths to substitute from caches, builds in dependency order, their downloads."""

    __slots__ = ("roots", "to_build", "to_fetch", "to_substitute", "skipped")
    roots: tuple[Derivation, ...]
    to_build: tuple[Derivation, ...]
    to_fetch: tuple[Fetch, ...]
    #: cudapkgs.store.caches.substitution.Substitute objects, sorted by path
    to_substitute: tuple[Any, ...]
    #: ``((fetcher, base URL, reason), ...)``: configured fetchers whose host did not answer the plan's
    #: probe (`cudapkgs.fetch.reachability`), skipped for every source of this plan
    skipped: tuple[tuple[str, str, str], ...]

    def __init__(self, roots: tuple[Derivation, ...], to_build: tuple[Derivation, ...], to_fetch: tuple[Fetch, ...],
                 to_substitute: tuple[Any, ...] = (), skipped: tuple[tuple[str, str, str], ...] = ()) -> None:
        self._init(roots, to_build, to_fetch, to_substitute, skipped)

    @property
    def skipped_fetchers(self) -> frozenset[str]:
        """The fetchers a build of this plan does not try (their host did not answer)."""
        return frozenset(f for f, _host, _why in self.skipped)

    @property
    def slow_builds(self) -> tuple[tuple[Derivation, str], ...]:
        """``(derivation, hint)`` for each build its package marks slow (``meta.slowBuild``:
        NCCL from source, about an hour on two cores), so that a dry run can warn before it starts."""
        return tuple((d, str(d.context["slowBuild"])) for d in self.to_build if d.context.get("slowBuild"))

    @property
    def substitute_download_size(self) -> int:
        """Compressed bytes to download from caches."""
        return sum(s.info.download_size for s in self.to_substitute)

    @property
    def substitute_nar_size(self) -> int:
        """Bytes the substituted paths take unpacked (their NAR sizes)."""
        return sum(s.info.nar_size for s in self.to_substitute)

    @property
    def download_size(self) -> int:
        """Bytes to download (cached sources and sources of unknown size count 0; a file two builds
        fetch, such as CUDA 12.9's nvcc archive that cuda_nvcc and cuda_crt both unpack, counts once)."""
        seen: dict[tuple[Any, ...], int] = {}
        for f in self.to_fetch:
            what = ((getattr(f.choice, "fetcher", None), getattr(f.choice, "what", f.name)) if f.choice is not None
                    else (f.name, f.urls))
            seen[what] = f.download_size or 0
        return sum(seen.values())

    @property
    def unknown_sizes(self) -> int:
        """How many files to download have no known size (a file two builds fetch counts once, as in
        `download_size`)."""
        seen = {((getattr(f.choice, "fetcher", None), getattr(f.choice, "what", f.name)) if f.choice is not None
                 else (f.name, f.urls)) for f in self.to_fetch if not f.cached and f.download_size is None}
        return len(seen)

    @property
    def nothing_to_do(self) -> bool:
        return not self.to_build and not self.to_substitute

    def to_json(self) -> dict[str, Any]:
        return {
            "substitute": [s.to_json() for s in self.to_substitute],
            "substituteDownloadSize": self.substitute_download_size,
            "build": [d.drv_path for d in self.to_build],
            "fetch": [
                {"name": f.name, "size": f.size, "urls": list(f.urls), "drvPath": f.drv.drv_path,
                 "downloadSize": f.download_size, "cached": f.cached,
                 **({"source": f.choice.to_json()} if f.choice is not None else {})}
                for f in self.to_fetch
            ],
            "downloadSize": self.download_size,
            "skippedFetchers": [{"fetcher": f, "host": h, "reason": r} for f, h, r in self.skipped],
            "slowBuilds": [{"drvPath": d.drv_path, "hint": hint} for d, hint in self.slow_builds],
        }


def plan(
    store: Any,
    derivations: Iterable[Derivation],
    substituters: Any = None,
    *,
    fetchers: Sequence[str] | None = None,
    wheel_sizes: Any = None,
    probe: Any = None,
) -> Plan:
    """The derivations of the closures of `derivations` that have an invalid output, and their sources.

    With `substituters` (a `cudapkgs.store.caches.substitution.Substituters`), outputs a
    cache has (with their whole runtime closure, signed by a trusted key) are
    substituted instead, as Nix does: top-down, so a substitutable package's build
    inputs (nvcc for a CUDA program, say) are neither built nor fetched.

    Each NVIDIA redistributable's source to fetch gets the fetcher expected to serve it
    (`cudapkgs.fetch.planning.choose_source`, with ``fetchers`` or the derivation's own).
    ``wheel_sizes`` is None, a mapping ``"project==version" -> bytes``, or a callable taking
    the list of ``(project, version, arch)`` wanted and returning such a mapping.
    Raises `SourcePlanError` listing, one per line, every source no fetcher can supply.

    Reachability is decided here, once: each network host the chosen fetchers would download
    from (NVIDIA's redist server, a URL mirror, GitHub for a fixed-output source no local mirror
    holds) is probed once, all in parallel, each under a deadline (``probe``: a callable
    ``urls -> {base URL: None or reason}``, default `cudapkgs.fetch.reachability.probe`;
    ``$CUDAPKGS_PROBE_HOSTS=0`` turns probing off). A fetcher whose host does not answer is skipped
    for every source of the plan (`Plan.skipped`) and its sources go to the next configured
    fetcher; a fixed-output source whose every location is a host that does not answer is a
    `SourcePlanError` naming the hosts and the source mirror that would serve it.
    """
    from ..fetch.planning import SourcePlanError, choose_source

    roots = tuple(derivations)
    # Rooted before the plan counts on any valid path, and before any fetch.
    candidates = missing(store, roots, protect=True, check_fixed=False)
    to_substitute: tuple[Any, ...] = ()
    if substituters and candidates:
        candidates, to_substitute = _choose_substitutes(store, roots, candidates, substituters)
    # The fetcher outputs that what is built takes as inputs (not those of what is substituted).
    _check_fixed_inputs(store, candidates)
    problems: list[str] = []
    from ..store import reuse

    # Outputs the store can put back from what it verified before fetch nothing (their build
    # fetches its source itself if putting them back fails: cudapkgs.store.reuse).
    reusable = {d.drv_path for d in candidates if d.builder == "buildRedist" and reuse.is_reusable(store.db, d.outputs.values())}
    redist = [d for d in candidates if d.builder == "buildRedist" and (d.data.get("src") or {}).get("relativePath")
              and d.drv_path not in reusable]
    probe = _prober(probe) if candidates else None  # a no-op build imports nothing for it
    skipped: dict[str, tuple[str, str]] = {}  # fetcher -> (base URL, reason)
    answered: set[str] = set()  # network fetchers whose host answered the probe
    if probe is not None:
        answered = _probe_fetchers(store, redist, fetchers, probe, skipped)
        problems += _unreachable_fixed_outputs(candidates, probe)
    skip = frozenset(skipped)
    sizes: Any = wheel_sizes if not callable(wheel_sizes) else None
    if callable(wheel_sizes):
        sizes = wheel_sizes(_wanted_wheels(store, redist, fetchers, skip)
                            + _wanted_other_wheels(d for d in candidates if d.drv_path not in reusable))
    redist_paths = {d.drv_path for d in redist}
    fetches = []
    for drv in candidates:
        src = drv.data.get("src")
        if src and src.get("urls") and drv.drv_path not in reusable:  # a local path source (type "path") is not downloaded
            size = src.get("size")
            choice = None
            if drv.drv_path in redist_paths:
                try:
                    choice = choose_source(drv.attrs, src, _fetchers_of(drv, fetchers, skip), store.store_dir, wheel_sizes=sizes)
                    if choice.untried and choice.fetcher in answered:  # its host answered this plan's probe
                        from dataclasses import replace

                        choice = replace(choice, untried=None)
                except SourcePlanError as error:
                    problems.append(f"{drv.name}: {error}{_skipped_note(skipped)}")
                    continue
            fetches.append(Fetch(drv, str(src.get("name") or drv.name), size if isinstance(size, int) else None,
                                 tuple(src.get("urls") or ()), choice))
        elif drv.drv_path not in reusable and (pinned := _pinned_wheel_fetch(drv, sizes)) is not None:
            fetches.append(pinned)
        elif drv.drv_path not in reusable and (nvidia := _nvidia_wheel_fetch(drv, sizes)) is not None:
            fetches.append(nvidia)
    if problems:
        head = "cannot build: " if len(problems) == 1 else f"cannot build {len(problems)} packages:\n  "
        error = SourcePlanError(head + "\n  ".join(problems))
        error.skipped = tuple((f, host, why) for f, (host, why) in skipped.items())  # for a caller that evaluates again
        raise error
    return Plan(roots, tuple(candidates), tuple(fetches), to_substitute,
                tuple((f, host, why) for f, (host, why) in skipped.items()))


def _prober(probe: Any) -> Any:
    """The probe to use: `probe`, else `reachability.probe` unless ``$CUDAPKGS_PROBE_HOSTS`` is 0/false/no."""
    if probe is not None:
        return probe
    from ..fetch.reachability import default_prober

    return default_prober()


def _probe_fetchers(store: Any, redist: Sequence[Derivation], fetchers: Sequence[str] | None, probe: Any,
                    skipped: dict[str, tuple[str, str]]) -> set[str]:
    """Fill `skipped` with the network fetchers the plan would use whose host does not answer; return
    those whose host answered (`cudapkgs.fetch.reachability.settle_fetchers`: rounds of choosing each
    source's fetcher, the dead ones left out, and probing the hosts chosen and not probed yet)."""
    from ..fetch.planning import SourcePlanError, choose_source
    from ..fetch.reachability import network_url, settle_fetchers

    def chosen(skip: frozenset[str]) -> Any:
        for drv in redist:
            src = drv.data["src"]
            try:
                choice = choose_source(drv.attrs, src, _fetchers_of(drv, fetchers, skip), store.store_dir)
            except SourcePlanError:
                continue
            url = network_url(choice.fetcher, src.get("urls") or ()) if choice.cached is None else None
            if url is not None:
                yield choice.fetcher, url

    dead, answered = settle_fetchers(chosen, probe)
    skipped.update(dead)
    return answered


#: The builders of fixed-output sources (fetchFromGitHub, fetchzip, fetchurl, fetchPypi) and their upstream URLs.
_FIXED_OUTPUT_URLS = {"fetchFromGitHub": ("url",), "fetchzip": ("url",), "fetchurl": ("urls",), "fetchPypi": ("urls", "url")}


def _unreachable_fixed_outputs(candidates: Sequence[Derivation], probe: Any) -> list[str]:
    """One problem line per fixed-output source to fetch that no local mirror holds and whose every
    remote location's host does not answer `probe`."""
    from ..fetch.fixed_output import mirror_candidates, source_mirrors
    from ..fetch.reachability import base_url

    pending: list[tuple[Derivation, list[str]]] = []
    for drv in candidates:
        keys = _FIXED_OUTPUT_URLS.get(drv.builder)
        if keys is None or not isinstance(drv.attrs, dict):
            continue
        upstream: list[str] = []
        for key in keys:
            value = drv.attrs.get(key)
            upstream += [value] if isinstance(value, str) else [str(v) for v in value or () if isinstance(v, str)]
        names = [str(n) for n in drv.attrs.get("mirrorNames") or ()]
        local, remote = [], []
        for mirror in source_mirrors(drv.context.get("sourceMirrors") or ()):
            for location in mirror_candidates(mirror, names):
                (remote if "://" in location and not location.startswith("file://") else local).append(location)
        if local or not (remote or upstream):
            continue
        pending.append((drv, remote + upstream))
    if not pending:
        return []
    answers = probe([u for _drv, urls in pending for u in urls])
    problems = []
    for drv, urls in pending:
        dead = [(base_url(u), answers.get(base_url(u))) for u in urls]
        if all(why is not None for _host, why in dead):
            hosts = "; ".join(dict.fromkeys(f"{host}: {why}" for host, why in dead))
            problems.append(
                f"{drv.name}: cannot fetch its source: no location answers ({hosts}); put the archive "
                f"({', '.join(str(n) for n in (drv.attrs.get('mirrorNames') or ())[1:2]) or drv.name}) in a source mirror "
                f"(config sourceMirrors or $CUDAPKGS_SOURCE_MIRRORS)")
    return problems


def _skipped_note(skipped: Mapping[str, tuple[str, str]]) -> str:
    if not skipped:
        return ""
    return " (skipped for this plan, no answer: " + "; ".join(f"{f} at {h}: {why}" for f, (h, why) in skipped.items()) + ")"


#: The fetcher a rewired wheel's pinned wheel comes from (`fetch.pinned_wheels`: pip, ``--require-hashes``).
PINNED_WHEEL_FETCHER = "pip (pinned)"


def _pinned_wheel_fetch(drv: Derivation, sizes: Any = None) -> Fetch | None:
    """The pinned wheel of a rewired wheel (``wheel = {file, sha256}``: torch's, triton's) as a source the plan
    lists, or None for any other derivation (or a malformed pin: the build says what is wrong with it).

    Its size is the wheel cache's file when cached there under the pinned sha256
    (`pinned_wheels.cached_pinned_wheel`: a ``stat``, the bytes are not read), else ``sizes[file]``
    (`sizes`: None or a mapping filled by `--dry-run`'s index lookup, `fetch.planning.lookup_wheel_sizes`
    with the file name: the index answered), else unknown, and then the host is "the Python package
    index (pip)", untried. The file name is the pin's: torch's 555-900 MB wheel is the largest download of the ML
    closure, and before this a plan did not name it.
    """
    from collections.abc import Mapping

    wheel = drv.attrs.get("wheel") if isinstance(drv.attrs, Mapping) else None
    if not isinstance(wheel, Mapping) or not isinstance(wheel.get("file"), str):
        return None
    from ..errors import CudapkgsError
    from ..fetch.pinned_wheels import cached_pinned_wheel, parse_pin

    try:
        pin = parse_pin(dict(wheel))
    except CudapkgsError:
        return None
    return _wheel_fetch(drv, PINNED_WHEEL_FETCHER, pin.file, cached_pinned_wheel(pin), sizes)


def _wheel_fetch(drv: Derivation, fetcher: str, what: str, found: Any, sizes: Any) -> Fetch:
    """The plan's row for a wheel `drv` downloads: its size is the cached file's (`found`, a Path or None)
    when there, else ``sizes[what]`` (`--dry-run`'s index lookup), else unknown and the index untried."""
    from ..fetch.planning import SourceChoice

    size = None
    if found is not None:
        try:
            size = found.stat().st_size
        except OSError:
            found = None
    if found is None:
        size = _known_size(sizes, what)
    choice = SourceChoice(fetcher, what, size, "wheel cache" if found is not None else None,
                          untried=None if found is not None or size is not None else "the Python package index (pip)")
    return Fetch(drv, what, size, (), choice)


def _known_size(sizes: Any, key: str) -> int | None:
    size = sizes.get(key) if sizes is not None and hasattr(sizes, "get") else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def _nvidia_wheel_spec(drv: Derivation) -> tuple[str, str, str] | None:
    """``(project, version, arch)`` of a member built from NVIDIA's wheel (``nvidiaWheel``: the prebuilt
    NCCL and NVSHMEM of ``prebuiltWheels``, CUDA 12's ``cuda_nvcc_wheel``), or None."""
    from collections.abc import Mapping

    attrs = drv.attrs if isinstance(drv.attrs, Mapping) else {}
    spec = attrs.get("nvidiaWheel")
    if not isinstance(spec, Mapping):
        return None
    project, version = spec.get("project"), spec.get("version")
    if not (isinstance(project, str) and isinstance(version, str)):
        return None  # the build says what is wrong with it
    return project, version, str(attrs.get("system", "x86_64-linux")).partition("-")[0]


def _nvidia_wheel_fetch(drv: Derivation, sizes: Any = None) -> Fetch | None:
    """The wheel a member built from NVIDIA's wheel (`_nvidia_wheel_spec`) downloads, as a source the plan
    lists (fetcher ``wheels``, ``project==version``), or None for any other derivation.

    Its size is the wheel cache's file when there (`fetch.wheels.cached_wheel`, ``check=False``: a
    ``stat``), else ``sizes["project==version"]`` (`--dry-run`'s index lookup: the index answered), else
    unknown and the index untried. Before
    this a plan listed neither NCCL's wheel (289 MiB for CUDA 12.9) nor NVSHMEM's, so `--dry-run`'s
    total left them out.
    """
    spec = _nvidia_wheel_spec(drv)
    if spec is None:
        return None
    from ..fetch.wheels import cached_wheel

    project, version, arch = spec
    return _wheel_fetch(drv, "wheels", f"{project}=={version}", cached_wheel(project, version, arch, check=False), sizes)


def _choose_substitutes(store: Any, roots: tuple[Derivation, ...], candidates: list[Derivation],
                        substituters: Any) -> tuple[list[Derivation], tuple[Any, ...]]:
    invalid = set(store.db.invalid_paths(p for drv in candidates for p in drv.outputs.values()))
    found = substituters.query(store, sorted(invalid))
    by_path = {d.drv_path: d for d in candidates}
    chosen: set[str] = set()
    build: set[str] = set()
    seen: set[str] = set()
    stack = [by_path[r.drv_path] for r in reversed(roots) if r.drv_path in by_path]
    while stack:
        drv = stack.pop()
        if drv.drv_path in seen:
            continue
        seen.add(drv.drv_path)
        outputs = [p for p in drv.outputs.values() if p in invalid]
        if outputs and all(p in chosen or p in found for p in outputs):
            chosen.update(substituters.closure_of(found, outputs))
            continue
        build.add(drv.drv_path)
        stack.extend(by_path[dep.drv_path] for dep in drv.deps if dep.drv_path in by_path)
    to_build = [d for d in candidates if d.drv_path in build
                and not all(p in chosen for p in d.outputs.values() if p in invalid)]
    return to_build, tuple(found[p] for p in sorted(chosen))


def _fetchers_of(drv: Derivation, fetchers: Sequence[str] | None, skip: frozenset[str] = frozenset()) -> tuple[str, ...]:
    return tuple(f for f in (fetchers or drv.context.get("fetchers") or ("redist", "wheels")) if f not in skip)


def _wanted_wheels(store: Any, redist: Sequence[Derivation], fetchers: Sequence[str] | None,
                   skip: frozenset[str] = frozenset()) -> list[tuple[str, str, str]]:
    """``(project, version, arch)`` of the wheels the plan would download (not cached, wheels chosen)."""
    from ..fetch.planning import SourcePlanError, choose_source

    wanted = []
    for drv in redist:
        try:
            choice = choose_source(drv.attrs, drv.data["src"], _fetchers_of(drv, fetchers, skip), store.store_dir)
        except SourcePlanError:
            continue
        if choice.fetcher == "wheels" and choice.cached is None:
            project, _, version = choice.what.partition("==")
            rel = str(drv.data["src"]["relativePath"])
            wanted.append((project, version, "aarch64" if "linux-sbsa" in rel else "x86_64"))
    return wanted


def _wanted_other_wheels(candidates: Iterable[Derivation]) -> list[tuple[str, str, str]]:
    """The other wheels a plan would download, for `fetch.planning.lookup_wheel_sizes`: ``(project,
    version, arch)`` of each `_nvidia_wheel_spec` member not in the wheel cache, and ``(project, version,
    file)`` of each pinned wheel (``wheel = {file, sha256}``) not in it (looked up by file name)."""
    from collections.abc import Mapping

    from ..errors import CudapkgsError
    from ..fetch.pinned_wheels import cached_pinned_wheel, parse_pin
    from ..fetch.wheels import cached_wheel

    wanted = []
    for drv in candidates:
        spec = _nvidia_wheel_spec(drv)
        if spec is not None:
            if cached_wheel(*spec, check=False) is None:
                wanted.append(spec)
            continue
        wheel = drv.attrs.get("wheel") if isinstance(drv.attrs, Mapping) else None
        if isinstance(wheel, Mapping) and isinstance(wheel.get("file"), str):
            try:
                pin = parse_pin(dict(wheel))
            except CudapkgsError:
                continue
            if cached_pinned_wheel(pin) is None:
                wanted.append((pin.name, pin.version, pin.file))
    return wanted
