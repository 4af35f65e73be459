"""Finding store-path hash parts in bytes (file contents, symlink targets), as Nix's reference scan does.

Nix (libstore/references.cc, `search`) looks at every 32-byte window of the scanned bytes
whose characters are all Nix base-32 and asks whether it is the hash part of a candidate
path. Here the same answer comes from C-speed operations:

* `bytes.translate` maps each byte to 1 (base-32) or 0 and `find` looks for 32 ones: a
  window can only lie inside a *run* of base-32 characters at least 32 long;
* a run of exactly 32 is one set lookup (the common case: ``<store>/<hash>-<name>``);
* a longer run of one repeated character (padding, ``000…``) has one distinct window;
* any other longer run is first tested with a few lookups of `KEY`-byte pieces taken every
  `STRIDE` bytes against the set of every candidate's pieces at offsets 0 to STRIDE - 1
  (`Candidates.pieces`, built once): any 32-byte window holds one such piece at one of
  those offsets. Only a run that shares a piece with some candidate has its windows looked
  up one by one, so the work stays linear in the bytes whatever they hold.

Data of `SAMPLED_FROM` bytes or more is first sampled (`_runs_only`): every 8th byte, one
`translate` of that eighth; a run of 32 or more holds 4 sampled base-32 bytes in a row, so only
the stretches around such places are joined (NUL between them) and looked at as above. On the
CUDA compile closure's 399 MiB this kept 27 MiB and cost 0.24 s of CPU against 0.43-0.55 s for
one `translate` of everything; text dense with such places is looked at whole.

Against a few candidates (up to `MANY`) one `bytes.find` per candidate is faster; a closure's hash
parts when a build registers torch's outputs (32) are many. `Scan` picks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from .paths import BASE32_CHARS, HASH_LEN

__all__ = ["Candidates", "Scan", "find_hashes"]

# Above this many candidates the base-32 runs are looked up instead of one find per candidate.
# Measured on torch's 1.2 GB output against its 32 closure hashes (a build's registration):
# 32 finds 4.7 s CPU over the hash's 1.6 s, the runs 0.25 s. On cuda_nvcc's 216 MiB of ELF
# files (its registration scans for 4 hashes), 256 KiB reads, CPU seconds: one find per
# candidate 0.056 (1), 0.19 (4), 0.25 (6), 0.34 (8); the runs 0.30-0.36 whatever their number:
# the translate alone is 0.19, the price of about four finds, and the runs' search in its
# mask about as much again.
MANY = 6
KEY = 24  # bytes of a piece
STRIDE = HASH_LEN + 1 - KEY  # 9: every 32-byte window holds a stride position with KEY bytes after it inside the window

_MASK = bytes(1 if chr(c) in BASE32_CHARS else 0 for c in range(256))
_ONES = b"\x01" * HASH_LEN
_NAME_MAX = 211  # characters of a store path's name
_NAME_AT = re.compile(rb"[A-Za-z0-9+\-._?=]{0,211}")  # a store path's name (Nix's allowed characters)
_NAMED_RE: dict[bytes, re.Pattern[bytes]] = {}
# The KEY bytes at offsets 0, STRIDE, 2 * STRIDE, ... of a run, taken by `findall` at C speed: each
# match consumes STRIDE bytes and captures the KEY bytes from its start by a lookahead.
_STRIDE_PIECES = re.compile(rb"(?=(.{%d})).{%d}" % (KEY, STRIDE), re.DOTALL)
#: Data at least this long is sampled first (`_runs_only`); shorter data is translated whole.
SAMPLED_FROM = 1 << 13
_SAMPLE = 8  # every 8th byte: a run of HASH_LEN holds HASH_LEN // _SAMPLE sampled bytes in a row
_SAMPLED_RUN = b"\x01" * (HASH_LEN // _SAMPLE)
# More sampled places than one per this many bytes: translating the whole data is cheaper than the stretches.
_DENSE = 2000


class Candidates(frozenset):  # type: ignore[type-arg]
    """Store-path hash parts (32-character str) encoded once, for many scans.

    `verify` scans every valid path for every valid path's hash part: encoding the N
    candidates once per scanned path made it quadratic in the store size. Build one
    ``Candidates(hashes)`` and pass it to every scan instead.
    """

    def __new__(cls, hashes: Iterable[str] = ()) -> Candidates:
        return super().__new__(cls, (h.encode() for h in hashes))

    def pieces(self) -> frozenset[bytes]:
        """Every `KEY`-byte piece of every candidate at offsets 0 to STRIDE - 1, built once (N * STRIDE entries)."""
        built = self.__dict__.get("_pieces")
        if built is None:
            built = frozenset({c[o : o + KEY] for c in self for o in range(STRIDE)})
            self.__dict__["_pieces"] = built
        return built


def _named_pattern(prefix: bytes) -> re.Pattern[bytes]:
    """The regex of a store path under `prefix` (``<store_dir>/``) as files spell it: ``<prefix><hash>-<name>``."""
    pattern = _NAMED_RE.get(prefix)
    if pattern is None:
        pattern = re.compile(re.escape(prefix) + rb"([%s]{%d})-([A-Za-z0-9+\-._?=]{0,211})" % (BASE32_CHARS.encode(), HASH_LEN))
        _NAMED_RE[prefix] = pattern
    return pattern


def find_hashes(data: bytes, wanted: Candidates, found: set[bytes], prefix: bytes | None = None,
                named: dict[bytes, bytes] | None = None) -> None:
    """Add to `found` the members of `wanted` that occur in `data` (every 32-byte window, as Nix looks).

    With `prefix` (``<store_dir>/``) and `named`, also note in `named` every store path spelt
    out in full, ``<prefix><hash>-<name>``, whose hash is not in `wanted` (hash part -> the
    longest name seen): a path that is not valid at all, which no candidate list names.
    A member of `wanted` spelt out so is in `found` already.
    """
    if len(data) >= SAMPLED_FROM:
        data = _runs_only(data, 0 if named is None else len(prefix))  # type: ignore[arg-type]
    mask = data.translate(_MASK)
    start = mask.find(_ONES)
    if start == -1:
        return
    pieces: frozenset[bytes] | None = None
    while start != -1:
        end = mask.find(b"\x00", start + HASH_LEN)
        if end == -1:
            end = len(data)
        run = data[start:end]
        length = end - start
        if length == HASH_LEN:
            if run in wanted:
                found.add(run)
            elif named is not None and data.endswith(prefix, 0, start) and data[end : end + 1] == b"-":  # type: ignore[arg-type]
                name = _NAME_AT.match(data, end + 1).group()  # type: ignore[union-attr]
                if len(name) > len(named.get(run, b"")) or run not in named:
                    named[run] = name
        elif run.count(run[:1]) == length:  # one character repeated (padding, "000..."): one window
            if run[:HASH_LEN] in wanted:
                found.add(run[:HASH_LEN])
        else:
            if pieces is None:
                pieces = wanted.pieces()
            if not pieces.isdisjoint(_STRIDE_PIECES.findall(run)):
                found.update(w for w in (run[s : s + HASH_LEN] for s in range(length - HASH_LEN + 1)) if w in wanted)
        start = mask.find(_ONES, end)


def _runs_only(data: bytes, before: int) -> bytes:
    """The stretches of `data` that can hold a base-32 run of HASH_LEN or more, NUL between them.

    Every `_SAMPLE`th byte is looked at first: a run of HASH_LEN or more holds HASH_LEN // _SAMPLE
    sampled base-32 bytes in a row, and lies between the sampled bytes that end that row (which
    are not base-32). Each such stretch is kept whole with `before` bytes ahead of it (the
    store-directory prefix of a full path) and the longest name after it, and overlapping
    stretches are merged, so every run of HASH_LEN or more is in the result exactly as in `data`
    (with what precedes and follows it as far as `find_hashes` looks), and the result has no
    other run that long (NUL is not base-32; a run cut at a stretch's edge is shorter than
    HASH_LEN: a longer one would be a stretch of its own, merged with this one). `data` itself
    when sampled places are dense (text), b"" when there are none.
    """
    sampled = data[::_SAMPLE].translate(_MASK)
    i = sampled.find(_SAMPLED_RUN)
    if i == -1:
        return b""
    after = 1 + _NAME_MAX + 1  # the '-' and a name after the run, one byte of margin
    last = len(sampled)
    most = len(data) // _DENSE  # more places than this: the whole data is cheaper
    pieces = []
    lo = max(0, _SAMPLE * (i - 1) + 1 - before)
    j = sampled.find(b"\x00", i)
    hi = _SAMPLE * (last if j == -1 else j) + after
    while j != -1:
        i = sampled.find(_SAMPLED_RUN, j)
        if i == -1:
            break
        most -= 1
        if most < 0:
            return data
        start = _SAMPLE * (i - 1) + 1 - before
        if start > hi:
            pieces.append(data[lo:hi])
            lo = start
        j = sampled.find(b"\x00", i)
        hi = _SAMPLE * (last if j == -1 else j) + after
    pieces.append(data[lo:hi])
    return pieces[0] if len(pieces) == 1 else b"\x00".join(pieces)


#: Data this long or longer is looked at for `_sparse` (pieces of large files; the look costs 1/_PROBE of it).
SPARSE_FROM = 1 << 16
_PROBE = 61  # every 61st byte (odd and prime: no stride of a table or an instruction stream lines up with it)


def _sparse(data: bytes) -> bool:
    """Whether fewer than a quarter of `data`'s sampled bytes are base-32 characters (a binary, not text)."""
    probe = data[::_PROBE]
    return probe.translate(_MASK).count(1) * 4 < len(probe)


