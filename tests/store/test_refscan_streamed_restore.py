"""The scan fed while a NAR is restored (`nar.ReferenceScanner` through `nar_restore.restore`, the
512 KiB reads of substitution or any other read size) finds exactly what Nix's search over each
file and link target on its own finds: every 32-byte base-32 window that is a candidate, at the
start or end of a file, across read boundaries, inside longer base-32 runs; never a hash whose
halves lie in two files or two link targets. Few candidates (one find each) and many (the runs),
with and without a store directory; files from empty to past the sampled scan's threshold."""

from __future__ import annotations

import io
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from cudapkgs.store import nar, refscan
from cudapkgs.store.nar_restore import HashingReader, restore
from cudapkgs.store.paths import BASE32_CHARS

B32 = BASE32_CHARS.encode()


def _nix_search(data: bytes, wanted: set[bytes]) -> set[bytes]:
    """Nix's `search` (libstore/references.cc), naively: every window of 32 base-32 characters, looked up."""
    return {data[i : i + 32] for i in range(len(data) - 31) if all(c in B32 for c in data[i : i + 32])} & wanted


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[bytes], list[tuple[str, bytes, bool]]]:
    hashes = draw(st.lists(st.text(alphabet=BASE32_CHARS, min_size=32, max_size=32).map(str.encode),
                           min_size=1, max_size=10, unique=True))
    entries = []
    for i in range(draw(st.integers(1, 4))):
        pieces = []
        for _ in range(draw(st.integers(0, 6))):
            kind = draw(st.sampled_from(["hash", "half", "half2", "b32", "noise", "gap"]))
            h = draw(st.sampled_from(hashes))
            cut = draw(st.integers(1, 31))
            if kind == "hash":
                pieces.append(h)
            elif kind == "half":
                pieces.append(h[:cut])
            elif kind == "half2":
                pieces.append(h[cut:])
            elif kind == "b32":
                pieces.append(bytes(draw(st.lists(st.sampled_from(B32), max_size=80))))
            elif kind == "noise":
                pieces.append(draw(st.binary(max_size=64)))
            else:  # past the sampled scan's threshold, and past a 512 KiB read now and then
                pieces.append(b"\0" * draw(st.sampled_from([refscan.SAMPLED_FROM, (1 << 19) - 13, 1 << 19])))
        link = draw(st.booleans()) and sum(map(len, pieces)) < 1000 and b"\0" not in b"".join(pieces) and b"".join(pieces) != b""
        entries.append((f"e{i}", b"".join(pieces), link))
    return hashes, entries


@settings(max_examples=30, deadline=None)
@given(case=trees(), read=st.sampled_from([7, 4096, 1 << 19]), many=st.booleans(), named=st.booleans())
def test_the_scan_of_a_restored_nar_finds_what_nix_finds_per_file(tmp_path_factory, case, read, many, named):
    hashes, entries = case
    wanted = set(hashes if many else hashes[:2])
    src = tmp_path_factory.mktemp("src") / "t"
    src.mkdir()
    expected: set[bytes] = set()
    for name, data, link in entries:
        if link:
            os.symlink(data, src / name)
        else:
            (src / name).write_bytes(data)
        expected |= _nix_search(data, wanted)
    scanner = nar.ReferenceScanner(nar.Candidates(h.decode() for h in wanted), "/nix/store" if named else None)
    out = tmp_path_factory.mktemp("out") / "t"
    restore(HashingReader(io.BytesIO(b"".join(nar.dump(src))), chunk=read), out, read_only=False, scanner=scanner)
    assert scanner.finished
    assert scanner.found == expected
    # and the NAR hash's own pass over the unpacked tree agrees
    assert nar.hash_and_scan(out, [h.decode() for h in wanted])[2] == {h.decode() for h in expected}
