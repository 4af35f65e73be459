"""Store path names: Nix base-32, hash compression and path parsing."""

from __future__ import annotations

import os
import sys

from ..errors import StoreError
from ..lib.patterns import LazyPattern

#: Nix's base-32 alphabet: digits and lower-case letters without e, o, u, t.
BASE32_CHARS = "0123456789abcdfghijklmnpqrsvwxyz"
HASH_BYTES = 20
#: Length of the hash part of a store path's base name.
HASH_LEN = 32

_NAME_RE = LazyPattern(r"[A-Za-z0-9+\-._?=]+")
_HASH_RE = LazyPattern(f"[{BASE32_CHARS}]{{{HASH_LEN}}}")
_BASE32_INDEX = {c: i for i, c in enumerate(BASE32_CHARS)}
_PAIRS = [BASE32_CHARS[i >> 5] + BASE32_CHARS[i & 0x1F] for i in range(1024)]
_TO_PYTHON_DIGITS = bytes(b"0123456789abcdefghijklmnopqrstuv"[BASE32_CHARS.index(chr(c))] if chr(c) in BASE32_CHARS else 0x21
                          for c in range(256))  # 0x21 ('!') is no digit: int() refuses the string


def base32_encode(data: bytes) -> str:
    """Encode bytes in Nix base-32 (least significant 5-bit group last, as Nix prints it).

    Nix's printHash32 (libutil/hash.cc) takes 5-bit group n from bits 5n..5n+4 of the bytes
    read as one little-endian number; the groups are read off that number two at a time
    (a table of the 1,024 two-character strings: half the shifts of one per character;
    `verify` encodes hashes per path; tests compare it with the digit-by-digit definition).
    """
    length = (len(data) * 8 - 1) // 5 + 1 if data else 0
    number = int.from_bytes(data, "little")
    pairs = _PAIRS
    text = "".join([pairs[(number >> shift) & 0x3FF] for shift in range(10 * (length // 2) - 10, -1, -10)])
    return BASE32_CHARS[number >> (5 * length - 5)] + text if length % 2 else text


def base32_equals(text: str, data: bytes) -> bool:
    """Whether `text` is exactly `base32_encode(data)`, without encoding: `int(..., 32)` reads the digits.

    Nix base-32 is the number written most significant digit first in its own alphabet, so
    mapping that alphabet onto Python's digits 0-9a-v (and every other character onto one
    `int` refuses) and comparing numbers is comparing strings of the same length.
    """
    if len(text) != ((len(data) * 8 - 1) // 5 + 1 if data else 0):
        return False
    if not data:
        return True
    try:
        return int(text.encode("ascii").translate(_TO_PYTHON_DIGITS), 32) == int.from_bytes(data, "little")
    except (UnicodeEncodeError, ValueError):
        return False


def base32_decode(text: str) -> bytes:
    """Inverse of `base32_encode`; raises ValueError on a malformed string."""
    size = len(text) * 5 // 8
    out = bytearray(size)
    for n, char in enumerate(reversed(text)):
        try:
            digit = _BASE32_INDEX[char]
        except KeyError:
            raise ValueError(f"invalid character {char!r} in Nix base-32 string") from None
        bit = n * 5
        i, j = divmod(bit, 8)
        if i < size:
            out[i] |= (digit << j) & 0xFF
        elif digit << j & 0xFF:
            raise ValueError("Nix base-32 string has excess bits")
        carry = digit >> (8 - j)
        if i + 1 < size:
            out[i + 1] |= carry
        elif carry:
            raise ValueError("Nix base-32 string has excess bits")
    return bytes(out)


def compress_hash(digest: bytes, size: int = HASH_BYTES) -> bytes:
    """XOR-fold `digest` into `size` bytes, as Nix's `compressHash` does."""
    out = bytearray(size)
    for i, byte in enumerate(digest):
        out[i % size] ^= byte
    return bytes(out)


def check_name(name: str) -> str:
    """Return `name` if it is a valid store path name, else raise StoreError."""
    if not name or len(name) > 211 or name.startswith(".") or not _NAME_RE.fullmatch(name):
        raise StoreError(
            f"invalid store path name {name!r}: use letters, digits and + - . _ ? = "
            "(not starting with '.', at most 211 characters)"
        )
    return name


# sha256 of the small strings an evaluation hashes (derivations, store path fingerprints) without
# importing hashlib: OpenSSL's start-up (`_hashlib`, about 4 ms) is most of what an `eval` of an
# outPath would spend on hashing.  CPython's own sha256 (`_sha256`, `_sha2` from 3.12) gives the
# same digests but is about 6x slower per byte, so it is used for the first `_BUILTIN_BUDGET`
# bytes of a process only, and never once hashlib is loaded (by anything).
_BUILTIN_BUDGET = 256 << 10
_builtin_left = [_BUILTIN_BUDGET]


def _builtin_sha256() -> object:
    try:
        from _sha256 import sha256 as builtin  # CPython 3.11
    except ImportError:
        try:
            from _sha2 import sha256 as builtin  # CPython 3.12 and later
        except ImportError:
            return None
    return builtin


_BUILTIN_SHA256 = _builtin_sha256()


def sha256(data: bytes) -> object:
    """A sha256 object of `data` (``.digest()``, ``.hexdigest()``), as ``hashlib.sha256(data)``."""
    if _BUILTIN_SHA256 is not None and "hashlib" not in sys.modules and len(data) <= _builtin_left[0]:
        _builtin_left[0] -= len(data)
        return _BUILTIN_SHA256(data)
    import hashlib

    return hashlib.sha256(data)


def make_store_path_from_digest(store_dir: str | os.PathLike[str], kind: str, sha256_hex: str, name: str) -> str:
    """The store path for an inner sha256 (hex), like Nix's `makeStorePath`.

    The fingerprint is "<kind>:sha256:<hex>:<store dir>:<name>"; its sha256,
    compressed to 160 bits and base-32 encoded, is the path's hash part.
    """
    store_dir = os.fspath(store_dir)
    check_name(name)
    fingerprint = f"{kind}:sha256:{sha256_hex}:{store_dir}:{name}"
    digest = compress_hash(sha256(fingerprint.encode()).digest())
    return f"{store_dir}/{base32_encode(digest)}-{name}"


def make_store_path(store_dir: str | os.PathLike[str], kind: str, digest_input: str | bytes, name: str) -> str:
    """The store path whose inner hash is sha256(`digest_input`); see `make_store_path_from_digest`."""
    if isinstance(digest_input, str):
        digest_input = digest_input.encode()
    return make_store_path_from_digest(store_dir, kind, sha256(digest_input).hexdigest(), name)


def is_hash_part(text: str) -> bool:
    """Whether `text` is a 32-character Nix base-32 hash."""
    return bool(_HASH_RE.fullmatch(text))


def _other_store_hint(text: str, store_dir: str) -> str:
    """For a path outside the store in use: when it names a store path of another directory
    (``<dir>/<32-char hash>-<name>[/…]``) of a cudapkgs store (``<dir>/.meta/db.sqlite`` is a file: one
    stat, nothing opened), the hint to use that
    store (a new user followed a ``result`` link of a private store into the default one's command).

    A path inside a store path of `store_dir` itself (``parse_store_path`` takes store paths only) is
    told to name that store path: the hint said "it is a path of the store S: pass --store S" of the
    store in use.  The directory is shown escaped (`errors.shown`) and, in the command to paste, as one
    shell word (`errors.shell_word`): a directory a cloned repository or an archive named could add a
    line to the message or a command to what the user pastes."""
    from ..errors import shell_word, shown

    parts = text.split("/")
    for i in range(1, len(parts)):  # the outermost: a store path may hold names shaped like one
        hash_part, dash, name = parts[i].partition("-")
        if dash and name and is_hash_part(hash_part):
            other = "/".join(parts[:i]) or "/"
            if other == store_dir:
                return f" (it lies inside the store path {shown(other + '/' + parts[i])}: name that path)"
            if not os.path.isfile(os.path.join(other, ".meta", "db.sqlite")):
                return ""  # not a cudapkgs store here (a path typed from Nix's docs): no guess
            return f" (it is a path of the store {shown(other)}: pass --store {shell_word(other)}, or set CUDAPKGS_STORE)"
    return ""


def parse_store_path(store_dir: str | os.PathLike[str], path: str | os.PathLike[str]) -> tuple[str, str]:
    """Split a store path into (hash, name); raise StoreError if it is not one.

    A path inside a store path (`<store>/<hash>-foo/bin/x`) is not accepted:
    use `to_store_path` for those.
    """
    store_dir = os.fspath(store_dir).rstrip("/") or "/"
    text = os.path.normpath(os.path.abspath(os.fspath(path)))
    parent, base = os.path.split(text)
    if parent != store_dir:
        raise StoreError(f"path '{os.fspath(path)}' is not in the store {store_dir}{_other_store_hint(text, store_dir)}")
    hash_part, dash, name = base.partition("-")
    if not dash or not is_hash_part(hash_part):
        raise StoreError(f"path '{os.fspath(path)}' is not a store path (expected {store_dir}/<32-char hash>-<name>)")
    check_name(name)
    return hash_part, name


def to_store_path(store_dir: str | os.PathLike[str], path: str | os.PathLike[str]) -> str:
    """The store path that contains `path` (which may lie inside a store path)."""
    store_dir = os.fspath(store_dir).rstrip("/") or "/"
    text = os.path.normpath(os.path.abspath(os.fspath(path)))
    prefix = store_dir + "/"
    if not text.startswith(prefix):
        raise StoreError(f"path '{os.fspath(path)}' is not in the store {store_dir}{_other_store_hint(text, store_dir)}")
    base = text[len(prefix):].split("/", 1)[0]
    candidate = prefix + base
    parse_store_path(store_dir, candidate)
    return candidate


def hash_part(path: str) -> str:
    """The 32-character hash part of a store path's base name."""
    return os.path.basename(path)[:HASH_LEN]