class Scan:
    """What a pass over a tree found: the hash parts of `wanted` in file contents and link targets, and
    (with `store_dir`) the store paths of that directory spelt out in full that `wanted` lacks.

    `text(data)` scans a whole file or link target; `chunk(data)` one piece of a file read in
    pieces (after `begin_file()`), the seam between two pieces included, so a hash split
    across two reads is still found, and a full path's name split so is named whole when the
    piece after the split is the last or at least as long as the path (`nar` reads `CHUNK` bytes).
    """

    def __init__(self, wanted: Iterable[str] | Candidates, store_dir: str | None = None) -> None:
        self.wanted = wanted if isinstance(wanted, Candidates) else Candidates(wanted)
        self.found: set[bytes] = set()
        self.named: dict[bytes, bytes] = {}
        self.prefix = os.fsencode(store_dir.rstrip("/") + "/") if store_dir is not None else None
        self.many = len(self.wanted) > MANY
        self._named_re = _named_pattern(self.prefix) if self.prefix is not None and not self.many else None
        # The seam: a hash may straddle two reads, and so may a full path, ``<prefix><hash>-<name>``
        # with a name of up to 211 characters: that much of the read before is kept, and that much
        # of the read after looked at with it.
        self.keep = HASH_LEN - 1 if self.prefix is None else len(self.prefix) + HASH_LEN + 1 + _NAME_MAX
        self._tail = b""

    @property
    def active(self) -> bool:
        """Whether there is anything to look for."""
        return bool(self.wanted) or self.prefix is not None

    def text(self, data: bytes) -> None:
        """Scan `data`, a whole file or link target.

        Many candidates, or data of `SPARSE_FROM` bytes or more with few base-32 bytes (`_sparse`: a
        binary): `find_hashes`, which samples every `_SAMPLE`th byte and looks only at the stretches
        that can hold a run; otherwise one ``bytes.find`` per candidate and the full-path regex, cheaper
        on text. Both find the same (tests/store/test_refscan_sparse.py). Both hold the interpreter's
        lock: on a 100 MiB slice of libLLVM, 4 candidates and the store directory, 0.87 s/GiB the
        second way, 0.49 s/GiB the first; on 60 MiB of Python sources and headers 0.99 and 1.45 s/GiB
        (load 1-3; docs/bench-wheels.md, fifth round).
        """
        if self.many or (len(data) >= SPARSE_FROM and _sparse(data)):
            find_hashes(data, self.wanted, self.found, self.prefix, self.named if self.prefix is not None else None)
            return
        found = self.found
        for h in self.wanted:
            if h not in found and data.find(h) != -1:
                found.add(h)
        if self._named_re is not None:
            named = self.named
            for match in self._named_re.finditer(data):
                run, name = match[1], match[2]
                if run not in self.wanted and (len(name) > len(named.get(run, b"")) or run not in named):
                    named[run] = name

    def reset(self) -> None:
        """Forget what was found, for the next tree."""
        self.found = set()
        self.named = {}

    def begin_file(self) -> None:
        """A new file read in pieces starts: no seam with what came before."""
        self._tail = b""

    def chunk(self, data: bytes) -> None:
        """Scan one piece of a file read in pieces, and the seam with the piece before."""
        if self._tail:  # the seam: a hash split across two pieces (no copy of the piece)
            self.text(self._tail + data[: self.keep])
        self.text(data)
        self._tail = data[-self.keep :] if len(data) >= self.keep else (self._tail + data)[-self.keep :]

    def results(self) -> tuple[set[str], dict[str, str]]:
        """(hash parts found, {hash part: name} of the full paths not among the candidates), decoded."""
        return {h.decode() for h in self.found}, {k.decode(): v.decode() for k, v in self.named.items()}
