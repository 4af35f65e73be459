"""Adding paths to the store, crash-safely: built, substituted or imported trees (part of `Store`).

Every way in ends the same: the tree is built in a locked directory under ``.tmp``, hashed
and scanned for references in one read, made read-only, renamed into place and only then
registered, with the path's lock and the gc lock (shared) held.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StoreError
from .cycles import topological_order
from . import nar
from . import reuse as reuse_pool
from .files import _freeze, _make_read_only, _remove_tree, _store_error
from .locks import PathLock, acquire_saying_so, lock_file_for
from .paths import hash_part, make_store_path_from_digest
from .unsynced import note_unsynced

if TYPE_CHECKING:
    from .db import StoreDB

__all__ = ["Registration"]


class Registration:
    """`add_path`, `add_outputs`, `add_verified_path` (a part of `cudapkgs.store.store.Store`).

    Every path these make valid, or find valid, is a temporary root of this Store when they
    return (`GarbageCollector.add_temp_roots`, written before the shared gc lock is released),
    so a concurrent gc cannot take it before the caller links it.

    Uses the other parts: `Store.parse`, `GarbageCollector._gc_shared`, `_root_the_valid`,
    `add_temp_roots` (gc.py),
    `WorkDirs._clean_tmp` and `WorkDirs._tmp_build` (workdirs.py).
    """

    db: StoreDB  # these three are set by Store.__init__
    store_dir: str
    locks_dir: Path

    # -- adding ----------------------------------------------------------

    def add_path(
        self,
        name_or_path: str,
        build: Callable[[Path], None],
        *,
        references_candidates: Iterable[str] = (),
        deriver: str | None = None,
    ) -> str:
        """Make a store path valid by running `build(out)` at most once, crash-safely.

        `name_or_path` is either a full store path (input-addressed: its hash is
        known up front, e.g. from a derivation) or a bare name, in which case
        the path is content-addressed from the NAR hash of what `build` made and
        the references found.  `build` must create `out` (a file, directory or
        symlink).  References are the `references_candidates` (and the path
        itself) whose hash parts occur in the result.
        """
        candidates = {hash_part(c): self.parse(c) for c in references_candidates}
        try:
            if "/" in name_or_path:
                return self._add_addressed(self.parse(name_or_path), build, candidates, deriver)
            return self._add_content_addressed(name_or_path, build, candidates, deriver)
        except OSError as error:
            raise _store_error(error, f"cannot add '{name_or_path}' to the store {self.store_dir}") from error
        except sqlite3.OperationalError as error:
            raise StoreError(f"cannot register '{name_or_path}' in the store {self.store_dir}: {error}") from error

    def _add_addressed(self, path: str, build: Callable[[Path], None], candidates: dict[str, str], deriver: str | None) -> str:
        if self._root_the_valid([path]):
            return path
        with self._gc_shared(), PathLock(lock_file_for(self.locks_dir, path)):
            if self._root_the_valid([path]):  # another process built it while we waited
                return path
            self._clean_tmp()
            with self._tmp_build() as tmp:
                out = tmp / "out"
                build(out)
                refs, digest, size = self._inspect(out, {**candidates, hash_part(path): path}, path)
                self.add_temp_roots([path])  # before gc can run again: until the caller roots it
                self._install(out, path, nar.format_hash(digest), size, refs, deriver)
        return path

    def add_outputs(
        self,
        paths: Sequence[str],
        build: Callable[[dict[str, Path]], None],
        *,
        references_candidates: Iterable[str] = (),
        deriver: str | None = None,
        links: Mapping[str, str] | None = None,
        names: Mapping[str, str] | None = None,
        reuse: bool = False,
    ) -> list[str]:
        """Make several paths (a derivation's outputs) valid together, crash-safely.

        `build(dirs)` gets a temporary directory per path (keyed by store path) and must
        create each one. The outputs may refer to one another, but not in a cycle: as in
        Nix, outputs that refer to each other are a build error (`cycles.ReferenceCycleError`,
        "cycle detected in the references of output 'dev' from output 'out'", with
        `names`: path -> output name). They are registered in one transaction, so either
        all of them become valid or none does. Paths that another process made valid
        meanwhile are not rebuilt.

        `links` (filled by `build`, read after it): files of the outputs that the builder
        hard-linked to files of valid store paths (file in a temporary directory -> store
        file), as Nix's store optimisation links identical files. Each is checked (`_store_links`:
        the same inode, the store file inside a valid path and already read-only with mtime 1)
        and kept as a link; any other hard-linked file gets its own copy, as always.

        `reuse`: the outputs are recorded for `cudapkgs.store.reuse` once registered (gc then
        keeps them aside instead of deleting them), and when every one of them was kept so,
        they are put back instead of running `build`, with the NAR hashes and references
        recorded when every byte was hashed: only if each kept tree is exactly as recorded
        (every entry the same inode with the same size, mode, mtime and ctime: any write
        changes the ctime) and every reference is valid. Otherwise `build` runs and
        everything is hashed and scanned as always.
        """
        wanted = [self.parse(p) for p in paths]
        candidates = {hash_part(c): self.parse(c) for c in references_candidates}
        candidates.update({hash_part(p): p for p in wanted})
        try:
            if len(self._root_the_valid(sorted(set(wanted)))) == len(set(wanted)):
                return wanted
            with self._gc_shared(), contextlib.ExitStack() as locks:
                for path in sorted(wanted):  # a fixed order: no deadlock between two builders
                    lock = acquire_saying_so(PathLock(lock_file_for(self.locks_dir, path)), path)
                    locks.callback(lock.release)
                if len(self._root_the_valid(sorted(set(wanted)))) == len(set(wanted)):
                    return wanted
                self._clean_tmp()
                with self._tmp_build() as tmp:
                    dirs = {path: tmp / f"out{i}" for i, path in enumerate(wanted)}
                    restored = self._restore_outputs(dirs, candidates) if reuse else None
                    if restored is None:
                        build(dirs)
                    entries = []
                    for path, out in dirs.items():
                        if not os.path.lexists(out):
                            raise StoreError(f"the builder of '{path}' did not create its output")
                    if restored is None:
                        # The pass that hashes and scans an output also makes it read-only (`nar.Freeze`):
                        # one listing and one open per entry, not a second walk before the move.
                        freezes = [nar.Freeze(self._store_links(links or {}, out), root_writable=True)
                                   for out in dirs.values()]
                        results = [(nar.format_hash(digest), size, {candidates[h] for h in found} | self._valid_named(named))
                                   for digest, size, found, named
                                   in _hash_and_scan_all(list(dirs.values()), candidates, self.store_dir, freezes)]
                    else:
                        results = [restored[path] for path in dirs]
                    for path, (nar_hash, size, refs) in zip(dirs, results):
                        for ref in refs:
                            if ref not in dirs and not self.db.is_valid(ref):
                                raise StoreError(f"'{path}' refers to '{ref}', which is not valid in the store {self.store_dir}")
                        entries.append((path, nar_hash, size, refs, deriver))
                    # Before anything is moved into the store: Nix's registerOutputs refuses the same.
                    topological_order({path: refs for path, _, _, refs, _ in entries}, names)
                    # An output already valid (substituted from a cache, say) stays as it is: replacing
                    # it would take away files that valid paths may refer to.
                    keep = {path for path in dirs if self.db.is_valid(path)}
                    entries = [entry for entry in entries if entry[0] not in keep]
                    # Rooted before gc can run again (it waits for our shared lock): a gc between
                    # here and the caller's ./result would otherwise delete what was just built.
                    self.add_temp_roots(dirs)
                    moved = []
                    try:
                        for path, out in dirs.items():
                            if path in keep:
                                continue
                            if os.path.lexists(path):  # left behind by a crash before registration
                                _remove_tree(path)
                            # Read-only already: by the hashing pass, or put back as the store left it and
                            # checked entry by entry (reuse.restore).
                            os.rename(out, path)
                            moved.append(path)
                            if os.path.isdir(path) and not os.path.islink(path):
                                _freeze(path)
                        self.db.register_many(entries)
                    except BaseException:
                        for path in moved:
                            _remove_tree(path)
                        raise
                    if reuse and restored is None:
                        for path, nar_hash, size, refs, _ in entries:
                            reuse_pool.remember(self.db, self.root, path, nar_hash, size, refs)
            return wanted
        except OSError as error:
            raise _store_error(error, f"cannot add {', '.join(paths)} to the store {self.store_dir}") from error
        except sqlite3.OperationalError as error:
            raise StoreError(f"cannot register outputs in the store {self.store_dir}: {error}") from error

    def _valid_named(self, named: Mapping[str, str]) -> set[str]:
        """The valid store paths among `named` ({hash part: name} an output's bytes spell out in full as
        ``<store>/<hash>-<name>``, none of them a candidate): each is a reference too.

        References are scanned from the output's final bytes for the input closure's hash parts, as
        Nix does; but nothing here confines a build to its inputs, so an output may name a valid path
        that is not one (onnxruntime's RUNPATH named cuFFT's lib output through ``appendRunpaths``, whose
        package was no input: the reference was not recorded, so gc and a closure export would drop a
        library its files load).  A name that runs on past the path's (``…-lib/lib`` is cut at ``/``
        by the scan) is tried shorter at each ``-``; one that is not valid at all is left to `verify`.
        """
        found: set[str] = set()
        for digest, name in named.items():
            parts = name.split("-")
            for end in range(len(parts), 0, -1):
                path = f"{self.store_dir}/{digest}-{'-'.join(parts[:end])}"
                if self.db.is_valid(path):
                    found.add(path)
                    break
        return found

    def _restore_outputs(self, dirs: Mapping[str, Path],
                         candidates: Mapping[str, str]) -> dict[str, tuple[str, int, set[str]]] | None:
        """Every output of `dirs` put back by `reuse.restore` (path -> its result), or None, nothing left."""
        if not reuse_pool.is_reusable(self.db, dirs):
            return None
        allowed = {ref: ref in dirs or self.db.is_valid(ref) for ref in candidates.values()}
        restored: dict[str, tuple[str, int, set[str]]] = {}
        for path, out in dirs.items():
            got = reuse_pool.restore(self.db, self.root, path, out, allowed)
            if got is None:
                for done in restored:
                    _remove_tree(dirs[done])
                return None
            restored[path] = got
        return restored

    def _store_links(self, links: Mapping[str, str], root: str | os.PathLike[str]) -> frozenset[str]:
        """The files of `links` below `root` that are hard links to read-only files of valid store paths.

        A file qualifies when it and its store file are the same inode (device and number),
        the store file's path has no symlink in it, lies in a path valid in this store, and the
        inode is already as the store leaves files (mode 0444 or 0555, mtime 1): then keeping the
        link changes nothing outside, and nothing can change it that cannot change the store.
        """
        inside = self.store_dir.rstrip("/") + "/"
        base = os.path.abspath(root) + "/"
        keep = set()
        for new, target in links.items():
            if not new.startswith(base) or not target.startswith(inside):
                continue
            try:
                mine, theirs = os.lstat(new), os.lstat(target)
            except OSError:
                continue
            if (not stat.S_ISREG(mine.st_mode) or (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino)
                    or stat.S_IMODE(mine.st_mode) not in (0o444, 0o555) or mine.st_mtime != 1):
                continue
            if os.path.realpath(target) != os.path.normpath(target):
                continue
            top = inside + target[len(inside):].split("/", 1)[0]
            if self.db.is_valid(top):
                keep.add(os.path.join(os.fspath(root), new[len(base):]))  # as _make_read_only names it
        return frozenset(keep)

    def add_verified_path(
        self,
        path: str,
        fill: Callable[[Path], None],
        *,
        nar_hash: str,
        nar_size: int,
        references: Iterable[str],
        deriver: str | None = None,
        before_register: Callable[[], None] | None = None,
        source: str | None = None,
        expected: Iterable[str] = (),
        scans: bool = False,
        trust_references: bool = False,
    ) -> bool:
        """Make `path` valid from `fill(out)`, whose NAR the caller checks against `nar_hash` while filling.

        For substitution: `fill` unpacks a NAR into `out` and raises unless what it
        read hashes to `nar_hash`/`nar_size`, so the tree is not hashed a second time.
        `references` (store paths) must all be valid already (or be `path`). The path
        is registered only after `fill` returns; any error leaves the store unchanged.
        Returns False if `path` was already valid (then `fill` is not called).
        With `before_register` (e.g. waiting until the references are registered by
        other threads), the references are checked after it returns instead of
        before `fill`, so unpacking need not wait for them.

        `references` are what someone else said (a narinfo's signer): the unpacked files
        are scanned as an import scans them (`_check_declared_references`), and a path
        whose files mention a store path the list leaves out is refused with StoreError
        naming `source` (e.g. the cache's URL): registered, it would make a closure that
        lacks a dependency, which gc then deletes and `verify` could not tell.

        With `scans`, `fill(out, scanner)` is called instead, and the scanner (a
        `nar.ReferenceScanner`) is that scan while the NAR streams: `fill` hands it every file's
        bytes and link target (`nar_restore.restore(..., scanner=scanner)` does, and calls
        `scanner.done()` at the NAR's end); a tree not scanned so is read again. It looks for
        the valid paths when `fill` starts, the declared references and `expected` (paths that
        may become valid meanwhile: the rest of a closure being substituted); a path that
        became valid meanwhile and is none of these is looked for in a second read.

        With `trust_references` the files are not scanned at all and `references` are
        registered as given (`fill(out)` is called): for references a trusted key signed, as Nix
        registers a substitute's signed References without scanning (NixOS/nix
        src/libstore/build/substitution-goal.cc@002bb435 hands the narinfo's `ValidPathInfo` to
        `copyStorePath`, whose `LocalStore::addToStore` checks only NarHash and NarSize while
        restoring). Every reference must still be valid before the registration.

        The files are not fsynced: before the registration, `path` is noted (durably) as
        unsynced for this boot, and a store opened after a crash hashes such paths again and
        discards those that fail (`unsynced.py` states the contract).
        """
        path = self.parse(path)
        refs = {self.parse(r) for r in references}

        def check_references() -> None:
            absent = [r for r in sorted(refs) if r != path and not self.db.is_valid(r)]
            if absent:
                raise StoreError(f"'{path}' refers to '{absent[0]}', which is not valid in the store {self.store_dir}")

        try:
            if self._root_the_valid([path]):
                return False
            if before_register is None:
                check_references()
            with self._gc_shared(), PathLock(lock_file_for(self.locks_dir, path)):
                if self._root_the_valid([path]):
                    return False
                self._clean_tmp()
                with self._tmp_build() as tmp:
                    out = tmp / "out"
                    scanned = None
                    if trust_references:
                        fill(out)
                    elif scans:
                        hashes = self._scan_candidates(set(self.db.all_paths()) | refs | {self.parse(e) for e in expected}, path)
                        scanned = (nar.ReferenceScanner(nar.Candidates(hashes), self.store_dir), hashes)
                        fill(out, scanned[0])
                    else:
                        fill(out)
                    if not os.path.lexists(out):
                        raise StoreError(f"nothing was unpacked for '{path}'")
                    if before_register is not None:
                        before_register()
                        check_references()
                    if not trust_references:
                        self._check_declared_references(out, path, refs, source, scanned)
                    self.add_temp_roots([path])  # until the caller roots it (see gc.py)
                    note_unsynced(self.root / ".meta", [path])  # durable before the registration can be (unsynced.py)
                    self._move_in_and_register(out, path, nar_hash, nar_size, refs, deriver)
            return True
        except OSError as error:
            raise _store_error(error, f"cannot add '{path}' to the store {self.store_dir}") from error
        except sqlite3.OperationalError as error:
            raise StoreError(f"cannot register '{path}' in the store {self.store_dir}: {error}") from error

    def _scan_candidates(self, paths: Iterable[str], path: str) -> dict[str, str]:
        hashes = {hash_part(p): p for p in paths}
        hashes[hash_part(path)] = path
        return hashes

    def _check_declared_references(self, out: Path, path: str, declared: set[str], source: str | None,
                                   scanned: tuple[nar.ReferenceScanner, dict[str, str]] | None = None) -> None:
        """StoreError unless every store path the tree `out` mentions is among `declared` (or is `path`).

        Mentions are found as an import finds them: the hash part of every valid path and
        of every declared reference, anywhere in file contents or symlink targets, and any
        path of this store spelt out in full (``<store>/<hash>-<name>``), valid or not: a
        dependency the list omits is refused whether this store has it or not. A declared
        reference the files do not mention is kept (more references only keep more alive;
        Nix also scans the NAR's file names, which this scan does not).

        With `scanned` (the scanner `fill` fed while unpacking, and the candidates it looked for),
        the tree is not read again unless a path became valid that it did not look for; of what
        it found, the paths neither valid now nor declared are not mentions (as a scan now would
        not have looked for them).
        """
        valid = set(self.db.all_paths())
        allowed = valid | declared | {path}
        if scanned is not None and scanned[0].finished:
            scanner, hashes = scanned
            found, named = scanner.results()
            found = {h for h in found if hashes[h] in allowed}
            late = {hash_part(p): p for p in valid - set(hashes.values())}
            if late:  # registered meanwhile by someone else: only these are looked for again
                found |= nar.scan_for_hashes(out, late)
                hashes = {**hashes, **late}
        else:
            hashes = self._scan_candidates(valid | declared, path)
            found, named = nar.scan_named(out, nar.Candidates(hashes), self.store_dir)
        mentioned = {hashes[h] for h in found}
        mentioned.update(hashes.get(h) or f"{self.store_dir}/{h}-{name}" for h, name in named.items())
        undeclared = sorted(mentioned - declared - {path})
        if undeclared:
            more = f" (and {len(undeclared) - 1} more)" if len(undeclared) > 1 else ""
            raise StoreError(
                f"'{path}'{f' from {source}' if source else ''}: its files mention '{undeclared[0]}'{more}, which "
                "its declared references leave out; not added (its closure would lack what it uses)"
            )

    def _add_content_addressed(self, name: str, build: Callable[[Path], None], candidates: dict[str, str], deriver: str | None) -> str:
        with self._gc_shared():
            self._clean_tmp()
            with self._tmp_build() as tmp:
                out = tmp / "out"
                build(out)
                refs, digest, size = self._inspect(out, candidates, name)
                kind = "source" + "".join(":" + r for r in sorted(refs))
                path = make_store_path_from_digest(self.store_dir, kind, digest.hex(), name)
                with PathLock(lock_file_for(self.locks_dir, path)):
                    self.add_temp_roots([path])  # valid already or about to be: until the caller roots it
                    if not self.db.is_valid(path):
                        self._install(out, path, nar.format_hash(digest), size, refs, deriver)
        return path

    def _inspect(self, out: Path, candidates: dict[str, str], what: str) -> tuple[set[str], bytes, int]:
        if not os.path.lexists(out):
            raise StoreError(f"the builder of '{what}' did not create its output {out}")
        digest, size, found = nar.hash_and_scan(out, candidates)  # one read of each file
        refs = {candidates[h] for h in found}
        for ref in refs:
            if ref != what and not self.db.is_valid(ref):
                raise StoreError(f"'{what}' refers to '{ref}', which is not valid in the store {self.store_dir}")
        return refs, digest, size

    def _install(self, out: Path, path: str, nar_hash: str, size: int, refs: set[str], deriver: str | None) -> None:
        # Called with the path's lock held and the path not valid.
        _make_read_only(out, keep_root_writable=True)
        self._move_in_and_register(out, path, nar_hash, size, refs, deriver)

    def _move_in_and_register(self, out: Path, path: str, nar_hash: str, size: int, refs: Iterable[str],
                              deriver: str | None) -> None:
        """Rename a finished tree `out` to `path` and register it; nothing is left at `path` if that fails.

        Called with the path's lock held and the path not valid.
        """
        if os.path.lexists(path):  # left behind by a crash between rename and registration
            _remove_tree(path)
        os.rename(out, path)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                _freeze(path)
            self.db.register(path, nar_hash, size, refs, deriver)
        except BaseException:
            _remove_tree(path)
            raise


def _hash_and_scan_all(outs: list[Path], candidates: dict[str, str], store_dir: str,
                       freezes: Sequence[nar.Freeze | None] | None = None) -> list[tuple[bytes, int, set[str], dict[str, str]]]:
    """`nar.hash_and_scan_named` of each output (with `freezes[i]` for ``outs[i]``: made read-only in the
    same pass), the outputs side by side on two threads.

    Hashing and reading release the GIL, so a derivation's outputs (bin, lib, dev, …)
    are read and hashed in parallel; each result is the same as a sequential pass.
    """
    jobs = list(zip(outs, freezes if freezes is not None else [None] * len(outs)))
    if len(jobs) < 2 or (os.cpu_count() or 1) < 2:
        return [nar.hash_and_scan_named(out, candidates, store_dir, freeze) for out, freeze in jobs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="cudapkgs-nar") as pool:
        return list(pool.map(lambda job: nar.hash_and_scan_named(job[0], candidates, store_dir, job[1]), jobs))
