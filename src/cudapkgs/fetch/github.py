"""fetchFromGitHub: a repository at a tag or commit, named by the NAR hash of its unpacked tree.

``pkgs.fetchFromGitHub(owner="NVIDIA", repo="nccl", tag="v2.30.7-1",
hash="sha256-fdiQZweX0jYfGroP0bL5Sfv3+DkCzVBZZLEbPv8aqq8=")`` takes Nixpkgs'
arguments and Nixpkgs' hash verbatim: the hash is the NAR hash (SHA-256, SRI)
of the archive's single top directory, unpacked, as Nixpkgs' fetchzip computes
it (Nixpkgs pkgs/build-support/fetchgithub/default.nix and fetchzip/default.nix
@ 0145c6da: ``https://github.com/<owner>/<repo>/archive/<rev or tag>.tar.gz``,
``stripRoot``, output hash mode recursive, ``name ? "source"``).

The result is a fixed-output package (`fixed_output.fixed_output_package`): one
store path per content, whichever way it is fetched. The builder tries, in
order, each source mirror (see `fixed_output.source_mirrors`) at

- ``nar/sha256/<hex NAR hash>.tar.gz``: a content-addressed copy, and
- ``<repo>-<version>.tar.gz``, ``<repo>-<ref>.tar.gz``: the names GitHub gives its
  archives (``v`` dropped before a digit), as ``../shared/sources`` holds them,

then GitHub itself. Each candidate is unpacked with the project's safe unpacker
(`cudapkgs.fetch.archives.unpack`) and kept only if its NAR hash is the declared one.
Not supported (an error says so): fetchSubmodules, leaveDotGit, deepClone,
sparseCheckout, postFetch, private repositories.
"""

from __future__ import annotations

import re
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path  # annotations; pathlib is imported where a path is made
    from typing import Any

from ..errors import EvalError
from ..package import Package
from .fixed_output import fixed_output_package
from .hashes import parse_hash

__all__ = ["fetch_from_github", "build", "archive_names"]

_UNSUPPORTED = ("fetchSubmodules", "leaveDotGit", "deepClone", "sparseCheckout", "postFetch", "private", "forceFetchGit")
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def fetch_from_github(
    pkgs: Any,
    *,
    owner: str,
    repo: str,
    rev: str | None = None,
    tag: str | None = None,
    hash: str | None = None,
    sha256: str | None = None,
    name: str = "source",
    githubBase: str = "github.com",  # noqa: N803 - Nixpkgs' spelling
    **unsupported: Any,
) -> Package:
    """A package whose output is the repository's tree at ``tag`` or ``rev`` (exactly one of them).

    ``hash`` (or the older ``sha256``) is Nixpkgs' value; empty means "tell me the hash"
    (the build fails printing it). Raises `EvalError` for a malformed hash, a name
    that is not a plain GitHub name, both or neither of rev/tag, or an unsupported option.
    """
    where = f"fetchFromGitHub {owner}/{repo}"
    for key, value in unsupported.items():
        if key in _UNSUPPORTED and value in (False, None, ""):
            continue
        if key in _UNSUPPORTED:
            raise EvalError(f"{where}: {key} is not supported by cudapkgs' fetchFromGitHub")
        from ..errors import did_you_mean

        raise EvalError(f"{where}: unknown argument {key!r}{did_you_mean(key, ['owner', 'repo', 'rev', 'tag', 'hash', 'sha256', 'name', 'githubBase'])}")
    for label, value in (("owner", owner), ("repo", repo), ("githubBase", githubBase)):
        if not isinstance(value, str) or not _NAME.match(value) or value in (".", ".."):
            raise EvalError(f"{where}: {label} {value!r} is not a GitHub name")
    if (rev is None) == (tag is None):
        raise EvalError(f"{where}: give exactly one of rev and tag")
    ref = tag if tag is not None else rev
    if not isinstance(ref, str) or not ref or ref.startswith(("/", "-")) or ".." in ref or any(c.isspace() for c in ref):
        raise EvalError(f"{where}: {'tag' if tag is not None else 'rev'} {ref!r} is not a git reference")
    if hash and sha256:
        raise EvalError(f"{where}: give hash or sha256, not both")
    declared = parse_hash(hash or sha256, where=f"{where}: hash")
    url_ref = f"refs/tags/{tag}" if tag is not None else rev
    attrs = {
        "owner": owner,
        "repo": repo,
        "rev": rev if rev is not None else tag,
        "tag": tag,
        "url": f"https://{githubBase}/{owner}/{repo}/archive/{url_ref}.tar.gz",
        "mirrorNames": archive_names(repo, ref, declared.hex),
    }
    passthru = {"gitRepoUrl": f"https://{githubBase}/{owner}/{repo}.git"}
    return fixed_output_package(
        pkgs, name=name, builder="fetchFromGitHub", hash=declared, mode="recursive",
        attrs=attrs, passthru=passthru, meta={"homepage": f"https://{githubBase}/{owner}/{repo}"},
    )


def archive_names(repo: str, ref: str, nar_hex: str) -> list[str]:
    """The file names a source mirror may hold this archive under, most specific first."""
    version = ref.removeprefix("refs/tags/")
    short = version[1:] if re.match(r"^[vV]\d", version) else version
    names = [f"nar/sha256/{nar_hex}.tar.gz", f"{repo}-{short}.tar.gz", f"{repo}-{version}.tar.gz"]
    return list(dict.fromkeys(n for n in names if "/" not in n.removeprefix("nar/sha256/")))


def build(drv: Any, ctx: Any, outputs: dict[str, Path]) -> None:
    """The fetchFromGitHub builder: the first mirror copy or GitHub archive with the declared NAR hash."""
    from .unpacked_tree import fetch_tree, locations

    attrs = drv.attrs
    candidates = locations(drv, attrs.get("mirrorNames") or (), [attrs["url"]])
    fetch_tree(drv, ctx, outputs["out"], candidates, what=f"{attrs['owner']}/{attrs['repo']} {attrs['rev']}")
