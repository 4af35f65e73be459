"""Realise derivations: build what is not valid yet, dependencies first.

This is the sequential core; see `scheduler` for parallel builds with progress.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..atomic_files import open_kept
from ..derivation import Derivation
from ..errors import CudapkgsError
from .context import BUILDERS, BuildContext, builder_for
from .errors import BuildError


def protect_inputs(store, derivations: Iterable[Derivation]) -> list[str]:
    """Temporary roots for every valid output and input path of the closures of `derivations`.

    Called before planning and before the first fetch: a concurrent `cudapkgs gc` must
    not delete a valid-but-unrooted input between the moment the plan counts on it and
    the moment a build uses it.  The roots last until the store is closed (the outputs
    are linked by then).  Returns the paths rooted.
    """
    return store.protect(_closure_paths(_closure(derivations), inputs=True))


def _closure(derivations: Iterable[Derivation]) -> list[Derivation]:
    order: list[Derivation] = []
    seen: set[str] = set()
    for root in derivations:
        for drv in root.closure():
            if drv.drv_path not in seen:
                seen.add(drv.drv_path)
                order.append(drv)
    return order


def _closure_paths(order: list[Derivation], *, inputs: bool) -> list[str]:
    paths = [p for drv in order for p in drv.outputs.values()]
    if inputs:
        paths += [p for drv in order for p in drv.data["inputs"].values() if isinstance(p, str)]
    return paths


def missing(store, derivations: Iterable[Derivation], *, protect: bool = False,
            check_fixed: bool = True) -> list[Derivation]:
    """The derivations that realising `derivations` must build, in build order.

    As Nix does, top-down: a root with an invalid output, and the input derivations of a
    derivation to build that have an invalid output. A derivation whose outputs are all
    valid needs none of its inputs (after `cudapkgs gc`, nvcc's libnvvm or saxpy's nvcc are
    not rebuilt). Returns a list of `Derivation`, dependencies first.

    With `protect`, every valid output and input path of the closures becomes a temporary
    root first (`protect_inputs`), in the same single database query. Raises
    `FixedOutputMismatchError` when a valid fetcher output that a derivation to build takes
    as input does not have the hash that names it (`_check_fixed_inputs`); with
    ``check_fixed=False`` the caller checks what it finally builds (the scheduler, after
    choosing what is substituted instead: a substituted package needs none of its inputs).
    """
    roots = list(derivations)
    order = _closure(roots)
    if protect:
        valid = set(store.protect(_closure_paths(order, inputs=True)))
        invalid = {p for p in _closure_paths(order, inputs=False) if p not in valid}
    else:
        invalid = set(store.db.invalid_paths(_closure_paths(order, inputs=False)))
    producer = {p: drv.drv_path for drv in order for p in drv.outputs.values()}
    needed = {drv.drv_path for drv in roots if any(p in invalid for p in drv.outputs.values())}
    for drv in reversed(order):  # dependents before their dependencies
        if drv.drv_path not in needed:
            continue
        needed.update(dep.drv_path for dep in drv.deps if any(p in invalid for p in dep.outputs.values()))
        needed.update(producer[p] for p in drv.data["inputs"].values()
                      if isinstance(p, str) and p in invalid and p in producer)
    chosen = [drv for drv in order if drv.drv_path in needed]
    if check_fixed:
        _check_fixed_inputs(store, chosen, invalid)
    return chosen


class FixedOutputMismatchError(BuildError):
    """A fixed-output path is valid in the store but its contents do not have the hash that names it."""


def _check_fixed_inputs(store, to_build: Sequence[Derivation], invalid: set[str] | None = None) -> None:
    """Raise `FixedOutputMismatchError` unless every valid fixed-output input of `to_build` has its hash.

    A fetcher's output path is named by the hash of its contents, so a build that finds it
    valid takes it as checked. An imported or substituted path is checked against its NAR
    hash, not against the name: an archive could hold other contents at a fetchurl's path
    (the export format carries no content address). So before anything is built from it, a
    recursive sha256 output is compared with its recorded NAR hash (what import checked),
    and a flat one (fetchurl, fetchPypi) is hashed: once per input and realisation, only for
    inputs of what is being built (top-down planning leaves out the rest). `invalid`: the
    paths known not to be valid (None: the store is asked).
    """
    from ..fetch.fixed_output import hash_of
    from ..store import nar

    if invalid is None:
        invalid = set(store.db.invalid_paths(
            [p for drv in to_build for dep in drv.deps if dep.is_fixed_output for p in dep.outputs.values()]))

    checked: set[str] = set()
    for drv in to_build:
        for dep in drv.deps:
            path = dep.outputs.get("out")
            if not dep.is_fixed_output or path is None or path in invalid or path in checked:
                continue
            checked.add(path)
            spec = dep.data["outputHash"]
            if spec["mode"] == "recursive" and spec["algo"] == "sha256":
                ok = store.query(path).nar_hash == nar.format_hash(bytes.fromhex(spec["hash"]))
            elif spec["mode"] == "flat":
                ok = _flat_digest(path, spec["algo"]) == spec["hash"]
            else:
                try:
                    ok = hash_of(Path(path), spec["mode"], spec["algo"]).digest.hex() == spec["hash"]
                except (OSError, ValueError):  # vanished, or a FIFO/device inside the tree
                    ok = False
            if not ok:
                raise FixedOutputMismatchError(
                    f"{path} is valid in the store but its contents do not have the {spec['algo']} hash that "
                    f"names it ({spec['mode']}): it was imported or substituted with other contents, or "
                    f"changed; {drv.name} is not built from it (remove what brought it, then `cudapkgs gc`)")


def _flat_digest(path: str, algo: str) -> str | None:
    """The hex `algo` digest of the regular file `path`, or None if it is anything else.

    A flat fixed output is a regular file (Nix refuses anything else: NixOS/nix
    src/libstore/build/local-derivation-goal.cc, registerOutputs, "should be a
    non-executable regular file"). An imported path may be a symlink to anywhere
    (5c39fe5): it is not followed (a link to /dev/zero or a FIFO hung the check, one to
    a host file with the right bytes passed it and could change after), and nothing
    that is not a regular file is read.
    """
    import hashlib
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # a symlink (ELOOP), vanished, unreadable
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.new(algo)
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def log_path(store, drv: Derivation) -> Path:
    """Where the build log of `drv` is kept: <store>/.logs/<drv hash part>-<name>.log."""
    return drv_log_path(store.store_dir, drv)


def drv_log_path(store_dir: str, drv: Derivation) -> Path:
    """`log_path` from the store directory alone."""
    return Path(store_dir) / ".logs" / (Path(drv.drv_path).name.removesuffix(".drv") + ".log")


def fetchers_for(drv: Derivation, fetchers: Sequence[str] | None = None, skip: Iterable[str] = ()) -> tuple[str, ...]:
    """The fetchers a build of `drv` tries: `fetchers`, else the derivation's own, else redist then wheels;
    less those in `skip` (a plan's fetchers whose host did not answer, `scheduler.Plan.skipped`)."""
    skip = frozenset(skip)
    return tuple(f for f in (fetchers or drv.context.get("fetchers") or ("redist", "wheels")) if f not in skip)


def build_one(store, drv: Derivation, *, keep_failed: bool = False, fetchers: Sequence[str] | None = None,
              on_download=None, on_step=None, prepared=None) -> list[str]:
    """Build one derivation whose inputs are valid, and register its outputs.

    `prepared`: None, or a callable taking the derivation and returning its source already
    fetched and unpacked (`cudapkgs.realise.unpack_ahead.UnpackAhead.take`) or None; the
    builder then starts from that tree instead of fetching and unpacking itself.
    """
    from ..host.features import host_system_features, missing_features

    lacking = missing_features(drv)
    if lacking:
        offered = " ".join(sorted(host_system_features())) or "none"
        raise BuildError(
            f"{drv.name} needs the system features {' '.join(lacking)}, which this machine does not offer "
            f"(it offers: {offered}; a GPU gives cuda and cuda-sm-*, or declare them in CUDAPKGS_SYSTEM_FEATURES)"
        )
    inside = store.store_dir.rstrip("/") + "/"
    absent = store.db.invalid_paths(p for p in drv.data["inputs"].values() if p.startswith(inside))
    if absent:
        raise BuildError(
            f"{drv.name} cannot be built: its input {absent[0]} is not valid in the store {store.store_dir}"
            + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else "")
            + "; build it first, or `cudapkgs import` the closure that holds it"
        )
    if drv.builder not in BUILDERS:
        builder_for(drv)  # raises: unknown builder, before anything is made
    log_file = log_path(store, drv)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    # References are found by scanning for the input closure's paths: those of the input
    # derivations in this process, or (a derivation read from JSON has none) of its inputs.
    candidates = sorted(
        {p for dep in drv.deps for p in store.closure(dep.outputs.values())}
        | store.closure(p for p in drv.data["inputs"].values() if p.startswith(inside))
    )
    names = {path: name for name, path in drv.outputs.items()}
    # The work directory lives in the store's temporary area, locked: if this process is
    # killed, the next build or gc removes it (and the phases' processes die with us).
    with store.work_dir(drv.name) as work, io.TextIOWrapper(open_kept(log_file, append=False)) as log:
        ctx = BuildContext(
            store=store, work_dir=work, log=log,
            fetchers=fetchers_for(drv, fetchers),
            on_download=on_download, on_step=on_step,
        )
        if prepared is not None:
            ctx.extra["prepared"] = prepared
        links: dict[str, str] = ctx.extra.setdefault("store_links", {})  # hard links into the store a builder made

        def run(dirs: dict[str, Path]) -> None:
            # Imported only now: outputs put back from the store's reuse pool need no builder.
            builder_for(drv)(drv, ctx, {names[path]: directory for path, directory in dirs.items()})

        try:
            # A redist build's outputs (unpacked releases, fixed up) are kept to be put back after a gc.
            paths = store.add_outputs(list(drv.outputs.values()), run, references_candidates=candidates,
                                      deriver=drv.drv_path, links=links, names=names,
                                      reuse=drv.builder == "buildRedist")
            store.add_temp_roots(paths)  # until the caller links them (or exits)
        except CudapkgsError as error:
            kept = f"; build directory kept at {_keep(work, drv)}" if keep_failed else ""
            raise BuildError(f"building {drv.name} failed: {error} (log: {log_file}{kept})") from error
        except BaseException:
            if keep_failed:
                _keep(work, drv)
            raise
    return paths


def _keep(work: Path, drv: Derivation) -> Path:
    """Move a failed build's work directory out of the store's temporary area (--keep-failed)."""
    kept = Path(tempfile.mkdtemp(prefix=f"cudapkgs-build-{drv.name}-"))
    for entry in os.listdir(work):
        shutil.move(os.fspath(work / entry), os.fspath(kept / entry))
    return kept


def realise(store, derivations: Iterable[Derivation], **options) -> list[str]:
    """Build every missing derivation of the closures, in dependency order; returns output paths."""
    roots = list(derivations)
    for drv in missing(store, roots, protect=True):
        build_one(store, drv, **options)
    return [p for drv in roots for p in drv.outputs.values()]
