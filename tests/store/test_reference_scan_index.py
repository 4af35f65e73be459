"""The many-candidate reference scan (nar._windows) finds exactly what looking up every 32-byte window finds."""

from __future__ import annotations

import random
import re

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


def test_a_stray_reference_split_across_chunks_is_found_with_many_candidates(tmp_path):
    rng = random.Random(3)
    hashes = _hashes(rng, 100)
    out = tmp_path / "out"
    out.mkdir()
    # Far past the first chunk, so the hash straddles a read boundary.
    body = b"y" * (nar.CHUNK - 13) + hashes[57].encode() + b"y" * 100
    (out / "blob").write_bytes(body)
    _digest, _size, found = nar.hash_and_scan(out, nar.Candidates(hashes))
    assert found == {hashes[57]}


def _every_run(data: bytes) -> list[tuple[int, bytes]]:
    return [(m.start(), m.group()) for m in re.finditer(rb"[%s]{32,}" % B32, data)]


def test_sampled_runs_agree_with_a_regular_expression_on_sparse_and_dense_chunks():
    """`_runs` looks at every 8th byte first in binary data (sparse runs), and at all of a text-like chunk."""
    rng = random.Random(11)
    for dense in (False, True):
        for _ in range(6):
            if dense:
                data = bytearray(bytes(rng.choice(B32 + b" \n/-") for _ in range(1 << 18)))
            else:
                data = bytearray(rng.randrange(256) for _ in range(1 << 18))
                for _ in range(rng.randrange(1, 40)):  # runs of 30 to 40 base-32 characters at every alignment
                    at = rng.randrange(len(data) - 64)
                    data[at : at + 40] = bytes(rng.choice(B32) for _ in range(rng.randrange(30, 41))).ljust(40, b"\0")
            data = bytes(data)
            assert list(nar._runs(data)) == _every_run(data)
    # a hash at each of the 8 sample alignments, alone in binary data, is found
    for offset in range(16):
        data = b"\0" * (4096 + offset) + B32[:32] + b"\0" * 4096
        assert list(nar._runs(data)) == [(4096 + offset, B32[:32])]
