"""The many-candidate reference scan (nar._windows) finds exactly what looking up every 32-byte window finds."""

from __future__ import annotations

import random
import re

import pytest

from cudapkgs.store import nar
from cudapkgs.store.paths import BASE32_CHARS

B32 = BASE32_CHARS.encode()


def _every_window(data: bytes, wanted: frozenset[bytes]) -> set[bytes]:
    found: set[bytes] = set()
    for match in re.finditer(rb"[%s]{32,}" % B32, data):
        run = match.group()
        found.update(run[i : i + 32] for i in range(len(run) - 31))
    return found & wanted


def _hashes(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(BASE32_CHARS) for _ in range(32)) for _ in range(n)]


def test_a_hash_at_every_offset_of_a_long_run_is_found():
    rng = random.Random(7)
    hashes = _hashes(rng, 40)
    wanted = nar.Candidates(hashes)
    for offset in range(0, 60):
        for tail in (0, 1, 7, 8, 23, 24, 25):
            data = b"/" + b"x" * offset + hashes[offset % 40].encode() + b"x" * tail + b"-"
            assert nar._windows(data, wanted) == {hashes[offset % 40].encode()}, (offset, tail)


def test_random_data_agrees_with_every_window():
    rng = random.Random(24)
    for _ in range(400):
        hashes = _hashes(rng, rng.randrange(33, 50))
        wanted = nar.Candidates(hashes)
        parts = []
        for _ in range(rng.randrange(1, 8)):
            kind = rng.random()
            if kind < 0.4:
                parts.append(rng.choice(hashes).encode()[: rng.choice((32, 32, 31, 20))])
            elif kind < 0.7:
                parts.append(bytes(rng.choice(B32) for _ in range(rng.randrange(0, 70))))
            else:
                parts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 10))))
        data = b"".join(parts)
        assert nar._windows(data, wanted) == _every_window(data, wanted), data


@pytest.mark.parametrize("count", [nar._MANY + 1, 32, 100])
def test_a_stray_reference_split_across_chunks_is_found_with_many_candidates(tmp_path, count):
    rng = random.Random(3)
    hashes = _hashes(rng, count)
    stray = hashes[count // 2]
    out = tmp_path / "out"
    out.mkdir()
    # Far past the first chunk, so the hash straddles a read boundary.
    body = b"y" * (nar.CHUNK - 13) + stray.encode() + b"y" * 100
    (out / "blob").write_bytes(body)
    (out / "other").write_bytes(b"no hash here " * 1000)
    _digest, _size, found = nar.hash_and_scan(out, nar.Candidates(hashes))
    assert found == {stray}


def test_the_scan_with_a_closure_of_candidates_takes_the_runs_not_a_find_each(monkeypatch, tmp_path):
    """A closure's few dozen hashes go through `_windows` (a find per candidate cost 20x more on torch)."""
    rng = random.Random(5)
    hashes = _hashes(rng, 32)
    (tmp_path / "f").write_bytes(b"x" + hashes[3].encode() + b"x")
    calls = []
    real = nar._windows
    monkeypatch.setattr(nar, "_windows", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert nar.hash_and_scan(tmp_path, nar.Candidates(hashes))[2] == {hashes[3]}
    assert calls
