"""Whether a source host answers from this machine: one bounded probe per host, decided before a plan builds.

A fetcher whose server does not answer (NVIDIA's redist host behind a firewall, GitHub on a
machine that reaches only PyPI) used to be found out at build time, one archive after another,
each failing late and falling over to the next configured fetcher. `probe` asks every host a
plan needs once, all at the same time, each under a deadline; the plan then skips a host that
does not answer for every source (`cudapkgs.realise.scheduler.plan`), and ``--dry-run`` and
``cudapkgs doctor`` say so.

A host *answers* when it returns any HTTP status to a ``HEAD`` of its root (a 403 or 404 is an
answer: the server is there). It does *not* answer when the name does not resolve, the
connection is refused or reset, TLS fails, or nothing comes back before the deadline. The
answers are kept for the life of the process (a plan, a ``doctor`` run), so a host is probed
once, not once per archive.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping

__all__ = ["PROBE_SECONDS", "base_url", "default_prober", "forget", "network_url", "probe", "settle_fetchers"]

#: Each probe's deadline in seconds (connect, TLS and the response's headers together).
PROBE_SECONDS = 4.0

_ANSWERS: dict[str, str | None] = {}
_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # A lock held by a parent's thread at fork() (a probe in flight) is never released in the child.
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def default_prober() -> Callable[[list[str]], Mapping[str, str | None]] | None:
    """`probe`, or None when ``$CUDAPKGS_PROBE_HOSTS`` is 0, false, no or off (probing turned off)."""
    if os.environ.get("CUDAPKGS_PROBE_HOSTS", "").strip().lower() in ("0", "false", "no", "off"):
        return None
    return probe


def network_url(fetcher: str, urls: Iterable[str] = ()) -> str | None:
    """The URL whose host a network fetcher downloads from; None for a fetcher that asks no host here.

    ``redist``: the first of `urls` (a source's own URLs), else NVIDIA's redist root
    (`cudapkgs.fetch.sources.NVIDIA_PREFIX`); ``mirror:<URL>``: the URL (``mirror:file://`` and a
    directory are local); ``wheels`` and anything else: None (the index is asked when a wheel is
    fetched, not probed).
    """
    kind, _, where = fetcher.partition(":")
    if fetcher == "redist":
        from .sources import NVIDIA_PREFIX

        return next(iter(urls), NVIDIA_PREFIX)
    if kind == "mirror" and "://" in where and not where.startswith("file://"):
        return where
    return None


def settle_fetchers(
    chosen: Callable[[frozenset[str]], Iterable[tuple[str, str]]],
    prober: Callable[[list[str]], Mapping[str, str | None]],
) -> tuple[dict[str, tuple[str, str]], set[str]]:
    """Which network fetchers to skip because their host does not answer, decided as a build plan does.

    ``chosen(skip)`` yields ``(fetcher, url)`` for every source not already on this machine whose
    chosen fetcher, with the fetchers in ``skip`` left out, is a network one (`network_url`).
    Rounds: the hosts of the fetchers chosen and not probed yet are probed together (``prober``,
    `probe` or a stand-in: ``urls -> {base URL: None or reason}``); a fetcher whose host does not
    answer joins ``skip``, and its sources are chosen again; a round that probes nothing ends it.
    Each host is asked at most once (and `probe` keeps its answers for the process).

    Returns ``({fetcher: (base URL, reason)} skipped, {fetchers whose host answered})``. Used by
    `cudapkgs.realise.planning.plan` and by the listings (`cudapkgs.inventory`), so that `list` and
    `search` name the fetcher a build would use now.
    """
    skipped: dict[str, tuple[str, str]] = {}
    probed: set[str] = set()
    while True:
        wanted: dict[str, str] = {}  # fetcher -> url
        for fetcher, url in chosen(frozenset(skipped)):
            if fetcher not in probed:
                wanted.setdefault(fetcher, url)
        if not wanted:
            return skipped, probed - set(skipped)
        answers = prober(list(wanted.values()))
        for fetcher, url in wanted.items():
            probed.add(fetcher)
            why = answers.get(base_url(url))
            if why is not None:
                skipped[fetcher] = (base_url(url), str(why))


def base_url(url: str) -> str:
    """``scheme://host[:port]`` of `url` (what is probed); `url` unchanged when it has no scheme or host.
    Never raises: a port out of range or not a number (``mirror:http://h:99999``, which made `list`, `plan`
    and `doctor` end in an internal error) is kept as written, the user information left out either way
    (a password is never shown)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return url
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    try:
        port = parts.port
    except ValueError:
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def forget() -> None:
    """Drop the answers kept so far (a long-lived process, or a test, asks again)."""
    with _LOCK:
        _ANSWERS.clear()


def probe(urls: Iterable[str], *, timeout_s: float = PROBE_SECONDS) -> Mapping[str, str | None]:
    """Probe the hosts of `urls` in parallel; return ``{base_url: None if it answers, else the reason}``.

    Each host gets one ``HEAD /`` with `timeout_s` seconds for everything (a host probed before in
    this process is not asked again). The reason is one line ("connection refused", "timed out
    after 4 s", "name does not resolve", …) from the transfer library's error. Never raises for a
    host that fails; a URL without a scheme and host (a local directory) is left out.
    """
    bases = list(dict.fromkeys(base_url(u) for u in urls if "://" in u and not u.startswith("file://")))
    with _LOCK:
        todo = [b for b in bases if b not in _ANSWERS]
    if todo:
        results: dict[str, str | None] = {}
        threads = [threading.Thread(target=_probe_one, args=(b, timeout_s, results), daemon=True) for b in todo]
        for thread in threads:
            thread.start()
        for thread in threads:
            # _probe_one is bounded by its deadline; the join's slack only covers thread start-up.
            thread.join(timeout_s + 2.0)
        with _LOCK:
            for b in todo:
                _ANSWERS[b] = results.get(b, f"no answer within {timeout_s:g} s")
    with _LOCK:
        return {b: _ANSWERS[b] for b in bases}


def _probe_one(base: str, timeout_s: float, results: dict[str, str | None]) -> None:
    from ..transport.errors import TransferError
    from ..transport.http import Limits, request

    limits = Limits(max_bytes=1 << 16, connect_s=timeout_s, read_s=timeout_s, deadline_s=timeout_s)
    try:
        response = request("HEAD", base + "/", limits=limits, attempts=1)
        response.close()
        results[base] = None
    except TransferError as error:
        if error.status is not None:  # a status after the retries: the server is there
            results[base] = None
        else:
            results[base] = error.reason
    except Exception as error:  # noqa: BLE001 - a probe reports, it never stops the plan
        results[base] = f"{type(error).__name__}: {error}"
