"""`refscan.Scan` read in pieces finds what looking at every 32-byte window of the whole file finds:
a hash across a seam, at the start or end, inside longer base-32 runs, among repeated
characters; with few candidates (one find each) and many (the run index); and the full paths
it names.  Also a file hashed on the second thread (`nar._Sha`) while scanned."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from cudapkgs.store import nar
from cudapkgs.store.paths import BASE32_CHARS
from cudapkgs.store.refscan import MANY, Scan

B32 = BASE32_CHARS.encode()
STORE = "/s/st"
PREFIX = STORE.encode() + b"/"
_NAME = re.compile(rb"[A-Za-z0-9+\-._?=]{0,211}")


def _every_window(data: bytes, wanted: set[bytes]) -> set[bytes]:
    """Every 32-byte window whose characters are all base-32, looked up (Nix's search, naively)."""
    return {data[i : i + 32] for i in range(len(data) - 31) if all(c in B32 for c in data[i : i + 32])} & wanted


def _every_named(data: bytes, wanted: set[bytes]) -> dict[bytes, bytes]:
    """Every ``<prefix><hash>-<name>`` whose hash is not wanted: hash -> the longest name."""
    named: dict[bytes, bytes] = {}
    at = data.find(PREFIX)
    while at != -1:
        h = data[at + len(PREFIX) : at + len(PREFIX) + 32]
        rest = at + len(PREFIX) + 32
        if len(h) == 32 and all(c in B32 for c in h) and data[rest : rest + 1] == b"-" and h not in wanted:
            name = _NAME.match(data, rest + 1).group()
            if h not in named or len(name) > len(named[h]):
                named[h] = name
        at = data.find(PREFIX, at + 1)
    return named


def _hash(draw: st.DrawFn) -> str:
    return draw(st.text(alphabet=BASE32_CHARS, min_size=32, max_size=32))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], bytes, list[int]]:
    many = draw(st.booleans())
    hashes = draw(st.lists(st.text(alphabet=BASE32_CHARS, min_size=32, max_size=32), unique=True,
                           min_size=MANY + 1 if many else 1, max_size=MANY + 8 if many else MANY))
    hashes += [c * 32 for c in draw(st.lists(st.sampled_from("0axz"), max_size=2, unique=True)) if c * 32 not in hashes]
    others = draw(st.lists(st.text(alphabet=BASE32_CHARS, min_size=32, max_size=32), max_size=3))  # not candidates
    part = st.one_of(
        st.sampled_from(hashes).map(str.encode),
        st.sampled_from(hashes).map(lambda h: PREFIX + h.encode() + b"-name"),
        st.tuples(st.sampled_from(hashes), st.integers(0, 32), st.booleans()).map(
            lambda t: t[0].encode()[t[1]:] if t[2] else t[0].encode()[: t[1]]),  # a hash's head or tail
        st.text(alphabet=BASE32_CHARS, max_size=40).map(str.encode),
        st.tuples(st.sampled_from("0axzb"), st.integers(0, 90)).map(lambda t: (t[0] * t[1]).encode()),
        st.just(PREFIX),
        st.binary(max_size=6),
        *([st.tuples(st.sampled_from(others), st.text(alphabet="abc-.", max_size=30)).map(
            lambda t: PREFIX + t[0].encode() + b"-" + t[1].encode())] if others else []),
    )
    blob = b"".join(draw(st.lists(part, max_size=14)))
    cuts = sorted(draw(st.lists(st.integers(0, len(blob)), max_size=8)))
    return hashes, blob, cuts


def _pieces(blob: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *cuts, len(blob)]
    return [blob[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(max_examples=400, deadline=None)
@given(case=cases())
def test_a_file_read_in_pieces_finds_every_window_of_the_whole(case):
    hashes, blob, cuts = case
    wanted = {h.encode() for h in hashes}
    whole = Scan(hashes, STORE)
    whole.text(blob)
    pieces = Scan(nar.Candidates(hashes), STORE)
    pieces.begin_file()
    for piece in _pieces(blob, cuts):
        pieces.chunk(piece)
    expected = _every_window(blob, wanted)
    assert whole.found == expected and pieces.found == expected
    # Every full path of the store that is no candidate is named, as in the whole file; with
    # pieces as `nar` reads them (all but the last long), by its whole name.
    named = _every_named(blob, wanted)
    assert whole.named == named
    assert pieces.named.keys() == named.keys()
    long_cuts: list[int] = []
    for cut in cuts:
        if cut - (long_cuts[-1] if long_cuts else 0) >= len(PREFIX) + 33 + 211:
            long_cuts.append(cut)
    read = Scan(nar.Candidates(hashes), STORE)
    read.begin_file()
    for piece in _pieces(blob, long_cuts):
        read.chunk(piece)
    assert read.found == expected and read.named == named


def test_a_name_split_across_two_reads_is_named_whole():
    hashes = [c * 32 for c in "0123456789abcdfghijklmnpqrsvwxyz"] + ["a" * 31 + "b"]
    other = b"4" * 16 + b"5" * 16
    blob = b"x" * 100 + PREFIX + other + b"-a-rather-long-package-name-1.2.3" + b"\0" * 300
    for wanted in (hashes, hashes[:3]):  # many candidates and few
        for cut in range(90, 200):
            scan = Scan(wanted, STORE)
            scan.begin_file()
            scan.chunk(blob[:cut])
            scan.chunk(blob[cut:])
            assert scan.named == {other: b"a-rather-long-package-name-1.2.3"}, cut


def test_hashes_at_every_seam_of_a_large_file_hashed_on_the_second_thread(tmp_path):
    """Past `_BESIDE_AFTER` the NAR is hashed on a second thread while the reading thread scans:
    hashes at the file's start, its end, across each read boundary, inside a long run."""
    import random

    rng = random.Random(11)
    hashes = ["".join(rng.choice(BASE32_CHARS) for _ in range(32)) for _ in range(MANY + 20)]
    size = nar._BESIDE_AFTER + 3 * nar.CHUNK + 123
    body = bytearray(b"." * size)
    places = {0: hashes[0], size - 32: hashes[1]}
    for k, seam in enumerate(range(nar.CHUNK, size - 64, nar.CHUNK * 5)):
        places[seam - 1 - (k % 31)] = hashes[2 + k % (len(hashes) - 2)]  # straddling the seam
    run_at = nar.CHUNK * 7 - 50
    body[run_at : run_at + 100] = b"z" * 100  # a long base-32 run holding a hash past its start
    places[run_at + 37] = hashes[-1]
    for at, h in places.items():
        body[at : at + 32] = h.encode()
    out = tmp_path / "out"
    out.mkdir()
    (out / "big").write_bytes(bytes(body))
    for wanted in (hashes, hashes[: MANY // 2] + [hashes[1], hashes[-1]]):  # many candidates, and few
        digest, nar_size, found = nar.hash_and_scan(out, nar.Candidates(wanted))
        assert found == set(places.values()) & set(wanted)
        assert (digest, nar_size) == nar.nar_hash(out)  # the dump's digest: the pieces reached the hash in order
