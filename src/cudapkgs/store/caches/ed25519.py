"""Ed25519 signature checks with the OpenSSL that `hashlib` has loaded already, else `cryptography`.

Checking a narinfo's signature is all a substitution needs of public-key cryptography.
Importing `cryptography` for it cost 7 MiB of resident memory and tens of milliseconds per
process (its Rust module and its own OpenSSL); `hashlib`'s libcrypto (OpenSSL 3: the
``EVP_DigestVerify`` one-shot for Ed25519, RFC 8032, as `cryptography` calls it) is mapped in
every process already. Where it is not found (another libcrypto, no ``/proc``), `cryptography`
checks it as before. Either answers exactly whether the signature verifies.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["verify"]

_NID_ED25519 = 1087  # openssl/obj_mac.h: NID_ED25519 (EVP_PKEY_ED25519)
_lib: Any = None
_tried = False
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # A lock held by a parent's thread at fork() is never released in the child: a lock of its own.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _libcrypto() -> Any:
    """hashlib's libcrypto.so.3 through ctypes, with the five functions typed; None when not found."""
    global _lib, _tried
    with _lock:
        if _tried:
            return _lib
        _tried = True
        try:
            import ctypes
            import hashlib  # noqa: F401  (maps libcrypto)

            path = None
            with open("/proc/self/maps") as maps:
                for line in maps:
                    name = line.rsplit(None, 1)[-1] if line.count(" ") >= 5 else ""
                    if "/libcrypto.so.3" in name:
                        path = name
                        break
            if path is None:
                return None
            lib = ctypes.CDLL(path)
            p, size = ctypes.c_void_p, ctypes.c_size_t
            lib.EVP_PKEY_new_raw_public_key.restype = p
            lib.EVP_PKEY_new_raw_public_key.argtypes = [ctypes.c_int, p, ctypes.c_char_p, size]
            lib.EVP_MD_CTX_new.restype = p
            lib.EVP_MD_CTX_new.argtypes = []
            lib.EVP_DigestVerifyInit.restype = ctypes.c_int
            lib.EVP_DigestVerifyInit.argtypes = [p, p, p, p, p]
            lib.EVP_DigestVerify.restype = ctypes.c_int
            lib.EVP_DigestVerify.argtypes = [p, ctypes.c_char_p, size, ctypes.c_char_p, size]
            lib.EVP_MD_CTX_free.restype = None
            lib.EVP_MD_CTX_free.argtypes = [p]
            lib.EVP_PKEY_free.restype = None
            lib.EVP_PKEY_free.argtypes = [p]
            lib.ERR_clear_error.restype = None
            lib.ERR_clear_error.argtypes = []
            _lib = lib
        except (OSError, AttributeError, ImportError):
            _lib = None
        return _lib


def verify(public: bytes, signature: bytes, message: bytes) -> bool:
    """Whether `signature` (64 bytes) is a valid Ed25519 signature of `message` by `public` (32 bytes)."""
    if len(public) != 32 or len(signature) != 64:
        return False
    lib = _libcrypto()
    if lib is None:
        return _verify_cryptography(public, signature, message)
    key = lib.EVP_PKEY_new_raw_public_key(_NID_ED25519, None, public, 32)
    if not key:
        lib.ERR_clear_error()
        return False  # not a point on the curve
    ctx = lib.EVP_MD_CTX_new()
    try:
        if not ctx or lib.EVP_DigestVerifyInit(ctx, None, None, None, key) != 1:
            lib.ERR_clear_error()
            return _verify_cryptography(public, signature, message)
        ok = lib.EVP_DigestVerify(ctx, signature, 64, message, len(message)) == 1
        if not ok:
            lib.ERR_clear_error()
        return ok
    finally:
        if ctx:
            lib.EVP_MD_CTX_free(ctx)
        lib.EVP_PKEY_free(key)


def _verify_cryptography(public: bytes, signature: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
