"""Content hashes as Nix writes them: SRI (``sha256-<base64>``), ``sha256:<base-32>``, hex.

A fetcher's ``hash`` is parsed here once, so that every spelling Nixpkgs accepts
works verbatim: the SRI form (``hash = "sha256-…"``), the older
``sha256 = "<base-32 or hex>"`` and ``"sha256:<…>"`` prefixed forms. An empty
string is Nix's "I do not know the hash yet" (``lib.fakeHash``): the fetch runs
and fails with the hash it got, which the user then copies into the file.

Source of the formats: Nix manual, "Hash formats" (nix hash convert) and
Nixpkgs lib/trivial.nix ``fakeHash``/``fakeSha256``.
"""

from __future__ import annotations

import binascii

from ..errors import EvalError
from ..lib.records import FrozenRecord

__all__ = ["Hash", "parse_hash", "FAKE_SHA256"]

_SIZES = {"sha256": 32, "sha512": 64, "sha1": 20}


class Hash(FrozenRecord):
    """A digest with its algorithm; ``fake`` when the user gave an empty hash (Nix's fakeHash)."""

    __slots__ = ("algo", "digest", "fake")
    algo: str
    digest: bytes
    fake: bool

    def __init__(self, algo: str, digest: bytes, fake: bool = False) -> None:
        self._init(algo, digest, fake)

    @property
    def sri(self) -> str:
        """``sha256-<base64>``: the form to paste into a package file."""
        return f"{self.algo}-{_b64encode(self.digest)}"

    @property
    def hex(self) -> str:
        return self.digest.hex()

    @property
    def nix32(self) -> str:
        from ..store.paths import base32_encode

        return base32_encode(self.digest)

    def new(self) -> "hashlib._Hash":
        """A fresh hashlib object of this algorithm."""
        import hashlib  # on first use: OpenSSL's start-up is 2-4 ms that `cudapkgs list` need not pay

        return hashlib.new(self.algo)

    def __str__(self) -> str:
        return self.sri


#: Nixpkgs' lib.fakeHash: the digest of all zero bytes.
FAKE_SHA256 = Hash("sha256", bytes(32), fake=True)


def parse_hash(text: str | None, *, default_algo: str = "sha256", where: str = "hash") -> Hash:
    """Parse ``text`` in any of Nix's spellings; raise `EvalError` (naming ``where``) when malformed.

    ``None`` or ``""`` gives `FAKE_SHA256` (the fetch then fails, printing the real hash).
    Accepted: ``sha256-<base64>`` (SRI), ``sha256:<hex|base-32|base64>``, or, for
    ``default_algo``, bare hex (64 digits) or Nix base-32 (52 characters).
    """
    if text is None or text == "":
        return FAKE_SHA256 if default_algo == "sha256" else Hash(default_algo, bytes(_SIZES[default_algo]), True)
    if not isinstance(text, str):
        raise EvalError(f"{where}: expected a string such as \"sha256-…\", got {type(text).__name__}")
    algo, body = default_algo, text
    for candidate in _SIZES:
        if text.startswith(candidate + "-"):
            algo, body = candidate, text[len(candidate) + 1:]
            digest = _b64(body)
            break
        if text.startswith(candidate + ":"):
            algo, body = candidate, text[len(candidate) + 1:]
            digest = _any(body, _SIZES[candidate])
            break
    else:
        digest = _any(body, _SIZES[algo])
    if digest is None or len(digest) != _SIZES[algo]:
        raise EvalError(
            f"{where}: {text!r} is not a {algo} hash; write it as Nixpkgs does, e.g. "
            f"\"{algo}-{_b64encode(bytes(_SIZES[algo]))}\" (or \"\" to learn it from the error)"
        )
    return Hash(algo, digest, fake=digest == bytes(len(digest)))


# base64.b64decode(s, validate=True) and b64encode are binascii's a2b_base64(strict_mode=True) and
# b2a_base64 (CPython 3.11+ Lib/base64.py); called directly, a listing does not import base64 and
# struct for the SRI hashes of the sources it makes (docs/eval-cache.md, "Without the cache").
def _b64(body: str) -> bytes | None:
    """`base64.b64decode(body, validate=True)`, None where it raises."""
    try:
        return binascii.a2b_base64(body.encode("ascii"), strict_mode=True)
    except (binascii.Error, ValueError):  # UnicodeEncodeError is a ValueError, as in base64
        return None


def _b64encode(digest: bytes) -> str:
    """`base64.b64encode(digest).decode()`."""
    return binascii.b2a_base64(digest, newline=False).decode("ascii")


def _any(body: str, size: int) -> bytes | None:
    if len(body) == 2 * size:
        try:
            return bytes.fromhex(body)
        except ValueError:
            return None
    if len(body) == (size * 8 - 1) // 5 + 1:
        from ..store.paths import base32_decode

        try:
            return base32_decode(body)
        except ValueError:
            return None
    return _b64(body)
