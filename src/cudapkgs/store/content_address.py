"""Content addresses (Nix's `CA:` narinfo field): what a path's name says its contents are.

A content-addressed path's store path is computed from its contents and references alone, so a
path whose contents check out against its address needs no signature: Nix accepts it unsigned
(`ValidPathInfo::checkSignatures` returns maxSigs when `isContentAddressed`, NixOS/nix
src/libstore/store-api.cc@69c6fb12eea414382f0b945c0d6c574c43c7c9a3 (2.8.0) lines 1204-1240) and
then checks the contents against the address (`LocalStore::addToStore`, src/libstore/local-store.cc
@69c6fb12 lines 1288-1310, "ca hash mismatch").

The forms (src/libstore/content-address.cc@69c6fb12, `renderContentAddress`/`parseContentAddress`):

    text:sha256:<base-32>          a text file (a .drv): store path from "text" + references
    fixed:r:sha256:<base-32>       a tree by its NAR hash: store path from "source" + references
    fixed:sha256:<base-32>         one flat file: store path from "output:out" (no references)

Only sha256 is read (what Nix writes for all three by default); another algorithm makes the
address unusable here, and the path then needs a signature like any other.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from .paths import base32_decode, base32_encode, make_store_path, make_store_path_from_digest

__all__ = ["ContentAddress", "parse_content_address", "store_path_for", "derive_content_address", "file_sha256"]

_MAX_FLAT = 1 << 34  # 16 GiB: bounded read of a flat file to hash


@dataclass(frozen=True)
class ContentAddress:
    """`method` is "text", "nar" (fixed:r:) or "flat" (fixed:); `digest` the 32 sha256 bytes."""

    method: str
    digest: bytes

    def render(self) -> str:
        prefix = {"text": "text:", "nar": "fixed:r:", "flat": "fixed:"}[self.method]
        return f"{prefix}sha256:{base32_encode(self.digest)}"


def parse_content_address(text: str) -> ContentAddress | None:
    """The address `text` gives, or None when it is not one this module reads (another algorithm, malformed)."""
    for prefix, method in (("text:", "text"), ("fixed:r:", "nar"), ("fixed:", "flat")):
        if text.startswith(prefix):
            algo, _, encoded = text[len(prefix):].partition(":")
            if algo != "sha256":
                return None
            try:
                digest = bytes.fromhex(encoded) if len(encoded) == 64 else base32_decode(encoded)
            except ValueError:
                return None
            return ContentAddress(method, digest) if len(digest) == 32 else None
    return None


def store_path_for(store_dir: str, name: str, ca: ContentAddress, references: list[str], self_path: str | None = None) -> str | None:
    """The store path that `ca`, `references` (full paths) and `name` make (Nix's `makeFixedOutputPathFromCA`).

    A reference equal to `self_path` is the self-reference (":self", NAR addresses only). None
    when the form allows no such references (a flat file or a text file refers to nothing /
    nothing of its own).
    """
    others = sorted(r for r in references if r != self_path)
    has_self = self_path is not None and self_path in references
    hex_digest = ca.digest.hex()
    if ca.method == "text":
        if has_self:
            return None
        return make_store_path_from_digest(store_dir, ":".join(["text", *others]), hex_digest, name)
    if ca.method == "nar":
        kind = ":".join(["source", *others]) + (":self" if has_self else "")
        return make_store_path_from_digest(store_dir, kind, hex_digest, name)
    if others or has_self:
        return None
    return make_store_path(store_dir, "output:out", f"fixed:out:sha256:{hex_digest}:", name)


def file_sha256(path: str) -> bytes | None:
    """The sha256 of the regular file `path` (not followed if a link), or None when it is not one or too large."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        import stat

        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_FLAT:
            return None
        digest = hashlib.sha256()
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
        return digest.digest()


def derive_content_address(store_dir: str, path: str, nar_hash: str, references: list[str]) -> ContentAddress | None:
    """The address of the valid store path `path` if its name is what its contents make, else None.

    `nar_hash` is "sha256:<base-32>" (the store's record). Tried in order: the NAR hash (sources
    added by path, recursive fixed outputs); for a regular file, its sha256 as a text file
    (a .drv) and as a flat fixed output. Reads the file only in the last case.
    """
    name = os.path.basename(path)[33:]
    try:
        nar = ContentAddress("nar", base32_decode(nar_hash.partition(":")[2]))
    except ValueError:
        return None
    if store_path_for(store_dir, name, nar, references, path) == path:
        return nar
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    digest = file_sha256(path)
    if digest is None:
        return None
    for method in ("text", "flat"):
        ca = ContentAddress(method, digest)
        if store_path_for(store_dir, name, ca, references, path) == path:
            return ca
    return None
