"""Checking the store against its database, and explaining why one path depends on another (part of `Store`)."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from ..errors import StoreError
from . import nar
from .paths import hash_part
from .refscan import Scan

if TYPE_CHECKING:
    from .db import StoreDB
    from .graph import StoreGraph

__all__ = ["Hop", "Problem", "Verification", "describe_changes"]

#: How many entries of a modified path `describe_changes` looks at, and how many it names.
_CHANGES_SCANNED = 200_000
_CHANGES_NAMED = 3


def describe_changes(path: str) -> str:
    """What changed in the store path `path` since it was registered, as a clause for verify's message
    ("" when nothing can be told).

    The store sets every file's and directory's mtime to 1 (`store.files`, as Nix does), so an entry
    with another mtime was written, or added, since.  Names at most `_CHANGES_NAMED` of them (paths
    relative to `path`) and counts the rest; walks at most `_CHANGES_SCANNED` entries without
    following links (a link's own mtime is not set by the store, so links are not counted).  When every
    such entry is byte code (a ``__pycache__`` directory or a ``.pyc`` in one: Python importing a module
    that had none, as root, which the store's read-only modes do not stop), says that removing them
    (and a ``__pycache__`` directory left empty) restores the path: a NAR records no mtime.  Errors reading the tree are ignored (the message is only the clause shorter).
    """
    changed: list[str] = []
    scanned = 0
    todo = [path]
    while todo and scanned < _CHANGES_SCANNED:
        directory = todo.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            scanned += 1
            try:
                if entry.is_symlink():
                    continue
                st = entry.stat(follow_symlinks=False)
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if st.st_mtime != 1:
                changed.append(os.path.relpath(entry.path, path) + ("/" if is_dir else ""))
            if is_dir:
                todo.append(entry.path)
    if not changed:
        return ""
    changed.sort()
    named = ", ".join(changed[:_CHANGES_NAMED]) + (f" and {len(changed) - _CHANGES_NAMED} more" if len(changed) > _CHANGES_NAMED else "")
    clause = f"; {len(changed)} entr{'y' if len(changed) == 1 else 'ies'} written since it was registered (mtime not 1): {named}"
    files = [c for c in changed if not c.endswith("/")]
    # a directory's mtime changes when an entry is added to it: a changed directory is byte code's when it is a
    # __pycache__ or holds a changed __pycache__
    caches = {c for c in changed if c.endswith("__pycache__/")}
    if files and all(c.endswith(".pyc") and "__pycache__/" in c for c in files) \
            and all(c in caches or f"{c}__pycache__/" in caches for c in changed if c.endswith("/")):
        clause += ("; all byte code Python wrote when importing a module that had none: delete the "
                   ".pyc files whose mtime is not 1, then each __pycache__ directory left empty, and the path verifies again; interpreters "
                   "cudapkgs sets up no longer write there (docs/security.md)")
    else:
        clause += "; delete the path (remove what roots it, then `cudapkgs gc`) and build it again"
    return clause


class Problem(NamedTuple):
    """One inconsistency `Store.verify` found; kind is missing, hash-mismatch, invalid-reference or missing-reference."""

    path: str
    kind: str
    message: str


class Hop(NamedTuple):
    """One step of a why-depends chain: `referrer` refers to `reference` from `files` (relative; '' is the path itself)."""

    referrer: str
    reference: str
    files: tuple[str, ...]


class Verification:
    """`verify` and `why_depends` (a part of `cudapkgs.store.store.Store`).

    Uses the other parts: `Store.parse`, `Store.query`, `Store.graph`.
    """

    db: StoreDB  # these two are set by Store.__init__
    store_dir: str

    # -- verification and explanation -------------------------------------

    def verify(self, check_contents: bool = True, paths: Iterable[str] | None = None,
               progress: Callable[[int, int, int, int], None] | None = None) -> list[Problem]:
        """Check valid paths: each exists, refers only to valid paths and (with `check_contents`) matches its
        NAR hash and records every path its files mention (kind ``missing-reference``): every valid path
        whose hash part they hold, and every path of this store they spell out in full
        (``<store>/<hash>-<name>``) that is not valid at all (a dependency never fetched).

        `paths`: only these (store paths, files inside them or links to them, as `query` takes);
        default every valid path. Raises `StoreError` for a path that is not valid. The database
        is read once, and the valid paths' hash parts are encoded once for every path scanned, so
        the time grows linearly with the paths (and bytes) checked.

        `progress(paths_done, paths_total, bytes_done, bytes_total)` is called before each path
        and once at the end; bytes are the registered NAR sizes (what hashing reads).
        """
        problems: list[Problem] = []
        graph = self.graph()  # one pass over the database, not two queries per path
        rows, refs_of = graph.rows, graph.refs
        todo = sorted(rows) if paths is None else sorted({self._valid_path_of(p, graph) for p in paths})
        bytes_total = sum(rows[p][1] for p in todo)
        bytes_done = 0
        store_prefix = self.store_dir + "/"
        # Each valid path's hash part, encoded once (bytes: what the scan finds) for every path scanned.
        by_hash = {os.fsencode(hash_part(p)): p for p in rows} if check_contents else {}
        scan = Scan(nar.Candidates(h.decode() for h in by_hash), self.store_dir) if check_contents else None
        tree = nar.TreePass(scan)
        lstat = os.lstat
        for done, path in enumerate(todo):
            if progress is not None:
                progress(done, len(todo), bytes_done, bytes_total)
            nar_hash, nar_size = rows[path][0], rows[path][1]
            references = refs_of.get(path, ())
            bytes_done += nar_size
            try:
                st = lstat(path)
            except OSError:  # as os.path.lexists sees it
                problems.append(Problem(path, "missing", f"path '{path}' is registered but missing on disk"))
                continue
            if scan is not None:
                scan.reset()
                try:
                    # One read: the NAR hash, every valid path the contents mention, and every path of
                    # this store they spell out in full that is not valid.
                    digest, _size = tree.run(os.fsencode(path), st)
                except (OSError, ValueError) as error:
                    problems.append(Problem(path, "hash-mismatch", f"path '{path}' cannot be read: {error}"))
                else:
                    if not nar.hash_matches(nar_hash, digest):
                        problems.append(Problem(path, "hash-mismatch", f"path '{path}' was modified: expected hash {nar_hash}, got {nar.format_hash(digest)}"
                                                                       f"{describe_changes(path)}"))
                    else:
                        # A recorded reference list that misses a path the contents mention would let gc
                        # delete a dependency (e.g. an import that trusted its archive's list).
                        mentioned = {by_hash[h] for h in scan.found}
                        if not mentioned.issubset(references):
                            for ref in sorted(mentioned.difference(references)):
                                problems.append(Problem(path, "missing-reference", f"path '{path}' mentions '{ref}', which is not among its recorded references"))
                        # A path not in the store at all: what a signer's wrong References let in (the
                        # dependency was never fetched), or a gc took since. No candidate list names it;
                        # the scan names only those whose hash is no valid path's.
                        recorded = {os.fsencode(hash_part(r)) for r in references} if scan.named else set()
                        for h, name in sorted(scan.named.items()):
                            if h not in recorded:  # a recorded one is an invalid-reference
                                ref = f"{store_prefix}{h.decode()}-{name.decode()}"
                                problems.append(Problem(path, "missing-reference", f"path '{path}' mentions '{ref}', which is not valid in the store and not among its recorded references"))
            for ref in references:
                if ref not in rows:
                    problems.append(Problem(path, "invalid-reference", f"path '{path}' refers to '{ref}', which is not valid"))
        if progress is not None:
            progress(len(todo), len(todo), bytes_done, bytes_total)
        return problems

    def _valid_path_of(self, given: str, graph: StoreGraph) -> str:
        """The valid store path `given` names (a store path, a file inside one, a link to one); StoreError if none."""
        path = self.parse(given)
        if not graph.is_valid(path):
            raise StoreError(f"path '{path}' is not valid in the store {self.store_dir}")
        return path

    def why_depends(self, a: str, b: str) -> list[list[Hop]]:
        """Chains of references from `a` to `b`: one shortest chain through each direct reference of `a` that leads to `b`.

        Each hop names the files of its referrer that hold the reference's hash.
        Empty when `a` does not depend on `b`.
        """
        a, b = self.query(a).path, self.query(b).path
        reaches_b = {b}  # paths with b in their closure
        todo = deque([b])
        while todo:
            for referrer in self.db.referrers(todo.popleft()):
                if referrer not in reaches_b:
                    reaches_b.add(referrer)
                    todo.append(referrer)
        if a not in reaches_b or a == b:
            return []
        chains = []
        for first in self.db.references(a):
            if first not in reaches_b or first == a:
                continue
            nodes = [a] + self._shortest(first, b, reaches_b)
            chains.append([Hop(x, y, self._files_referring(x, y)) for x, y in zip(nodes, nodes[1:])])
        return chains

    def _shortest(self, start: str, goal: str, allowed: set[str]) -> list[str]:
        parent: dict[str, str | None] = {start: None}
        todo = deque([start])
        while todo:
            node = todo.popleft()
            if node == goal:
                break
            for ref in self.db.references(node):
                if ref in allowed and ref not in parent:
                    parent[ref] = node
                    todo.append(ref)
        chain = [goal]
        while (prev := parent[chain[-1]]) is not None:
            chain.append(prev)
        return chain[::-1]

    def _files_referring(self, referrer: str, reference: str) -> tuple[str, ...]:
        files: list[str] = []
        nar.scan_for_hashes(referrer, [hash_part(reference)], on_found=lambda _h, rel: files.append(rel))
        return tuple(sorted(files))
