"""Which fetcher will serve a source, how much it will download, and what is already cached.

Used at plan time (``cudapkgs build`` and ``--dry-run``), before anything is downloaded:
a component that none of the configured fetchers can supply fails here, with the reason
and the fetchers that could supply it, instead of "building" something incomplete
(CUDA 12's nvcc wheel has no ``nvcc``).

The answer is a prediction: a network fetcher (``redist``, a URL mirror) is assumed to
work; if it fails at build time the next configured fetcher is tried, and the build log
names the fetcher that served.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..errors import FetchError
from .supply import KNOWN_FETCHERS, could_supply, supply
from .wheel_lookup import cached_wheel, wheel_cache_directory

__all__ = ["SourceChoice", "SourcePlanError", "choose_source", "download_entry"]


class SourcePlanError(FetchError):
    """No configured fetcher can supply a source; the message says why and what could."""


@dataclass(frozen=True, slots=True)
class SourceChoice:
    """The fetcher expected to serve one source.

    ``fetcher``: a name from the ``fetchers`` config key (``redist``, ``mirror:<where>``,
    ``wheels``); ``what``: the file it will fetch (an archive name, or ``project==version``
    for a wheel); ``size``: bytes that fetcher downloads (None when unknown); ``cached``:
    where the file already is (it is then not downloaded), else None; ``passed_over``: one
    reason per configured fetcher tried before it; ``untried``: the host the file would come
    from when planning did not contact it (NVIDIA's server, a URL mirror; the index for a
    wheel whose size was not looked up), so whether it answers is not known; None when the
    file is cached or on this machine.
    """

    fetcher: str
    what: str
    size: int | None
    cached: str | None
    passed_over: tuple[str, ...] = ()
    untried: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "fetcher": self.fetcher,
            "file": self.what,
            "size": self.size,
            "cached": self.cached,
            "passedOver": list(self.passed_over),
            "untried": self.untried,
        }


def download_entry(store_dir: str | os.PathLike[str], sha256: str, relative_path: str) -> Path:
    """Where a verified archive lies in the store's download cache."""
    return Path(store_dir) / ".cache" / "downloads" / sha256.lower() / posixpath.basename(relative_path)


def _arch(relative_path: str) -> str | None:
    if "linux-aarch64" in relative_path:
        return None  # Jetson builds: no wheels
    if "linux-sbsa" in relative_path:
        return "aarch64"
    if "linux-x86_64" in relative_path:
        return "x86_64"
    return None


def choose_source(
    attrs: Mapping[str, Any],
    src: Mapping[str, Any],
    fetchers: Sequence[str],
    store_dir: str | os.PathLike[str],
    *,
    wheel_sizes: Mapping[str, int] | None = None,
) -> SourceChoice:
    """The `SourceChoice` for a buildRedist source ``src`` (a derivation's ``src`` dict).

    ``attrs`` are the derivation's attributes (``pname``, ``version``, ``redistName``,
    ``cudaMajorMinorVersion``); ``wheel_sizes`` maps ``project==version`` to a wheel's size
    in bytes when the caller looked it up.  Raises SourcePlanError when no fetcher can
    supply it.
    """
    relative = str(src["relativePath"])
    name = posixpath.basename(relative)
    archive_size = src.get("size") if isinstance(src.get("size"), int) else None
    cached = download_entry(store_dir, str(src["sha256"]), relative)
    if cached.is_file() and (archive_size is None or cached.stat().st_size == archive_size):
        return SourceChoice(fetchers[0] if fetchers else "redist", name, archive_size, "download cache")
    pname = str(attrs["pname"])
    version = str(attrs["version"])
    product = str(attrs.get("redistName") or "cuda")
    major = int(str(attrs["cudaMajorMinorVersion"]).split(".")[0])
    facts = {"product": product, "pname": pname, "version": version, "cuda_major": major,
             "relative_path": relative, "redist_system": _redist_system(attrs, relative), "size": archive_size}
    passed: list[str] = []
    for fetcher in fetchers:
        kind, _, where = fetcher.partition(":")
        if fetcher == "redist":
            return SourceChoice("redist", name, archive_size, None, tuple(passed), REDIST_HOST)
        if kind == "mirror" and where:
            if "://" in where:
                return SourceChoice(fetcher, name, archive_size, None, tuple(passed), _host(where))
            from .sources import redist_path

            local = Path(where).expanduser() / redist_path(product, relative)
            if local.is_file():
                return SourceChoice(fetcher, name, archive_size, f"mirror {where}", tuple(passed))
            passed.append(f"{fetcher}: no {local}")
            continue
        if fetcher == "wheels":
            found = supply("wheels", **facts)
            arch = _arch(relative) or _host_arch()
            if not found.can or arch is None:
                passed.append(f"wheels: {found.reason or 'no wheels for this machine'}")
                continue
            spec = str(found.file)
            project, _, wheel_version = spec.partition("==")
            # Not hashed here (100 MiB for a CUDA toolkit, before any build could start): the
            # fetch hashes it, and fetches it again if its bytes changed.
            wheel = cached_wheel(project, wheel_version, arch, wheel_cache_directory(), check=False)
            if wheel is not None:
                return SourceChoice("wheels", wheel.name, wheel.stat().st_size, "wheel cache", tuple(passed))
            size = (wheel_sizes or {}).get(spec)
            # A size means the index answered for this wheel; without one it was not asked (or failed).
            return SourceChoice("wheels", spec, size, None, tuple(passed), None if size is not None else _host(index_url()))
        passed.append(f"{fetcher}: unknown fetcher (use {', '.join(KNOWN_FETCHERS)})")
    import json

    could = could_supply(fetchers, **facts)
    could_text = f"fetchers that could: {', '.join(could)}" if could else "no fetcher could"
    raise SourcePlanError(
        f"no configured fetcher can supply {name} ({'; '.join(passed) or 'no fetchers configured'}); "
        f"{could_text} (config key `fetchers`, now {json.dumps(list(fetchers))})"
    )


