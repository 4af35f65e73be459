"""Ed25519 keys and signatures in Nix's text forms, through `cryptography`.

Forms (Nix's `SecretKey`/`PublicKey`, NixOS/nix src/libutil/signature/local-keys.cc;
libsodium's secret key is the 32-byte seed followed by the 32-byte public key):

    secret key   <name>:<base64 of 64 bytes: seed + public key>
    public key   <name>:<base64 of 32 bytes>
    signature    <name>:<base64 of the 64-byte ed25519 signature of the fingerprint>

`nix-store --generate-binary-cache-key` writes the same files, so keys move
between Nix and cudapkgs both ways.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import CudapkgsError, redacted

__all__ = ["KeyError_", "PublicKey", "SecretKey", "generate", "trusted_keys"]


class KeyError_(CudapkgsError):  # noqa: N801 - KeyError is a builtin
    """A key is malformed or unreadable; the message names it."""


def _split(text: str, size: int, what: str, whence: str) -> tuple[str, bytes]:
    name, sep, data = text.strip().partition(":")
    if not sep or not name or any(c.isspace() for c in name):
        raise KeyError_(f"{whence}: not a {what} (expected <name>:<base64>)")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise KeyError_(f"{whence}: not a {what} (the part after the name is not base64)") from None
    if len(raw) != size:
        hint = ""
        if what == "public key" and len(raw) == 64:  # Nix's secret key form: seed + public key
            hint = ": a secret key? it stays with the cache; `cudapkgs key public FILE` prints its public key"
        raise KeyError_(f"{whence}: not a {what} ({len(raw)} bytes after decoding, expected {size}{hint})")
    return name, raw


@dataclass(frozen=True)
class PublicKey:
    """An ed25519 public key with its name (e.g. "cache.nixos.org-1")."""

    name: str
    raw: bytes

    @classmethod
    def parse(cls, text: str, whence: str = "public key") -> PublicKey:
        name, raw = _split(text, 32, "public key", whence)
        return cls(name, raw)

    def __str__(self) -> str:
        return f"{self.name}:{base64.b64encode(self.raw).decode()}"

    def verify(self, sig: str, message: bytes) -> bool:
        """Whether `sig` ("name:base64") is this key's signature of `message` (False for another key's name)."""
        from .ed25519 import verify

        name, _, data = sig.partition(":")
        if name != self.name:
            return False
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return False
        if len(raw) != 64:
            return False
        return verify(self.raw, raw, message)


@dataclass(frozen=True)
class SecretKey:
    """An ed25519 secret key in Nix's form; `public` gives its public key."""

    name: str
    seed: bytes
    public_raw: bytes

    @classmethod
    def parse(cls, text: str, whence: str = "secret key") -> SecretKey:
        """Parse "name:base64(seed+public)"; KeyError_ if malformed or the halves do not match."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        name, raw = _split(text, 64, "secret key", whence)
        seed, public = raw[:32], raw[32:]
        derived = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        if derived != public:
            raise KeyError_(f"{whence}: not a secret key (its public half does not belong to its seed)")
        return cls(name, seed, public)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SecretKey:
        """Read a key file (as `cudapkgs key generate` or `nix-store --generate-binary-cache-key` write)."""
        from ...inputs import InputFileError, read_input_file

        try:
            # A regular file only: a FIFO would block the open, a device never end.
            text = read_input_file(path, what="secret key", max_bytes=4096).decode("utf-8")
        except InputFileError as error:
            raise KeyError_(f"cannot read the secret key {os.fspath(path)}: {error.reason}") from None
        except UnicodeDecodeError:
            raise KeyError_(f"{os.fspath(path)}: not a secret key (not text)") from None
        return cls.parse(text, os.fspath(path))

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.name, self.public_raw)

    def __str__(self) -> str:
        return f"{self.name}:{base64.b64encode(self.seed + self.public_raw).decode()}"

    def sign(self, message: bytes) -> str:
        """The signature of `message` as "name:base64"."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        signature = Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)
        return f"{self.name}:{base64.b64encode(signature).decode()}"


def generate(name: str) -> SecretKey:
    """A fresh key pair named `name` (e.g. "lab-cache-1"), from the OS's random source."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

    if not name or ":" in name or any(c.isspace() for c in name):
        raise KeyError_(f"invalid key name {name!r}: no spaces or ':' (e.g. lab-cache-1)")
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return SecretKey(name, seed, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def trusted_keys(texts: Iterable[str], whence: str = "trustedPublicKeys") -> list[PublicKey]:
    """Parse public keys ("name:base64" each, 32 bytes after decoding); `whence` names where they came
    from, as the user spelt it: the setting ``trustedPublicKeys`` or a flag such as
    ``--trusted-public-key``.  Raises KeyError_ naming `whence` and the bad value (`redacted`)."""
    sep = " " if whence.startswith("-") else ": "  # "--trusted-public-key 'x'", "trustedPublicKeys: 'x'"
    return [PublicKey.parse(t, f"{whence}{sep}{redacted(t)}") for t in texts]
