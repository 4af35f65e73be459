"""The narinfo signature check through hashlib's OpenSSL agrees with `cryptography` on good and bad signatures."""

from __future__ import annotations

import os
import random

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from cudapkgs.store.caches import ed25519


def test_hashlibs_openssl_is_found_where_it_is_mapped():
    """Where hashlib's libcrypto.so.3 is mapped (Linux, /proc), signatures are checked with it, not cryptography."""
    import hashlib  # noqa: F401

    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        pytest.skip("no /proc/self/maps here")
    if "/libcrypto.so.3" not in maps:
        pytest.skip("hashlib is not linked with libcrypto.so.3 here: cryptography checks signatures")
    assert ed25519._libcrypto() is not None


def test_both_agree_on_valid_tampered_and_foreign_signatures():
    rng = random.Random(5)
    for _ in range(60):
        key = Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        message = os.urandom(rng.randrange(0, 300))
        signature = key.sign(message)
        cases = [(public, signature, message)]
        flipped = bytearray(signature)
        flipped[rng.randrange(64)] ^= 1 << rng.randrange(8)
        cases.append((public, bytes(flipped), message))
        if message:
            changed = bytearray(message)
            changed[rng.randrange(len(message))] ^= 1
            cases.append((public, signature, bytes(changed)))
        other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        cases.append((other, signature, message))
        cases.append((os.urandom(32), signature, message))  # most random bytes are no point on the curve
        cases.append((public, signature[:32] + b"\xff" * 32, message))  # S out of range
        for case in cases:
            assert ed25519.verify(*case) == ed25519._verify_cryptography(*case)
        assert ed25519.verify(public, signature, message) is True
        assert ed25519.verify(public, bytes(flipped), message) is False


def test_wrong_lengths_are_false():
    assert ed25519.verify(b"\0" * 31, b"\0" * 64, b"") is False
    assert ed25519.verify(b"\0" * 32, b"\0" * 63, b"") is False
