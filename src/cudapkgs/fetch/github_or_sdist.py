"""A GitHub tag's tree that may also be taken out of a PyPI sdist carrying the same tree.

``fetch_github_or_sdist(pkgs, owner="opencv", repo="opencv", tag="4.11.0",
hash="sha256-oiU4…", sdist=SdistTree(…))`` is `fetchFromGitHub` (same arguments, same
Nixpkgs NAR hash, same name ``source``, hence the same store output path) with a second
place to get the tree from: a directory inside a source distribution whose own sha256 is
pinned.  Some projects ship their upstream trees inside an sdist (PyPI's
``opencv-contrib-python`` carries ``opencv/`` and ``opencv_contrib/``), which is the only
copy a machine that reaches PyPI but not GitHub can get.

The builder tries, in order: each source mirror and GitHub exactly as fetchFromGitHub
does (`fetch.github`); then the sdist, from each source mirror (at ``sha256/<hex>`` and
its file name) and its URL.  The sdist file is checked against its sha256 before it is
unpacked (with the safe unpacker, `fetch.archives`); the directory ``subdir`` is taken;
``exportIgnore`` basenames are removed at every depth (what ``git archive`` leaves out
for a ``.gitattributes`` ``export-ignore`` rule, which GitHub's archives honour; a
submodule checkout's ``.git`` file is never in GitHub's archive); then the tree must have
the declared NAR hash, as any fixed output must.  So the sdist is never trusted: its
tree is only kept when it is byte for byte the GitHub tree.
"""

from __future__ import annotations

import re
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

from ..errors import EvalError
from ..lib.records import NamedTuple
from ..package import Package