#: The host of NVIDIA's redist server (`cudapkgs.platform.REDIST_URL_PREFIX`).
REDIST_HOST = "developer.download.nvidia.com"


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).hostname or url


def _host_arch() -> str | None:
    machine = os.uname().machine
    return machine if machine in ("x86_64", "aarch64") else None


def _redist_system(attrs: Mapping[str, Any], relative_path: str) -> str:
    """The redist system of a source: the derivation's, or read from the archive's path."""
    system = str(attrs.get("redistSystem") or "")
    if system and system not in ("source", "linux-all"):
        return system
    for candidate in ("linux-aarch64", "linux-sbsa", "linux-x86_64"):
        if candidate in relative_path:
            return candidate
    return {"x86_64": "linux-x86_64", "aarch64": "linux-sbsa"}.get(os.uname().machine, "linux-x86_64")


def index_url() -> str:
    """The PEP 691 "simple" index asked for wheel sizes: ``$CUDAPKGS_PYPI_SIMPLE``, else
    ``$PIP_INDEX_URL``, else PyPI's."""
    return os.environ.get("CUDAPKGS_PYPI_SIMPLE") or os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"


def lookup_wheel_sizes(
    wanted: Sequence[tuple[str, str, str]], *, index: str | None = None, timeout: float = 5.0
) -> tuple[dict[str, int], list[str]]:
    """Sizes in bytes of wheels ``(project, version, arch)`` from the index's JSON API (PEP 691/700).

    Returns ``({"project==version": size}, problems)``; a project the index cannot answer
    for is left out and named in ``problems`` (one line each), never an exception. An entry whose
    third member is a wheel's file name (``(project, version, "torch-2.9.1-cp311-….whl")``: a pinned
    wheel) is looked up by that name instead, and its size is keyed by the file name.
    """
    import json

    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    from ..transport.errors import TransferError
    from ..transport.http import Limits, get_bytes
    from .wheel_lookup import platform_tags

    base = (index or index_url()).rstrip("/")
    # A project's page lists every file it ever released: a few MiB at most (PyPI's largest are ~2 MiB).
    limits = Limits(max_bytes=16 << 20, connect_s=timeout, read_s=timeout, deadline_s=4 * timeout)
    sizes: dict[str, int] = {}
    problems: list[str] = []
    for project, version, arch in wanted:
        project = re.sub(r"[-_.]+", "-", project).lower()  # PEP 503's normalised name (onnxruntime_gpu)
        url = f"{base}/{project}/"
        try:
            data = json.loads(get_bytes(url, limits=limits, headers={"Accept": "application/vnd.pypi.simple.v1+json"},
                                        attempts=2, backoff_s=0.5))
        except TransferError as error:
            problems.append(f"{project}: no size from {error.url}: {error.reason}{error.tries}")
            continue
        except ValueError as error:  # not JSON (an HTML error page, a cut-off body)
            problems.append(f"{project}: no size from {url}: not a PEP 691 JSON answer ({error})")
            continue
        if arch.endswith(".whl"):  # a pinned wheel: its file by name
            entries = data.get("files", []) if isinstance(data, dict) else []
            size = next((e.get("size") for e in entries if isinstance(e, dict) and e.get("filename") == arch), None)
            if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
                sizes[arch] = size
            else:
                problems.append(f"{project}: {url} lists no {arch} with a size")
            continue
        try:
            tags_wanted = set(platform_tags(arch))
            want = Version(version)
        except (FetchError, InvalidVersion) as error:
            problems.append(f"{project}: {error}")
            continue
        found = None
        for entry in data.get("files", []) if isinstance(data, dict) else []:
            try:
                _name, wheel_version, _build, wheel_tags = parse_wheel_filename(str(entry.get("filename", "")))
            except (InvalidWheelFilename, InvalidVersion):
                continue
            if wheel_version == want and any(t.platform in tags_wanted for t in wheel_tags):
                size = entry.get("size")
                if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
                    found = size
                    break
        if found is None:
            problems.append(f"{project}: {url} lists no {version} wheel with a size for {arch}")
        else:
            sizes[f"{project}=={version}"] = found
    return sizes, problems
