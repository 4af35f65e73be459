"""Small stores with a two-path closure, for the cache tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cudapkgs.store.store import Store


def make_closure(store: Store, size: int = 3000) -> tuple[str, str]:
    """(dep, top): dep holds a file, an executable, a symlink and a subdirectory; top refers to dep."""

    def dep(out: Path) -> None:
        out.mkdir()
        (out / "data").write_bytes(os.urandom(size))
        (out / "bin").mkdir()
        (out / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
        os.chmod(out / "bin" / "tool", 0o755)
        os.symlink("data", out / "link")
        (out / "empty").mkdir()

    first = store.add_path("dep-1.0", dep)

    def top(out: Path) -> None:
        out.mkdir()
        (out / "uses").write_text(first + "/bin/tool\n")

    second = store.add_path("top-1.0", top, references_candidates=[first])
    return first, second


def fresh_store_like(store: Store, aside: Path) -> Store:
    """Move `store` aside and open an empty store at the same directory (store paths embed it)."""
    store.close()
    for dirpath, dirnames, _ in os.walk(store.root):
        os.chmod(dirpath, 0o755)
    shutil.move(store.root, aside)
    return Store.open(store.root)


def signed_file_cache(tmp_path: Path, *, upload: str | None = "top", **upload_options: object):
    """A store at ``tmp_path/store`` holding `make_closure`'s (dep, top), a signing key
    ``test-cache-1`` and a file:// cache at ``tmp_path/cache``; with ``upload`` ("top" or
    "dep"), that path's closure is uploaded signed (``upload_options`` go to `upload_closure`).
    Returns (store, dep, top, key, cache); the caller closes the store."""
    from cudapkgs.store.caches import open_cache
    from cudapkgs.store.caches.signing import generate

    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store)
    key = generate("test-cache-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    if upload is not None:
        cache.upload_closure(store, [{"top": top, "dep": dep}[upload]], secret_key=key, **upload_options)
    return store, dep, top, key, cache


def cli_file_cache(tmp_path: Path):
    """For tests of the `copy` command: a store at ``tmp_path/store`` holding `make_closure`'s (dep, top), the
    secret key ``lab-1`` written to ``tmp_path/k``, the environment naming the store, and the URL of a
    file:// cache at ``tmp_path/cache`` (not made). Returns (store, dep, top, key, env, url); the caller
    closes the store."""
    from cudapkgs.store.caches.signing import generate

    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store)
    key = generate("lab-1")
    (tmp_path / "k").write_text(str(key))
    return store, dep, top, key, {"CUDAPKGS_STORE": store.store_dir}, f"file://{tmp_path}/cache"
