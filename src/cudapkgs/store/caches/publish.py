"""Publishing a closure to a shared cache, replacing what its readers would refuse.

`Cache.upload` skips a path whose narinfo is already there, which is right for a
good entry and wrong for a bad one: an unsigned narinfo (pushed without a key), one
signed by a key the readers do not trust, a malformed one, or one whose NAR is gone.
A Dask worker that found such an entry for an output it had just built left it in
place, so the client refused the output after every remote build of it, forever.
`publish_closure` uploads what is absent, keeps what its readers accept (a narinfo
that parses, names the path, is signed by a trusted key when signatures are
required, and whose NAR the cache has), and replaces the rest with this store's
path, signed with the given key, saying which entries it replaced and why.

A good entry with another NAR than this store's (a build that is not bit-for-bit
reproducible, signed by a trusted key) is kept: readers get a build they trust.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .base import Cache, CacheError, SubstituteRefused, dependencies_first
from .narinfo import NarInfoError
from .signing import PublicKey

__all__ = ["Published", "entry_problem", "publish_closure"]


@dataclass
class Published:
    """What `publish_closure` did: paths uploaded (absent before), kept, and replaced (path -> why)."""

    uploaded: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    replaced: dict[str, str] = field(default_factory=dict)


_ABSENT = "absent"


def entry_problem(cache: Cache, path: str, trusted_keys: Iterable[PublicKey], *, require_sigs: bool = True) -> str | None:
    """Why `cache`'s entry for `path` would be refused by a reader trusting `trusted_keys`, or None
    when it would be accepted; "absent" when there is none. Raises CacheUnavailable when the
    cache does not answer (nothing can be decided then)."""
    try:
        info = cache.narinfo(path)
    except NarInfoError as error:
        return f"is malformed ({error})"
    if info is None:
        return _ABSENT
    try:
        cache.verify(info, trusted_keys, require_sigs=require_sigs)
    except SubstituteRefused:
        signers = ", ".join(sorted({s.partition(":")[0] for s in info.sigs})) or "nobody"
        return f"is not signed by a trusted key (signed by: {signers})"
    if not cache._exists(info.url):
        return f"names the NAR {info.url}, which the cache does not have"
    return None


def publish_closure(cache: Cache, store: Any, paths: Iterable[str], *, secret_key: Any = None,
                    trusted_keys: Iterable[PublicKey] = (), require_sigs: bool = True) -> Published:
    """Upload the closure of `paths` to `cache`, dependencies first, replacing refused entries.

    `trusted_keys` and `require_sigs` are the readers' trust (the Dask client's). A refused
    entry is replaced only by one its readers will accept: signed with `secret_key` when
    signatures are required; without a key, CacheError says which entry and why instead
    (replacing it unsigned would change nothing). Raises CacheError / CacheUnavailable /
    StoreError as `Cache.upload` does.
    """
    keys = list(trusted_keys)
    done = Published()
    cache.init(store.store_dir)
    closure = store.closure(store.parse(p) for p in paths)
    for path in dependencies_first(store, closure):
        problem = entry_problem(cache, path, keys, require_sigs=require_sigs)
        if problem is None:
            done.kept.append(path)
            continue
        if problem != _ABSENT and secret_key is None and require_sigs:
            raise CacheError(f"{cache.url}: its entry for {path} {problem}, and there is no signing key here to "
                             "replace it with one its readers trust; give the builders a key (--sign-key, "
                             "$CUDAPKGS_SIGN_KEY_FILE on a worker) or delete the entry")
        cache.upload(store, path, secret_key=secret_key, force=problem != _ABSENT)
        if problem == _ABSENT:
            done.uploaded.append(path)
        else:
            done.replaced[path] = problem
    return done
