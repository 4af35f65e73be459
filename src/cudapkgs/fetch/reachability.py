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
from collections.abc import Iterable, Mapping

__all__ = ["PROBE_SECONDS", "base_url", "forget", "probe"]

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


def base_url(url: str) -> str:
    """``scheme://host[:port]`` of `url` (what is probed); `url` unchanged when it has no scheme or host."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return url
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


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
