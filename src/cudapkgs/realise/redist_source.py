"""The source of a buildRedist build: fetched from the configured fetchers and unpacked, now or ahead of the build.

Phases ``fetch`` and ``unpack`` of `cudapkgs.realise.redist` (Nixpkgs' phases, spec §7.2):
the release comes from the configured sources (`sources`) into
``<store>/.cache/downloads/<sha256>/`` and is unpacked (a tarball streamed with its member
paths checked, or a wheel checked against its RECORD); a source that fails either step is
discarded and the next one tried.  `prepare` does both while the build's inputs are still
being built (`cudapkgs.realise.unpack_ahead`).
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import confine
from ..derivation import Derivation
from ..errors import CudapkgsError, FetchError
from ..fetch import FetchedArtifact, MirrorSource, RedistSource, Source, WheelSource, fetch_artifact
from ..fetch.archives import EXPANSION_RATIO, UnpackError, expansion_limits, unpack
from ..fetch.cache import download_entry, in_use
from ..inputs import open_cached
from ..fetch.wheel_unpack import WheelChangedError, check_unpacked, unpack_wheel
from ..manifests import Artifact
from ..store.locks import PathLock, acquire_saying_so
from ..table import format_size
from .context import BuildContext

__all__ = ["Prepared", "RedistBuildError", "download_dir", "prepare", "sources"]


class RedistBuildError(CudapkgsError):
    """A redist derivation cannot be built as given."""


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
                    # Straight into the build directory: no unpacked copy is kept in any cache.
                    try:
                        unpack_wheel(fetched.path, tree, pname=attrs["pname"], cuda_major=_cuda_major(attrs),
                                     sha256=fetched.sha256_to_check,
                                     check_members=_expansion_check(fetched.path, _declared_size(drv)))
                    except WheelChangedError as error:
                        # The cached wheel changed since pip checked it: pip fetches and checks it anew.
                        ctx.log.write(f"{error}; fetching it again\n")
                        _discard(fetched)
                        fetched = _fetch(drv, ctx, [source])
                        if fetched.sha256_to_check is not None:  # pragma: no cover - the cache entry was discarded
                            raise
                        unpack_wheel(fetched.path, tree, pname=attrs["pname"], cuda_major=_cuda_major(attrs),
                                     check_members=_expansion_check(fetched.path, _declared_size(drv)))
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
    Without `declared_size` the bound is that of the file's size, from one fstat of the file read.
    """
    import zipfile

    try:
        with open_cached(wheel, follow_links=True) as handle, zipfile.ZipFile(handle) as z:
            infos = z.infolist()
            size = os.fstat(handle.fileno()).st_size
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as error:
        raise UnpackError(f"{wheel.name}: damaged wheel ({error})") from None
    _expansion_check(wheel, declared_size)(infos, size)


def _expansion_check(wheel: Path, declared_size: int | None) -> Any:
    """The check of `_check_wheel_expansion` on a wheel's central directory entries (a list of
    `zipfile.ZipInfo`) and its size in bytes, for `unpack_wheel(check_members=)`: the directory is
    read once, from the file that is unpacked, and without `declared_size` the bound is that of the
    size of that open file (before, a stat of the path, which may since name another file). The
    check raises UnpackError."""
    return functools.partial(_check_expansion, wheel, declared_size)


def _check_expansion(wheel: Path, declared_size: int | None, infos: list[Any], size: int) -> None:
    max_bytes, max_members = expansion_limits(declared_size or size)
    what = f"{declared_size} declared bytes" if declared_size else f"its {size} bytes"
    total = sum(i.file_size for i in infos)
    if max_members is not None and len(infos) > max_members:
        raise UnpackError(f"{wheel.name}: {len(infos)} members, more than the {max_members} allowed for "
                          f"{what}; refusing to unpack it")
    if max_bytes is not None and total > max_bytes:
        raise UnpackError(f"{wheel.name}: expands to {total} bytes, past {max_bytes} ({EXPANSION_RATIO}x "
                          f"{what}); refusing to unpack it")


def _discard(fetched: FetchedArtifact) -> None:
    """Delete a cache entry that proved corrupt (and a wheel's verified-hash and RECORD-check records), so it is fetched anew."""
    path = Path(fetched.path)
    for victim in (path, path.with_name(path.name + ".sha256"), path.with_name(path.name + ".checked")):
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
            on_fallback=lambda failed, reason, nxt: _say_fallback(ctx, failed, reason, nxt),
        )
    finally:
        lock.release()
    size = fetched.path.stat().st_size if fetched.path.is_file() else None
    shown = f", {format_size(size)}" if size is not None else ""
    ctx.log.write(f"fetched {fetched.kind} {fetched.path.name} from {fetched.source_name} ({fetched.path}{shown})\n")
    return fetched


def _say_fallback(ctx: BuildContext, failed: str, reason: str, next_source: str) -> None:
    """One line (a progress step and the build log) when a fetcher fails and the next is tried."""
    short = reason if len(reason) <= 160 else reason[:157] + "..."
    ctx.step(f"fetch from {failed} failed ({short}); trying {next_source}")  # the log gets it too


def _touch(path: Path) -> None:
    """Mark a cached archive as just used (least-recently-used eviction orders by it)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _cuda_major(attrs: Mapping[str, Any]) -> int:
    return int(str(attrs["cudaMajorMinorVersion"]).split(".")[0])


def _remove(path: Path) -> None:
    def writable(func: Any, name: str, _exc: Any) -> None:
        os.chmod(os.path.dirname(name), 0o755)
        func(name)

    shutil.rmtree(path, onerror=writable)
