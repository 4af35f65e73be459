"""A few candidates in binary data: `Scan.text` takes `find_hashes` (sampled) there, and finds what the
per-candidate search finds, hashes and full store paths alike, across the seams of pieces too."""

from __future__ import annotations

import random

import pytest

from cudapkgs.store import refscan
from cudapkgs.store.paths import BASE32_CHARS

B32 = BASE32_CHARS
STORE = "/tmp/some-store"


def _hash(rng: random.Random) -> str:
    return "".join(rng.choice(B32) for _ in range(32))


def _binary(rng: random.Random, size: int, wanted: list[str], others: list[str]) -> bytes:
    """Binary-looking bytes (mostly zeros and high bytes) with hashes, full paths and long runs planted."""
    data = bytearray(rng.choice((0, 0, 0, 0x48, 0x89, 0xff, rng.randrange(256))) for _ in range(size))
    plants = [w.encode() for w in wanted[:2]]
    plants += [f"{STORE}/{h}-libfoo-1.0/lib\0".encode() for h in others]  # full paths, not candidates
    plants += [f"{STORE}/{wanted[2]}-bar".encode()]  # a candidate spelt out in full
    plants += [b"x" + wanted[3].encode() + b"kq"]  # inside a longer base-32 run
    plants += [b"0" * 80]  # padding
    for plant in plants:
        at = rng.randrange(0, size - len(plant))
        data[at : at + len(plant)] = plant
    return bytes(data)


def _scan(data: bytes, wanted: list[str], piece: int, sparse: bool, monkeypatch) -> tuple[set[str], dict[str, str]]:
    monkeypatch.setattr(refscan, "SPARSE_FROM", refscan.SPARSE_FROM if sparse else 1 << 62)
    scan = refscan.Scan(wanted, store_dir=STORE)
    assert not scan.many
    scan.begin_file()
    for at in range(0, len(data), piece):
        scan.chunk(data[at : at + piece])
    return scan.results()


@pytest.mark.parametrize("seed", range(6))
def test_binary_pieces_give_what_the_per_candidate_search_gives(seed, monkeypatch):
    rng = random.Random(seed)
    wanted = [_hash(rng) for _ in range(5)]
    others = [_hash(rng) for _ in range(3)]
    data = _binary(rng, 3 << 18, wanted, others)
    for piece in (1 << 18, 100_003):
        sparse = _scan(data, wanted, piece, True, monkeypatch)
        assert sparse == _scan(data, wanted, piece, False, monkeypatch)
        found, named = sparse
        assert set(wanted[:4]) <= found and wanted[4] not in found
        assert set(named) == set(others) and all(v == "libfoo-1.0" for v in named.values())


def test_binary_data_is_scanned_sampled_and_text_per_candidate(monkeypatch):
    rng = random.Random(7)
    wanted = [_hash(rng) for _ in range(5)]
    calls = []
    real = refscan.find_hashes
    monkeypatch.setattr(refscan, "find_hashes", lambda *a, **k: calls.append(len(a[0])) or real(*a, **k))
    scan = refscan.Scan(wanted, store_dir=STORE)
    scan.text(_binary(rng, 1 << 18, wanted, []))
    assert calls  # the old code searched binary data once per candidate, then with the regex
    calls.clear()
    text = ("def f(x):\n    return x + 1  # a comment, " + wanted[0] + "\n").encode() * 4000
    scan.text(text)
    assert not calls and wanted[0] in scan.results()[0]
