"""The buildRedist builder: fetch, unpack, split and fix up one NVIDIA redistributable.

Phases, as `ctx.step` names them (Nixpkgs' phases, spec §7.2, §7.3):

``fetch``        the release from the configured sources into ``<store>/.cache/downloads/<sha256>/``
``unpack``       the archive (tar.xz/.gz/.bz2/.zst, streamed, member paths checked) or the wheel tree
``postUnpack``   ``lib/<cudaMajor>`` lifted to ``lib``; ``pkg-config`` moved to ``share/pkgconfig``
``prePatch``     ``.pc`` files pointed at the outputs
``install``      the tree split into the derivation's outputs
``nvcc``         cuda_nvcc only: see `cudapkgs.realise.nvcc`
``installCheck`` no ``/usr/`` in text files unless allowed; no empty outputs (before fixup,
                 which adds only store paths and the driver dir, itself under /usr/ on most hosts)
``fixup``        auto-patchelf, driver and cuda_compat run paths, stubs out of run paths,
                 markForCudatoolkitRoot, ``nix-support/propagated-build-inputs``

The outputs are built in temporary directories and installed at the
derivation's output paths afterwards, so every path written into them (run
paths, ``.pc`` files, nvcc.profile) is the final one.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import confine, hooks
from ..build_inputs import read_support_file, same_store_paths
from ..derivation import Derivation
from ..errors import CudapkgsError, FetchError
from ..fetch import FetchedArtifact, MirrorSource, RedistSource, Source, WheelSource, fetch_artifact
from ..fetch.cache import download_entry, in_use
from ..fetch.wheels import WheelChangedError, check_unpacked, unpack_wheel
from ..manifests import Artifact
from ..store.locks import PathLock, acquire_saying_so
from ..table import format_size
from ..host import compiler as host_compiler
from . import nvcc
from .context import BuildContext
from ..fetch.archives import EXPANSION_RATIO, UnpackError, expansion_limits, unpack

__all__ = ["Prepared", "RedistBuildError", "UnpackError", "build", "dependency_paths", "download_dir", "prepare",
           "sources", "unpack"]

# autoPatchelfIgnoreMissingDeps of single components (fnmatch patterns).
IGNORE_MISSING: Mapping[str, tuple[str, ...]] = {
    "cuda_compat": ("libnvdla_runtime.so", "libnvrm_gpu.so", "libnvrm_mem.so", "libcrypto.so.1.1", "libcrypto.so.3"),
}
_CHUNK = 1 << 20


class RedistBuildError(CudapkgsError):
    """A redist derivation cannot be built as given."""


# --- fetch ------------------------------------------------------------------


def sources(fetchers: Iterable[str]) -> list[Source]:
    """The sources named by config `fetchers`: "redist", "mirror:<dir or URL>", "wheels"."""
    found: list[Source] = []
    for fetcher in fetchers:
        kind, _, where = fetcher.partition(":")
        if fetcher == "redist":
            found.append(RedistSource())
        elif kind == "mirror" and where:
            found.append(MirrorSource(where))
        elif fetcher == "wheels":
            found.append(WheelSource())
        else:
            raise RedistBuildError(f'unknown fetcher "{fetcher}" (use "redist", "mirror:<dir or URL>" or "wheels")')
    return found


def download_dir(store_dir: str | os.PathLike[str], sha256: str) -> Path:
    """The per-store download cache entry of a file: ``<store>/.cache/downloads/<sha256>``.

    Raises `RedistBuildError` unless `sha256` is 64 hex digits (it names a directory).
    """
    if not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise RedistBuildError(f"{sha256!r} is not a sha256 (64 hex digits)")
    return Path(store_dir) / ".cache" / "downloads" / sha256.lower()


def _fetch_and_unpack(drv: Derivation, ctx: BuildContext, stage: Path) -> tuple[FetchedArtifact, Path]:
    """Fetch and unpack the release into ``stage/o``, one configured source after another.

    A source whose artifact cannot be fetched, or fetches but cannot be unpacked (a
    damaged or hostile tarball or wheel: bad zip, unknown compression, encrypted
    member, bad RECORD, a link escaping or looping), is reported in the log, its cache
    entry is deleted, and the next source is tried.  Raises `RedistBuildError` giving
    every source's reason when none works.
    """
    attrs = drv.attrs
    tree = stage / "o"
    reasons: list[str] = []
    for source in sources(ctx.fetchers):
        ctx.step("fetch")
        try:
            fetched = _fetch(drv, ctx, [source])
        except FetchError as error:
            # "<source>: <why>", not the one-source "cannot fetch … from any source: …" nested in ours
            reasons.extend(error.reasons or [str(error)])
            continue
        ctx.step("unpack")
        try:
            if fetched.kind == "wheel":
                with in_use(fetched.path) as alive:
                    if not alive:  # collected between the fetch and now: fetch it again
                        fetched = _fetch(drv, ctx, [source])
                    _check_wheel_expansion(fetched.path, _declared_size(drv))
                    # Straight into the build directory: no unpacked copy is kept in any cache.
                    try:
                        unpack_wheel(fetched.path, tree, pname=attrs["pname"], cuda_major=_cuda_major(attrs),
                                     sha256=fetched.sha256_to_check)
                    except WheelChangedError as error:
                        # The cached wheel changed since pip checked it: pip fetches and checks it anew.
                        ctx.log.write(f"{error}; fetching it again\n")
                        _discard(fetched)
                        fetched = _fetch(drv, ctx, [source])
                        if fetched.sha256_to_check is not None:  # pragma: no cover - the cache entry was discarded
                            raise
                        _check_wheel_expansion(fetched.path, _declared_size(drv))
                        unpack_wheel(fetched.path, tree, pname=attrs["pname"], cuda_major=_cuda_major(attrs))
                check_unpacked(tree, attrs["pname"], fetched.path.name)
                confine.check_tree_links(tree)
            elif fetched.kind == "tarball":
                root = unpack(fetched.path, stage / "src", declared_size=_declared_size(drv))
                root.rename(tree)
                _touch(fetched.path)
            else:
                shutil.copytree(fetched.path, tree, symlinks=True)
                confine.check_tree_links(tree)
            return fetched, tree
        except (FetchError, UnpackError, confine.TreeEscapeError) as error:
            reasons.append(f"{source.name}: {fetched.path.name}: {error}")
            ctx.log.write(f"cannot unpack {fetched.path} from {fetched.source_name}: {error}; discarding it\n")
            _discard(fetched)
            for leftover in (stage / "src", tree):
                if os.path.lexists(leftover):
                    _remove(leftover)
    src = drv.data["src"]
    raise RedistBuildError(
        f"cannot fetch and unpack {attrs['pname']} {attrs['version']} ({src['relativePath']}) from any source: "
        + "; ".join(reasons)
    )


class Prepared:
    """A redist source fetched and unpacked ahead of its build (`prepare`).

    ``fetched``: the artifact; ``tree``: the unpacked tree, checked as `build` checks it,
    in a private work directory of the store's temporary area; ``log``: what fetching and
    unpacking wrote. Use it as a context manager: leaving it removes the work directory
    with whatever is still in it (the builder renames ``tree`` away first).
    """

    def __init__(self, fetched: FetchedArtifact, tree: Path, log: str, release: Any) -> None:
        self.fetched, self.tree, self.log, self._release = fetched, tree, log, release

    def close(self) -> None:
        """Remove the work directory (and the tree, unless it was moved away)."""
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> Prepared:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prepare(drv: Derivation, store: Any, fetchers: Sequence[str]) -> Prepared:
    """Fetch and unpack the source of the redist derivation `drv`, as its build would, but now.

    Nothing in this step depends on the derivation's inputs, so the scheduler runs it while
    they are still being built (`cudapkgs.realise.unpack_ahead`). Every check of the build's
    own fetch and unpack applies (the source's sha256 or the wheel's recorded hash, each file
    against the wheel's RECORD, paths and links confined to the tree, expansion bounds).
    Raises what the build would (`RedistBuildError` when no source works); the work
    directory is then removed.
    """
    import contextlib
    import io

    if drv.data.get("src") is None:
        raise RedistBuildError(f"{drv.name} has no release for this platform (src is null)")
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(store.work_dir(f"unpack-{drv.name}"))
        log = io.StringIO()
        ctx = BuildContext(store=store, work_dir=work, log=log, fetchers=tuple(fetchers))
        entry = download_dir(store.store_dir, drv.data["src"]["sha256"])
        with download_entry(entry):
            fetched, tree = _fetch_and_unpack(drv, ctx, work)
        release = stack.pop_all().close
    return Prepared(fetched, tree, log.getvalue(), release)


def _declared_size(drv: Derivation) -> int | None:
    size = (drv.data.get("src") or {}).get("size")
    try:
        return int(size) if size is not None else None
    except (TypeError, ValueError):
        return None


def _check_wheel_expansion(wheel: Path, declared_size: int | None) -> None:
    """UnpackError if the wheel's central directory promises more than `expansion_limits` allows.

    The unzipper never writes a member past its recorded size, so the recorded sizes bound it.
    """
    import zipfile

    max_bytes, max_members = expansion_limits(declared_size or wheel.stat().st_size)
    try:
        with zipfile.ZipFile(wheel) as z:
            infos = z.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as error:
        raise UnpackError(f"{wheel.name}: damaged wheel ({error})") from None
    total = sum(i.file_size for i in infos)
    if max_members is not None and len(infos) > max_members:
        raise UnpackError(f"{wheel.name}: {len(infos)} members, more than the {max_members} allowed for "
                          f"{declared_size} declared bytes; refusing to unpack it")
    if max_bytes is not None and total > max_bytes:
        raise UnpackError(f"{wheel.name}: expands to {total} bytes, past {max_bytes} ({EXPANSION_RATIO}x the "
                          f"{declared_size} bytes declared); refusing to unpack it")


def _discard(fetched: FetchedArtifact) -> None:
    """Delete a cache entry that proved corrupt (and a wheel's verified-hash record), so it is fetched anew."""
    path = Path(fetched.path)
    for victim in (path, path.with_name(path.name + ".sha256")):
        try:
            if victim.is_dir() and not victim.is_symlink():
                _remove(victim)
            else:
                victim.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            pass  # a cache we cannot clean is not worth failing over


def _fetch(drv: Derivation, ctx: BuildContext, only: Sequence[Source] | None = None) -> FetchedArtifact:
    src = drv.data["src"]
    attrs = drv.attrs
    artifact = Artifact(src["relativePath"], src["sha256"], None, int(src["size"]) if src.get("size") else None)
    dest = download_dir(ctx.store.store_dir, src["sha256"])
    dest.mkdir(parents=True, exist_ok=True)
    # Two builds may share one archive (the same component in two sets): one downloads, the other waits.
    lock = acquire_saying_so(PathLock(dest / ".lock"), f"the download of {posixpath.basename(src['relativePath'])}")
    try:
        fetched = fetch_artifact(
            list(only) if only is not None else sources(ctx.fetchers),
            attrs["redistName"],
            attrs["pname"],
            attrs["version"],
            artifact,
            dest,
            cuda_major=_cuda_major(attrs),
            progress=ctx.on_download,
        )
    finally:
        lock.release()
    size = fetched.path.stat().st_size if fetched.path.is_file() else None
    shown = f", {format_size(size)}" if size is not None else ""
    ctx.log.write(f"fetched {fetched.kind} {fetched.path.name} from {fetched.source_name} ({fetched.path}{shown})\n")
    return fetched


def _touch(path: Path) -> None:
    """Mark a cached archive as just used (least-recently-used eviction orders by it)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _cuda_major(attrs: Mapping[str, Any]) -> int:
    return int(str(attrs["cudaMajorMinorVersion"]).split(".")[0])


# --- unpack -----------------------------------------------------------------


# --- inputs -----------------------------------------------------------------


def _propagated(path: str) -> list[str]:
    try:
        text = read_support_file(Path(path) / "nix-support" / "propagated-build-inputs")
    except OSError:
        return []
    return same_store_paths(path, text.split())


def dependency_paths(inputs: Mapping[str, str]) -> list[str]:
    """The input paths and everything they propagate (nix-support/propagated-build-inputs), in order."""
    order: list[str] = []
    queue = list(inputs.values())
    seen: set[str] = set()
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        order.append(path)
        queue.extend(_propagated(path))
    return order


def _dependency_lib_dirs(paths: Sequence[str]) -> list[Path]:
    # Stubs outputs are for linking only: a run path must never reach them.
    dirs = []
    for path in paths:
        if path.endswith("-stubs"):
            continue
        for sub in ("lib", "lib64"):
            d = Path(path) / sub
            if d.is_dir() and not (sub == "lib64" and (Path(path) / "lib").resolve() == d.resolve()):
                dirs.append(d)
    return dirs


# --- the builder ------------------------------------------------------------


def _output_var(attrs: Mapping[str, Any], var: str, outputs: Mapping[str, Any]) -> str:
    name = attrs.get(var) or "out"
    return name if name in outputs else "out"


def _stage(outputs: Mapping[str, Path], ctx: BuildContext) -> Path:
    # Beside the output dirs (the store's tmp dir): moving the tree into them is a rename.
    parents = {Path(p).parent for p in outputs.values()}
    base = parents.pop() if len(parents) == 1 else ctx.work_dir
    return Path(tempfile.mkdtemp(prefix=".redist-", dir=base))


# Outputs a wheel may leave empty (pypi-wheels.md: no static cudart, no stubs).
WHEEL_OPTIONAL_OUTPUTS = frozenset({"static", "stubs", "doc", "samples"})


def build(drv: Derivation, ctx: BuildContext, outputs: Mapping[str, Path]) -> None:
    """Build the redist derivation `drv` into the directories `outputs` (output name -> new dir)."""
    attrs = drv.attrs
    src = drv.data["src"]
    if src is None:
        raise RedistBuildError(f"{drv.name} has no release for this platform (src is null)")
    unknown = [o for o in outputs if o not in drv.outputs]
    if unknown:
        raise RedistBuildError(f"{drv.name} has no output(s) {', '.join(unknown)}")
    final = {name: drv.outputs[name] for name in outputs}
    compiler = None
    if "hostCompiler" in attrs:
        compiler = host_compiler.from_attrs(attrs["hostCompiler"])  # before any download
    stage = _stage(outputs, ctx)
    try:
        # The download cache entry is marked in use (a shared lock `gc --caches` respects)
        # from the fetch until the tree is unpacked.
        entry = download_dir(ctx.store.store_dir, drv.data["src"]["sha256"])
        ahead = ctx.extra["prepared"](drv) if ctx.extra.get("prepared") is not None else None
        if ahead is not None:  # fetched and unpacked while the inputs were being built
            if ctx.on_step is not None:  # the display's step; the log gets prepare's own "@ fetch", "@ unpack"
                ctx.on_step("fetch")
            with ahead:
                ctx.log.write("(fetched and unpacked ahead, while the inputs were built)\n" + ahead.log)
                tree = stage / "o"
                os.rename(ahead.tree, tree)  # both in the store's temporary area
                fetched = ahead.fetched
        else:
            with download_entry(entry):
                fetched, tree = _fetch_and_unpack(drv, ctx, stage)

        ctx.step("postUnpack")
        if hooks.lift_versioned_lib_dir(tree, str(attrs["cudaMajorMinorVersion"]).split(".")[0]):
            ctx.log.write("lifted lib/<cudaMajor> to lib\n")
        hooks.move_pkgconfig(tree)
        if attrs["pname"] == "cuda_cudart" and fetched.kind in ("tree", "wheel"):
            made = _generate_libcuda_stub(tree, drv.data["system"])
            if made:
                ctx.log.write(f"{made}: generated from include/cuda.h (the wheel has no libcuda stub)\n")

        ctx.step("prePatch")
        if attrs["pname"] == "cuda_crt" and _cuda_major(attrs) < 13:
            # cuda_crt/package.nix@613b8b48 preInstall: nvcc's release without the compiler.
            _remove_top_level(tree, ("bin", "lib", "lib64", "nvvm", "nvvm-next"))
        if attrs["pname"] == "libnvvm":
            _unnest(tree / "nvvm")
        if attrs.get("ccclLayout") == "unnested":
            _unnest_cccl(tree / "include")
        hooks.rewrite_pkgconfig(
            tree,
            dev=drv.outputs[_output_var(attrs, "outputDev", drv.outputs)],
            lib=drv.outputs[_output_var(attrs, "outputLib", drv.outputs)],
            include=drv.outputs[_output_var(attrs, "outputInclude", drv.outputs)],
        )

        ctx.step("install")
        split = hooks.split_outputs(tree, list(outputs), root=stage, name="o")
        for name, path in split.items():
            if name in outputs:
                shutil.move(path, outputs[name])  # a rename unless the stage is on another file system
            elif any(path.iterdir()):
                raise RedistBuildError(f"{drv.name}: files left in output {name!r}, which was not asked for")
        for name, path in outputs.items():
            # Moving parts of the tree apart can change where a relative link chain leads.
            try:
                confine.check_tree_links(path)
            except confine.TreeEscapeError as error:
                raise UnpackError(f"{drv.name}: output {name}: {error}") from None

        if attrs["pname"] == "cuda_nvcc":
            ctx.step("nvcc")
            out = _output_var(attrs, "outputBin", outputs)
            for line in nvcc.arrange(Path(outputs[out]), final[out], drv.data["inputs"], compiler,
                                     links=ctx.extra.get("store_links")):
                ctx.log.write(f"nvcc: {line}\n")

        # Before fixup, unlike Nix: fixup adds only store paths and the driver dir, and the
        # driver dir is under /usr/ on most hosts that are not NixOS.
        ctx.step("installCheck")
        hits = hooks.check_no_fhs_references(outputs, allow=True, text_only=True)  # one read per file
        if hits and not attrs.get("allowFHSReferences"):
            where = {Path(path): name for name, path in outputs.items()}
            shown = [f"{where[root]}/{hit.relative_to(root)}" for hit in hits[:5] for root in where if root in hit.parents]
            more = f" and {len(hits) - 5} more" if len(hits) > 5 else ""
            raise hooks.FHSReferenceError(
                f"{len(hits)} file(s) refer to /usr/ and allowFHSReferences is false: {', '.join(shown)}{more}"
            )
        exempt = ["out", _output_var(attrs, "outputDev", outputs)]
        if fetched.kind in ("tree", "wheel"):
            # NVIDIA's wheels leave out what a redist tarball has for building against it
            # (static libraries, the libcuda stubs); those outputs stay empty, and say why.
            for name in WHEEL_OPTIONAL_OUTPUTS.intersection(outputs):
                if not any(p.name != "nix-support" for p in Path(outputs[name]).iterdir()):
                    exempt.append(name)
                    support = Path(outputs[name]) / "nix-support"
                    confine.require_real_dirs(outputs[name], support / "missing-from-wheel", include_self=True)
                    support.mkdir(exist_ok=True)
                    (support / "missing-from-wheel").write_text(
                        f"{attrs['pname']} {attrs['version']} came from NVIDIA's PyPI wheel, which has no {name} files\n"
                    )
                    ctx.log.write(f"output {name} is empty: the wheel has no {name} files\n")
        hooks.check_outputs_not_empty(outputs, exempt=tuple(exempt))

        ctx.step("fixup")
        # No unshare_hardlinks walk here: unpack makes hard links only between members of this
        # tree (patchelf editing both names is right), and wheels have none.
        _fixup(drv, outputs, final, ctx)
    finally:
        _remove(stage)


def _fixup(drv: Derivation, outputs: Mapping[str, Path], final: Mapping[str, str], ctx: BuildContext) -> None:
    attrs = drv.attrs
    pname = attrs["pname"]
    driver = attrs.get("driverLibDir") or hooks.DEFAULT_DRIVER_DIR
    temp = {os.fspath(path): final[name] for name, path in outputs.items()}

    def to_final(entry: str) -> str:
        for tmp, path in temp.items():
            if entry == tmp or entry.startswith(tmp + "/"):
                return path + entry[len(tmp):]
        return entry

    inputs = drv.data["inputs"]
    dep_dirs = _dependency_lib_dirs(dependency_paths(inputs))
    plan = hooks.RunpathPlan()
    report = hooks.auto_patchelf(
        outputs,
        dep_dirs,
        append_runpaths=attrs.get("appendRunpaths") or ("$ORIGIN",),
        ignore_missing=IGNORE_MISSING.get(pname, ()),
        plan=plan,
    )
    for path in report.runpaths:
        plan.set_runpath(path, [to_final(e) for e in plan.runpath(path)])
    hooks.add_driver_runpath(outputs, driver, plan=plan)
    compat = next((p for k, p in inputs.items() if k.partition(".")[0] == "cuda_compat"), None)
    if compat is not None and pname != "cuda_compat":
        hooks.add_cuda_compat_runpath(outputs, f"{compat}/compat", plan=plan)
    hooks.remove_stubs_from_runpath(outputs, driver, plan=plan)
    calls = plan.apply()
    ctx.log.write(f"fixup: {len(report.runpaths)} ELF file(s), {calls} patchelf call(s)\n")
    for path, lib in report.ignored_missing:
        ctx.log.write(f"fixup: {path.name}: {lib} left to the driver\n")

    hooks.mark_for_cudatoolkit_root(outputs, pname=pname, strict_deps=bool(drv.data.get("strictDeps", True)))
    _propagate(attrs, outputs, final)
    if pname == "cuda_cudart":
        _cudart_stubs(outputs.get(_output_var(attrs, "outputStubs", outputs)))


def _propagate(attrs: Mapping[str, Any], outputs: Mapping[str, Path], final: Mapping[str, str]) -> None:
    """nix-support/propagated-build-inputs: multiple-outputs' propagation into the dev output, and
    buildRedist's into ``out`` as well, so that using the package's path pulls in every part."""
    # Dependencies of kind "propagated" (libcublas -> cuda_cudart) travel with the package's dev and out.
    inputs = list(attrs.get("propagatedBuildInputs") or ())
    if list(outputs) == ["out"]:
        targets_paths = {"out": inputs}
    else:
        dev = _output_var(attrs, "outputDev", outputs)
        wanted = [o for o in attrs.get("propagatedBuildOutputs", ()) if o in final and o != dev]
        targets = {dev: wanted}
        if dev != "out" and "out" in outputs:
            # As fixupCudaPropagatedBuildOutputsToOut: no reverse edge to dev when dev propagates out.
            targets["out"] = [o for o in attrs.get("propagatedBuildOutputs", ()) if o in final and o != "out"
                              and not (o == dev and "out" in wanted)]
        targets_paths = {name: [final[o] for o in names] + inputs for name, names in targets.items()}
        if "out" in outputs and "out" not in targets_paths:
            targets_paths["out"] = inputs
    for name, propagated in targets_paths.items():
        if propagated:
            support = Path(outputs[name]) / "nix-support"
            confine.require_real_dirs(outputs[name], support / "propagated-build-inputs", include_self=True)
            support.mkdir(exist_ok=True)
            (support / "propagated-build-inputs").write_text(" ".join(dict.fromkeys(propagated)) + "\n")


def _generate_libcuda_stub(tree: Path, system: str) -> str | None:
    """NVIDIA's wheels have no ``lib/stubs/libcuda.so``: write a link-only one from the set's own
    ``include/cuda.h`` and the other driver headers beside it (`cudapkgs.elf.link_stub.DRIVER_HEADERS`),
    so ``-lcuda`` links as with a redist tarball.

    Returns the stub's path relative to the tree, or None when the tree has a stub already or
    no cuda.h.  The stub lands in the ``stubs`` output (lib/stubs), never in a RUNPATH.
    """
    from ..elf import link_stub

    header = tree / "include" / "cuda.h"
    stubs = tree / "lib" / "stubs"
    confine.require_real_dirs(tree, header)
    confine.require_real_dirs(tree, stubs, include_self=True)
    if os.path.lexists(stubs / "libcuda.so") or not header.is_file() or header.is_symlink():
        return None
    machine = system.partition("-")[0]
    texts = []
    for name in link_stub.DRIVER_HEADERS:
        path = tree / "include" / name
        if path.is_file() and not path.is_symlink():
            texts.append(path.read_text(errors="replace"))
    symbols = link_stub.cuda_driver_symbols("\n".join(texts))
    stubs.mkdir(parents=True, exist_ok=True)
    link_stub.write_stub(stubs / "libcuda.so", "libcuda.so.1", symbols, machine)
    return "lib/stubs/libcuda.so"


def _cudart_stubs(root: Path | None) -> None:
    # cuda_cudart's postInstall: libcuda.so.1 -> libcuda.so, and the stubs linked into <stubs>/lib.
    stubs = Path(root) / "lib" / "stubs" if root is not None else None
    if stubs is None:
        return
    confine.require_real_dirs(root, stubs, include_self=True)
    if not stubs.is_dir():
        return
    if (stubs / "libcuda.so").exists() and not os.path.lexists(stubs / "libcuda.so.1"):
        (stubs / "libcuda.so.1").symlink_to("libcuda.so")
    for entry in sorted(stubs.iterdir()):
        link = stubs.parent / entry.name
        if not os.path.lexists(link):
            link.symlink_to(f"stubs/{entry.name}")


def _remove_top_level(tree: Path, names: Sequence[str]) -> None:
    """Remove the entries `names` of `tree` (a directory, file or link each; absent ones are fine)."""
    for name in names:
        path = tree / name
        if path.is_dir() and not path.is_symlink():
            _remove(path)
        elif os.path.lexists(path):
            path.unlink()


def _unnest(directory: Path) -> None:
    # libnvvm's prePatch: everything is nested under nvvm/; make it top level.
    if not directory.is_dir() or directory.is_symlink():
        return
    confine.require_real_dirs(directory.parent, directory)
    for child in sorted(directory.iterdir()):
        target = directory.parent / child.name
        if os.path.lexists(target):
            raise RedistBuildError(f"cannot un-nest {child}: {target} exists")
        child.rename(target)
    directory.rmdir()


def _unnest_cccl(include: Path) -> None:
    """cccl's layout from CUDA 13.0 (cccl.nix@68f38bbd): drop include/nv, lift include/cccl/* into
    include/, and make include/cccl a link to include itself."""
    nested = include / "cccl"
    if not nested.is_dir() or nested.is_symlink():
        return
    confine.require_real_dirs(include.parent, include)
    if (include / "nv").exists() and not (include / "nv").is_symlink():
        _remove(include / "nv")
    _unnest(nested)
    (include / "cccl").symlink_to(".")


def _remove(path: Path) -> None:
    def writable(func: Any, name: str, _exc: Any) -> None:
        os.chmod(os.path.dirname(name), 0o755)
        func(name)

    shutil.rmtree(path, onerror=writable)
