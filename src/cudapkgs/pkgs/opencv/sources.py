"""OpenCV's and opencv_contrib's release trees: Nixpkgs' GitHub hashes, and the PyPI sdist that carries both.

Nixpkgs (pkgs/development/libraries/opencv/4.x.nix@01fb069ed21e61f09d3205e3f4949d8e65fbf4c4)
fetches ``opencv/opencv`` and ``opencv/opencv_contrib`` at tag ``4.11.0`` with
fetchFromGitHub; `HASHES` are its NAR hashes, verbatim.

PyPI's ``opencv-contrib-python`` 4.11.0.86 sdist (`SDIST`, sha256 as PyPI lists it)
holds both trees as ``opencv/`` and ``opencv_contrib/`` (git submodule checkouts). Measured
on 2026-12-06 with cudapkgs' NAR hasher (docs/opencv.md, "Sources"):

* ``opencv_contrib/`` without its ``.git`` file (a submodule's ``gitdir:`` pointer, never
  in a GitHub archive) has exactly Nixpkgs' hash ``sha256-YNd96q…``;
* ``opencv/`` without every entry named ``.git*`` has exactly Nixpkgs' hash
  ``sha256-oiU4Cw…``: opencv's own ``.gitattributes`` says ``.git* text export-ignore``,
  which ``git archive`` (hence GitHub's tarball) honours (``.github/``, the ``.gitignore``
  and ``.gitattributes`` files at any depth, the ``.git`` file).

So the store path is the same whichever place gave the tree (`fetch.github_or_sdist`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["HASHES", "SDIST", "VERSION", "sources"]

VERSION = "4.11.0"
# fetchFromGitHub NAR hashes, 4.x.nix@01fb069e (src, contribSrc).
HASHES = {
    "opencv": "sha256-oiU4CwoMfuUbpDtujJVTShMCzc5GsnIaprC4DzkSzEM=",
    "opencv_contrib": "sha256-YNd96qFJ8SHBgDEEsoNps888myGZdELbbuYCae9pW3M=",
}
# PyPI's sdist of opencv-contrib-python 4.11.0.86 (OpenCV 4.11.0), its sha256 from the index.
SDIST = {
    "name": "opencv-contrib-python-4.11.0.86.tar.gz",
    # PyPI's file URL (the index's link; the /packages/source/ short form answers 404 for this file).
    "url": "https://files.pythonhosted.org/packages/ef/51/3ceb85ecff5f26994b7aae2922b1aa38148dbfe88cab13d63bc6facbac88/"
           "opencv-contrib-python-4.11.0.86.tar.gz",
    "sha256": "4ff773dab44911da366b906621c9592d4eb96f6ad3777098933a23f064aab38e",
}
# Basenames GitHub's archive leaves out (see the module docstring), per tree.
EXPORT_IGNORE = {"opencv": (".git*",), "opencv_contrib": (".git",)}


def sources(config: Any, system: str | None = None) -> dict[str, Any]:
    """``{"opencv": src, "opencv_contrib": contribSrc}``: fixed-output trees with Nixpkgs' hashes
    (fetchFromGitHub's store paths), fetchable from GitHub or from the PyPI sdist."""
    from ...fetch.github_or_sdist import SdistTree, fetch_github_or_sdist

    return {
        repo: fetch_github_or_sdist(
            {"config": config, "system": system} if system else config, owner="opencv", repo=repo, tag=VERSION, hash=HASHES[repo],
            sdist=SdistTree(SDIST["url"], SDIST["name"], SDIST["sha256"], repo, EXPORT_IGNORE[repo]),
        )
        for repo in HASHES
    }
