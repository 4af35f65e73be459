"""What fetchFromGitHub and fetchzip share: the first location whose unpacked tree has the NAR hash.

Nixpkgs' fetchzip (pkgs/build-support/fetchzip/default.nix@0145c6da) downloads an archive,
unpacks it, keeps its single top directory (``stripRoot``) or the whole tree, and names the
result by the NAR hash of that tree; fetchFromGitHub is fetchzip of GitHub's archive URL.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CudapkgsError, FetchError, HashMismatchError
from .fixed_output import check_hash, install_tree, materialise, mirror_candidates, source_mirrors
from .hashes import Hash

__all__ = ["declared_hash", "fetch_tree", "locations"]


def declared_hash(drv: Any) -> Hash:
    """The NAR hash a fixed-output derivation declares (the all-zero hash is Nix's fakeHash)."""
    spec = drv.data["outputHash"]
    digest = bytes.fromhex(spec["hash"])
    return Hash(spec["algo"], digest, fake=digest == bytes(len(digest)))


def locations(drv: Any, mirror_names: Sequence[str], upstream: Sequence[str]) -> list[str]:
    """Each source mirror at each of `mirror_names`, then the `upstream` URLs, in that order."""
    found = [loc for mirror in source_mirrors(drv.context.get("sourceMirrors") or ())
             for loc in mirror_candidates(mirror, mirror_names)]
    return found + list(upstream)


def fetch_tree(drv: Any, ctx: Any, out: Path, candidates: Sequence[str], *, what: str, strip_root: bool = True) -> str:
    """Install into `out` the first candidate whose unpacked tree has the derivation's NAR hash.

    `what` names the source in messages ("NVIDIA/nccl v2.30.7-1"); `strip_root` keeps the
    archive's single top directory (an archive without one is refused). Returns the location
    used. Raises the first `HashMismatchError` when a candidate had other contents, else a
    `FetchError` listing every candidate's problem.
    """
    from .archives import unpack

    declared = declared_hash(drv)
    problems: list[str] = []
    mismatch: HashMismatchError | None = None
    work = Path(ctx.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    ctx.step("fetch")
    for location in candidates:
        scratch = Path(tempfile.mkdtemp(prefix="src-", dir=work))
        try:
            archive = materialise(location, scratch, progress=ctx.on_download)
            ctx.step("unpack")
            root = unpack(archive, scratch / "unpacked")
            if strip_root and root == scratch / "unpacked":
                raise FetchError(f"{location}: the archive has no single top-level directory")
            tree = root if strip_root else scratch / "unpacked"
            check_hash(tree, "recursive", declared, drv.name, origin=location)
            install_tree(tree, out)
            ctx.log.write(f"fetched {what} from {location}\n")
            return location
        except HashMismatchError as error:
            ctx.log.write(f"{error}\n")
            mismatch = mismatch or error
        except (CudapkgsError, OSError) as error:
            ctx.log.write(f"{location}: {error}\n")
            problems.append(f"{location}: {error}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if mismatch is not None:
        raise mismatch
    raise FetchError(
        f"cannot fetch {what}: " + "; ".join(problems)
        + "; put the archive in a source mirror (config sourceMirrors or $CUDAPKGS_SOURCE_MIRRORS) to build offline"
    )
