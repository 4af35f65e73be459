"""The many-candidate reference scan (refscan.find_hashes) finds exactly what looking up every 32-byte window finds,
and what the scan it replaced (`_old_windows` below, nar._windows before issue 24 goal 5) found."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudapkgs.store import nar
from cudapkgs.store.paths import BASE32_CHARS
from cudapkgs.store import refscan
from cudapkgs.store.refscan import find_hashes

B32 = BASE32_CHARS.encode()


def _every_window(data: bytes, wanted: frozenset[bytes]) -> set[bytes]:
    found: set[bytes] = set()
    for match in re.finditer(rb"[%s]{32,}" % B32, data):
        run = match.group()
        found.update(run[i : i + 32] for i in range(len(run) - 31))
    return found & wanted


def _old_windows(data: bytes, wanted: frozenset[bytes]) -> set[bytes]:
    """The scan before: maximal runs by translate + find, an 8-byte piece looked up every 24 bytes."""
    mask = data.translate(bytes(1 if c in B32 else 0 for c in range(256)))
    index: dict[bytes, list[tuple[bytes, int]]] = {}
    for candidate in wanted:
        for offset in range(25):
            index.setdefault(candidate[offset : offset + 8], []).append((candidate, offset))
    found: set[bytes] = set()
    start = mask.find(b"\x01" * 32)
    while start != -1:
        end = mask.find(b"\x00", start + 32)
        end = len(data) if end == -1 else end
        run = data[start:end]
        for at in range(0, len(run) - 7, 24):
            for candidate, offset in index.get(run[at : at + 8], ()):
                if 0 <= at - offset <= len(run) - 32 and run.startswith(candidate, at - offset):
                    found.add(candidate)
        start = mask.find(b"\x01" * 32, end)
    return found


def _new(data: bytes, wanted: nar.Candidates) -> set[bytes]:
    found: set[bytes] = set()
    find_hashes(data, wanted, found)
    return found


def _hashes(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(BASE32_CHARS) for _ in range(32)) for _ in range(n)]


def test_a_hash_at_every_offset_of_a_long_run_is_found():
    rng = random.Random(7)
    hashes = _hashes(rng, 40)
    wanted = nar.Candidates(hashes)
    for offset in range(0, 60):
        for tail in (0, 1, 7, 8, 23, 24, 25):
            data = b"/" + b"x" * offset + hashes[offset % 40].encode() + b"x" * tail + b"-"
            assert _new(data, wanted) == {hashes[offset % 40].encode()}, (offset, tail)


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
        assert _new(data, wanted) == _every_window(data, wanted) == _old_windows(data, wanted), data


@pytest.mark.parametrize("count", [refscan.MANY + 1, 32, 100])
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


def test_a_closure_of_candidates_is_scanned_by_runs_not_a_find_each(monkeypatch, tmp_path):
    """A build's closure (torch's: 32 hash parts) goes through the runs: a find per candidate cost 20x more."""
    rng = random.Random(5)
    hashes = _hashes(rng, 32)
    (tmp_path / "f").write_bytes(b"x" + hashes[3].encode() + b"x")
    calls = []
    real = refscan.find_hashes
    monkeypatch.setattr(refscan, "find_hashes", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert nar.hash_and_scan(tmp_path, nar.Candidates(hashes))[2] == {hashes[3]}
    assert calls


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_new_scan_agrees_with_the_old_one_on_random_bytes(data):
    # Hashes overlapping one another and long runs around them: where a strided piece index
    # could miss a window (a hash at every residue of the stride, runs just over 32 long).
    hashes = data.draw(st.lists(st.text(alphabet=BASE32_CHARS, min_size=32, max_size=32), min_size=33, max_size=60, unique=True))
    hashes += [c * 32 for c in data.draw(st.lists(st.sampled_from("0axz"), max_size=2, unique=True))]  # one repeated character
    wanted = nar.Candidates(hashes)
    part = st.one_of(
        st.sampled_from(hashes).map(str.encode),
        st.tuples(st.sampled_from(hashes), st.integers(0, 31), st.booleans()).map(
            lambda t: t[0].encode()[t[1]:] if t[2] else t[0].encode()[: t[1]]),  # a hash's head or tail
        st.text(alphabet=BASE32_CHARS, max_size=40).map(str.encode),
        st.tuples(st.sampled_from("0axzb"), st.integers(0, 90)).map(lambda t: (t[0] * t[1]).encode()),  # padding
        st.binary(max_size=6),
    )
    blob = b"".join(data.draw(st.lists(part, max_size=12)))
    assert _new(blob, wanted) == _old_windows(blob, wanted) == _every_window(blob, wanted)


def test_pieces_are_built_once_and_a_long_run_of_other_characters_finds_nothing():
    rng = random.Random(5)
    wanted = nar.Candidates(_hashes(rng, 50))
    assert wanted.pieces() is wanted.pieces() and len(wanted.pieces()) <= 50 * 9
    # A long run of one character: no candidate shares a piece with it, nothing found.
    assert _new(b"x" * 5000, wanted) == set()


def test_a_run_of_one_repeated_character_finds_exactly_that_hash():
    wanted = nar.Candidates(["a" * 32, "0" * 32] + _hashes(random.Random(9), 40))
    assert _new(b"/" + b"a" * 100 + b"-", wanted) == {b"a" * 32}
    assert _new(b"a" * 31 + b"-" + b"a" * 31, wanted) == set()
    assert _new(b"0" * 33 + b"x" + b"b" * 90, wanted) == {b"0" * 32}
