"""refscan.find_hashes on long data looks at sampled stretches first (`_runs_only`): it must find
exactly what translating the whole data finds, hashes and full store paths alike."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudapkgs.store import refscan
from cudapkgs.store.paths import BASE32_CHARS

B32 = BASE32_CHARS.encode()
PREFIX = b"/tmp/some-store/"
NAME_CHARS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-._?="


def _scan(data: bytes, wanted: refscan.Candidates, *, sampled: bool) -> tuple[set[bytes], dict[bytes, bytes]]:
    """What find_hashes finds in `data`, sampled first or (not `sampled`) translated whole."""
    default = refscan.SAMPLED_FROM
    refscan.SAMPLED_FROM = default if sampled else 1 << 62
    try:
        found: set[bytes] = set()
        named: dict[bytes, bytes] = {}
        refscan.find_hashes(data, wanted, found, PREFIX, named)
    finally:
        refscan.SAMPLED_FROM = default
    return found, named


def _every_window(data: bytes, wanted: frozenset[bytes]) -> set[bytes]:
    found: set[bytes] = set()
    for match in re.finditer(rb"[%s]{32,}" % B32, data):
        run = match.group()
        found.update(run[i : i + 32] for i in range(len(run) - 31))
    return found & wanted


def _hash(rng: random.Random) -> bytes:
    return bytes(rng.choice(B32) for _ in range(32))


def _noise(rng: random.Random, n: int) -> bytes:
    # Machine code and tables: mostly not base-32, a few base-32 bytes scattered.
    return bytes(rng.choice(B32) if rng.random() < 0.1 else rng.choice(b"\x00\x01\xff\x48\x89\x8b\x0f_ ") for _ in range(n))


def test_a_hash_at_every_offset_in_long_noise_is_found_and_little_is_kept():
    rng = random.Random(1)
    hashes = [_hash(rng) for _ in range(8)]
    wanted = refscan.Candidates(h.decode() for h in hashes)
    base = _noise(rng, 40_000)
    for at in range(20_000, 20_000 + 2 * 8 + 1):  # every residue of the sampling stride
        for before, after in ((b"", b""), (b"x", b"y"), (b"\x00", b"-")):
            data = base[:at] + before + hashes[at % 8] + after + base[at:]
            assert _scan(data, wanted, sampled=True)[0] == {hashes[at % 8]}, (at, before, after)
    data = base[:20_000] + hashes[0] + base[20_000:]
    assert len(refscan._runs_only(data, len(PREFIX))) < len(data) // 10  # only the stretches are looked at


def test_a_full_path_with_the_longest_name_is_named_whole():
    rng = random.Random(2)
    wanted = refscan.Candidates(_hash(rng).decode() for _ in range(5))
    stray = _hash(rng)
    name = bytes(rng.choice(NAME_CHARS) for _ in range(211))
    for at in range(30_000, 30_000 + 9):
        data = _noise(rng, at) + PREFIX + stray + b"-" + name + b"\x00" + _noise(rng, 20_000)
        assert _scan(data, wanted, sampled=True) == (set(), {stray: name}), at


def test_dense_text_and_data_without_runs():
    rng = random.Random(3)
    hashes = [_hash(rng) for _ in range(6)]
    wanted = refscan.Candidates(h.decode() for h in hashes)
    words = [b"int", b"char", b"x0", b"namespace", b"cuda", b"31", b"_", b" ", b"\n", b"{", b"}", b"0123456789abcdfghij"]
    text = b"".join(rng.choice(words) for _ in range(20_000))
    data = text[:5000] + hashes[2] + text[5000:] + PREFIX + hashes[4] + b"-name"
    assert _scan(data, wanted, sampled=True) == ({hashes[2], hashes[4]}, {})
    assert refscan._runs_only(b"\x00" * 50_000, 0) == b""


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_sampled_and_whole_agree_on_long_random_data(data):
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    hashes = [_hash(rng) for _ in range(data.draw(st.integers(1, 12)))]
    strays = [_hash(rng) for _ in range(3)]
    wanted = refscan.Candidates(h.decode() for h in hashes)
    parts = []
    size = 0
    while size < data.draw(st.integers(refscan.SAMPLED_FROM, 60_000)):
        kind = rng.random()
        if kind < 0.35:
            part = _noise(rng, rng.randrange(1, 3000))
        elif kind < 0.5:
            part = bytes(rng.choice(B32) for _ in range(rng.randrange(0, 80)))  # runs around 32 long
        elif kind < 0.65:
            part = rng.choice(hashes)[rng.randrange(0, 8):] if rng.random() < 0.3 else rng.choice(hashes)
        elif kind < 0.8:
            part = PREFIX + rng.choice(strays + hashes) + b"-" + bytes(rng.choice(NAME_CHARS) for _ in range(rng.randrange(0, 230)))
        elif kind < 0.9:
            part = bytes([rng.choice(b"0axz")]) * rng.randrange(0, 90)  # padding
        else:
            part = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        parts.append(part)
        size += len(part)
    blob = b"".join(parts)
    sampled = _scan(blob, wanted, sampled=True)
    whole = _scan(blob, wanted, sampled=False)
    assert sampled == whole
    assert sampled[0] == _every_window(blob, wanted)


@pytest.mark.parametrize("size", [refscan.SAMPLED_FROM - 1, refscan.SAMPLED_FROM, refscan.SAMPLED_FROM + 7])
def test_a_hash_in_the_last_bytes_is_found(size):
    rng = random.Random(size)
    h = _hash(rng)
    wanted = refscan.Candidates([h.decode()])
    for tail in range(0, 9):
        data = (b"\x00" * size)[: size - 32 - tail] + h + b"a" * tail
        assert _scan(data, wanted, sampled=True)[0] == {h}, tail
        data = h + b"\x00" * (size - 32)
        assert _scan(data, wanted, sampled=True)[0] == {h}
