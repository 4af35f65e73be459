"""fetchurl: one file, named by its own hash (Nixpkgs' ``fetchurl``).

``pkgs.fetchurl(url="https://…/zlib-1.3.1.tar.gz", hash="sha256-…")`` (or ``urls=[…]``,
``sha256=`` in hex or Nix base-32, ``sha512=``) takes Nixpkgs' arguments and values
(Nixpkgs pkgs/build-support/fetchurl/default.nix @ 0145c6da): the output is the
file itself (output hash mode flat), or with ``executable=True`` an executable file
hashed as a NAR (mode recursive), as Nixpkgs does. ``name`` defaults to the URL's
last component.

The builder tries each source mirror (`fixed_output.source_mirrors`) at
``<algo>/<hex>`` (the layout of Nix's ``hashedMirrors``, e.g. tarballs.nixos.org)
and ``<file name>``, then the URLs in order. Every candidate is checked against
the hash; the first that matches is kept. ``mirror://`` URLs are not supported.
"""

from __future__ import annotations

import os
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

from ..errors import CudapkgsError, EvalError, FetchError, HashMismatchError
from ..package import Package
from .fixed_output import check_hash, fixed_output_package, materialise, mirror_candidates, source_mirrors
from .hashes import Hash, parse_hash

__all__ = ["fetchurl", "build"]


def fetchurl(
    pkgs: Any,
    *,
    url: str | None = None,
    urls: list[str] | None = None,
    hash: str | None = None,
    sha256: str | None = None,
    sha512: str | None = None,
    name: str | None = None,
    executable: bool = False,
    **unsupported: Any,
) -> Package:
    """A package whose output is the file at ``url`` (or the first of ``urls`` that has the hash).

    Raises `EvalError` for no URL, a URL scheme other than http(s)/file, two hashes,
    a malformed hash, or an unsupported Nixpkgs option (postFetch, downloadToTemp, …).
    An empty hash builds to a hash mismatch that prints the file's real hash.
    """
    import urllib.parse  # here: forcing the top level's fetchurl (a listing) imports no URL parser

    if unsupported:
        raise EvalError(f"fetchurl: {', '.join(sorted(unsupported))} is not supported by cudapkgs' fetchurl")
    if (url is None) == (urls is None):
        raise EvalError("fetchurl: give exactly one of url and urls")
    locations = [url] if url is not None else list(urls or [])
    if not locations:
        raise EvalError("fetchurl: urls is empty")
    for location in locations:
        if not isinstance(location, str) or urllib.parse.urlsplit(location).scheme not in ("http", "https", "file"):
            raise EvalError(f"fetchurl: {location!r} is not an http(s) or file URL (mirror:// is not supported)")
    given = [(k, v) for k, v in (("hash", hash), ("sha256", sha256), ("sha512", sha512)) if v is not None]
    if len(given) > 1:
        raise EvalError(f"fetchurl {locations[0]}: give one of hash, sha256 and sha512")
    key, text = given[0] if given else ("hash", "")
    declared = parse_hash(text, default_algo="sha512" if key == "sha512" else "sha256", where=f"fetchurl {locations[0]}: {key}")
    base = urllib.parse.unquote(urllib.parse.urlsplit(locations[0]).path.rstrip("/").rsplit("/", 1)[-1])
    attrs = {
        "urls": locations,
        "executable": bool(executable),
        "mirrorNames": [f"{declared.algo}/{declared.hex}", base],
    }
    return fixed_output_package(
        pkgs, name=name or base or "download", builder="fetchurl", hash=declared,
        mode="recursive" if executable else "flat", attrs=attrs,
    )


def build(drv: Any, ctx: Any, outputs: dict[str, Path]) -> None:
    """The fetchurl builder: the first mirror copy or URL whose bytes have the declared hash."""
    fetch_file(drv, ctx, outputs["out"], list(drv.attrs["urls"]))


def fetch_file(drv: Any, ctx: Any, out: Path, upstream: list[Any]) -> None:
    """Fill ``out`` with the first candidate (mirrors, then ``upstream``) that has ``drv``'s hash.

    An ``upstream`` entry is a URL or a callable ``(scratch_dir) -> Path`` (fetchPypi's pip).
    """
    import shutil  # here, not at import: evaluating a fetchurl writes nothing
    import tempfile
    from pathlib import Path

    spec = drv.data["outputHash"]
    digest = bytes.fromhex(spec["hash"])
    declared = Hash(spec["algo"], digest, fake=digest == bytes(len(digest)))
    executable = bool(drv.attrs.get("executable"))
    names = list(drv.attrs.get("mirrorNames") or ())
    locations = [loc for m in source_mirrors(drv.context.get("sourceMirrors") or ()) for loc in mirror_candidates(m, names)]
    locations += upstream
    work = Path(ctx.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    mismatch: HashMismatchError | None = None
    ctx.step("fetch")
    for location in locations:
        scratch = Path(tempfile.mkdtemp(prefix="url-", dir=work))
        try:
            if callable(location):
                from .pip_progress import reporting_downloads_to

                with reporting_downloads_to(ctx.on_download):  # pip's bytes so far, as a URL's (`_PipDownload`)
                    fetched = location(scratch)
                if ctx.on_download is not None:
                    size = fetched.stat().st_size
                    ctx.on_download(size, size)
                location = getattr(location, "description", "upstream")
            else:
                fetched = materialise(location, scratch, progress=ctx.on_download)
            staged = scratch / "file"
            if fetched.is_relative_to(scratch):
                os.replace(fetched, staged)
            else:
                _copy_regular(fetched, staged)
            os.chmod(staged, 0o755 if executable else 0o644)
            check_hash(staged, spec["mode"], declared, drv.name, origin=location)
            if out.exists() or out.is_symlink():
                shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
            os.replace(staged, out)
            ctx.log.write(f"fetched {drv.name} from {location}\n")
            return
        except HashMismatchError as error:
            ctx.log.write(f"{error}\n")
            mismatch = mismatch or error
        except (CudapkgsError, OSError) as error:
            where = getattr(location, "description", location)
            ctx.log.write(f"{where}: {error}\n")
            problems.append(f"{where}: {error}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if mismatch is not None:
        raise mismatch
    raise FetchError(f"cannot fetch {drv.name}: " + "; ".join(problems))




def _copy_regular(source: Path, target: Path) -> None:
    """Copy the regular file `source` (a file in a local mirror) to the new file `target`: opened once
    without blocking and checked by its descriptor (`inputs.open_cached`), so a FIFO or a device swapped
    in after the mirror was searched cannot hang the fetch; no more than its size then is copied.
    Raises OSError."""
    from ..inputs import open_cached

    with open_cached(source, follow_links=True) as src:
        left = os.fstat(src.fileno()).st_size
        with open(target, "xb") as out:
            while left > 0 and (chunk := src.read(min(1 << 20, left))):
                out.write(chunk)
                left -= len(chunk)
