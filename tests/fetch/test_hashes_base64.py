"""`fetch.hashes` decodes and writes SRI base64 with binascii (not base64, which a listing then does
not import): the same answers as `base64.b64decode(validate=True)` and `b64encode`, compared by
Hypothesis over valid, padded, unpadded, non-alphabet and non-ASCII text."""

from __future__ import annotations

import base64
import binascii

from hypothesis import given, settings
from hypothesis import strategies as st

from cudapkgs.fetch import hashes


def _reference(body: str) -> bytes | None:
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return None


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(alphabet=_ALPHABET, max_size=90), st.text(alphabet=_ALPHABET + "-_ \n.é\x00", max_size=90),
                 st.binary(max_size=66).map(lambda b: base64.b64encode(b).decode()),
                 st.binary(max_size=66).map(lambda b: base64.b64encode(b).decode().rstrip("="))))
def test_sri_base64_decodes_as_base64_does(body):
    assert hashes._b64(body) == _reference(body)


@given(st.binary(max_size=80))
def test_sri_base64_is_written_as_base64_does(digest):
    assert hashes._b64encode(digest) == base64.b64encode(digest).decode()


def test_parse_hash_reads_each_spelling_and_says_the_sri_form():
    digest = bytes(range(32))
    sri = "sha256-" + base64.b64encode(digest).decode()
    for text in (sri, digest.hex(), "sha256:" + digest.hex(), hashes.parse_hash(sri).nix32):
        parsed = hashes.parse_hash(text)
        assert parsed.digest == digest and parsed.sri == sri