__all__ = ["SdistTree", "fetch_github_or_sdist", "build", "remove_export_ignored"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_BASENAME = re.compile(r"[A-Za-z0-9._*-]+")


class SdistTree(NamedTuple):
    """Where a tree sits inside a source distribution.

    url: the sdist's https URL; name: its file name (a source mirror is asked for it);
    sha256: the file's sha256 (64 hex digits); subdir: the tree's directory inside the
    sdist's single top directory ("opencv"); exportIgnore: basename globs removed at every
    depth before hashing (the upstream ``.gitattributes`` export-ignore rules).
    """

    url: str
    name: str
    sha256: str
    subdir: str
    exportIgnore: tuple[str, ...] = ()  # noqa: N815 - a derivation attribute


def fetch_github_or_sdist(pkgs: Any, *, owner: str, repo: str, tag: str, hash: str, sdist: SdistTree,
                          githubBase: str = "github.com") -> Package:  # noqa: N803 - Nixpkgs' spelling
    """fetchFromGitHub ``owner/repo`` at ``tag`` with Nixpkgs' NAR ``hash``, or the same tree from ``sdist``.

    Returns a fixed-output package whose output path equals fetchFromGitHub's for the same
    hash.  Raises `EvalError` for what fetchFromGitHub refuses, for an sdist URL that is not
    https, a sha256 that is not 64 lowercase hex digits, a subdir that is not a plain
    relative path, or an exportIgnore entry that is not a basename glob.
    """
    from .github import fetch_from_github
    from .fixed_output import fixed_output_package
    from .hashes import parse_hash

    github = fetch_from_github(pkgs, owner=owner, repo=repo, tag=tag, hash=hash, githubBase=githubBase)
    where = f"{owner}/{repo} {tag} from {sdist.name}"
    if not sdist.url.startswith("https://"):
        raise EvalError(f"{where}: the sdist URL {sdist.url!r} is not https")
    if not _HEX64.fullmatch(sdist.sha256):
        raise EvalError(f"{where}: the sdist sha256 {sdist.sha256!r} is not 64 lowercase hex digits")
    parts = sdist.subdir.split("/")
    if not sdist.subdir or sdist.subdir.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise EvalError(f"{where}: subdir {sdist.subdir!r} is not a plain relative path")
    if "/" in sdist.name or not sdist.name:
        raise EvalError(f"{where}: the sdist name {sdist.name!r} is not a file name")
    for glob in sdist.exportIgnore:
        if not _BASENAME.fullmatch(glob) or glob in (".", ".."):
            raise EvalError(f"{where}: exportIgnore {glob!r} is not a basename glob")
    attrs = {
        "owner": github.owner,
        "repo": github.repo,
        "rev": github.rev,
        "tag": github.tag,
        "url": github.url,
        "mirrorNames": list(github.mirrorNames),
        "sdistUrl": sdist.url,
        "sdistName": sdist.name,
        "sdistSha256": sdist.sha256,
        "sdistSubdir": sdist.subdir,
        "exportIgnore": list(sdist.exportIgnore),
    }
    return fixed_output_package(
        pkgs, name="source", builder="fetchFromGitHubOrSdist", hash=parse_hash(hash), mode="recursive",
        attrs=attrs, passthru={"gitRepoUrl": f"https://{githubBase}/{owner}/{repo}.git", "sdist": sdist},
        meta={"homepage": f"https://{githubBase}/{owner}/{repo}"},
    )


def remove_export_ignored(tree: Path, globs: tuple[str, ...] | list[str]) -> list[str]:
    """Remove every entry under ``tree`` whose basename matches one of ``globs`` (files, links,
    whole directories; links are removed, never followed).  Returns the removed paths, relative
    and sorted."""
    import fnmatch
    import os
    import shutil
    from pathlib import Path

    removed: list[str] = []
    for root, dirs, files in os.walk(tree, followlinks=False):
        for name in list(dirs) + files:
            if any(fnmatch.fnmatchcase(name, g) for g in globs):
                path = Path(root, name)
                removed.append(os.path.relpath(path, tree))
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                if name in dirs:
                    dirs.remove(name)
    return sorted(removed)


def _sdist_tree(drv: Any, ctx: Any, out: Path) -> str:
    """Install the sdist's tree into ``out`` when it has the declared NAR hash; returns the location."""
    import hashlib
    import shutil
    import tempfile
    from pathlib import Path

    from ..errors import CudapkgsError, FetchError, HashMismatchError
    from .archives import unpack
    from .fixed_output import check_hash, install_tree, materialise, mirror_candidates, source_mirrors
    from .unpacked_tree import declared_hash

    attrs = drv.attrs
    sha = attrs["sdistSha256"]
    names = [f"sha256/{sha}", attrs["sdistName"]]
    candidates = [loc for mirror in source_mirrors(drv.context.get("sourceMirrors") or ())
                  for loc in mirror_candidates(mirror, names)] + [attrs["sdistUrl"]]
    declared = declared_hash(drv)
    work = Path(ctx.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    for location in candidates:
        scratch = Path(tempfile.mkdtemp(prefix="sdist-", dir=work))
        try:
            archive = materialise(location, scratch, sha256=sha, progress=ctx.on_download)
            digest = hashlib.sha256()
            with open(archive, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            if digest.hexdigest() != sha:
                raise FetchError(f"{location}: sha256 {digest.hexdigest()}, expected {sha}")
            ctx.step("unpack")
            root = unpack(archive, scratch / "unpacked")
            tree = root / attrs["sdistSubdir"]
            if not tree.is_dir() or tree.is_symlink():
                raise FetchError(f"{location}: no directory {attrs['sdistSubdir']} in the sdist")
            removed = remove_export_ignored(tree, attrs.get("exportIgnore") or ())
            ctx.log.write(f"{attrs['sdistName']}: removed {len(removed)} export-ignored entries\n")
            check_hash(tree, "recursive", declared, drv.name, origin=f"{location} ({attrs['sdistSubdir']}/)")
            install_tree(tree, out)
            ctx.log.write(f"fetched {attrs['owner']}/{attrs['repo']} {attrs['rev']} from {location}"
                          f" ({attrs['sdistSubdir']}/)\n")
            return location
        except HashMismatchError:
            raise  # a sdist with the pinned sha256 but another tree: the package is wrong, say so
        except (CudapkgsError, OSError) as error:
            ctx.log.write(f"{location}: {error}\n")
            problems.append(f"{location}: {error}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    raise FetchError("; ".join(problems))


def build(drv: Any, ctx: Any, outputs: dict[str, Path]) -> None:
    """The builder: fetchFromGitHub's places first, then the sdist (see the module docstring).

    Raises `HashMismatchError` (both hashes) when a place gave another tree, else `FetchError`
    naming every place tried and the source-mirror remedy."""
    from ..errors import FetchError, HashMismatchError
    from .unpacked_tree import fetch_tree, locations

    attrs = drv.attrs
    what = f"{attrs['owner']}/{attrs['repo']} {attrs['rev']}"
    github = locations(drv, attrs.get("mirrorNames") or (), [attrs["url"]])
    try:
        fetch_tree(drv, ctx, outputs["out"], github, what=what)
        return
    except HashMismatchError:
        raise  # a place gave another tree under this name: never fall back past that
    except FetchError as error:
        first = str(error)
    try:
        _sdist_tree(drv, ctx, outputs["out"])
    except FetchError as error:
        raise FetchError(f"{first}; {attrs['sdistName']}: {error}") from None
