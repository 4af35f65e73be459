"""Store path names (Nix base-32, compression) and NAR serialisation."""

from __future__ import annotations

import hashlib
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs.errors import StoreError
from cudapkgs.store import nar
from cudapkgs.store.paths import (
    base32_decode,
    base32_encode,
    compress_hash,
    make_store_path,
    parse_store_path,
    to_store_path,
)

ALPHABET = "0123456789abcdfghijklmnpqrsvwxyz"


def reference_base32(data: bytes) -> str:
    """Nix's printHash32 from its description: treat the bytes as a little-endian
    integer and print it in base 32, most significant digit first, with
    ceil(8n/5) digits."""
    value = int.from_bytes(data, "little")
    length = (len(data) * 8 - 1) // 5 + 1
    return "".join(ALPHABET[(value >> (5 * i)) & 31] for i in reversed(range(length)))


# Nix's own unit tests (libutil hash tests) and `nix-hash --type sha256 --to-base32` of sha256("").
# sha256("") = e3b0c442...b855; the test below also rederives it with reference_base32.
KNOWN = {
    (hashlib.sha256, b""): "0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73",
    (hashlib.sha256, b"abc"): "1b8m03r63zqhnjf7l5wnldhh7c134ap5vpj0850ymkq1iyzicy5s",
    (hashlib.sha1, b"abc"): "kpcd173cq987hw957sx6m0868wv3x6d9",
}


@pytest.mark.parametrize(("algo", "data"), list(KNOWN))
def test_base32_known_nix_values(algo, data):
    digest = algo(data).digest()
    assert base32_encode(digest) == KNOWN[(algo, data)]
    assert reference_base32(digest) == KNOWN[(algo, data)]


@given(st.binary(max_size=64))
def test_base32_matches_reference_and_roundtrips(data):
    assert base32_encode(data) == reference_base32(data)
    assert base32_decode(base32_encode(data)) == data


@given(st.binary(max_size=40), st.text(max_size=3), st.integers(0, 70), st.booleans())
def test_base32_equals_is_string_equality_with_the_encoding(data, junk, at, replace):
    from cudapkgs.store.paths import base32_equals

    text = base32_encode(data)
    assert base32_equals(text, data)
    # Tampered: a character replaced or inserted (also e, o, t, u, signs, spaces, '_': digits to int()).
    other = text[:at] + junk + text[at + (1 if replace else 0):]
    assert base32_equals(other, data) == (other == text)
    for bad in "eotu+-_ ":
        tampered = text[:at] + bad + text[at + 1:]
        assert base32_equals(tampered, data) == (tampered == text)


def test_compress_hash_xor_folds():
    digest = bytes(range(32))
    out = compress_hash(digest)
    assert len(out) == 20
    assert out[0] == 0 ^ 20 and out[11] == 11 ^ 31 and out[12] == 12 and out[19] == 19


def test_make_store_path_shape_and_determinism(tmp_path):
    store = str(tmp_path)
    p = make_store_path(store, "output:out", "abc", "hello-1.0")
    assert p == make_store_path(store, "output:out", b"abc", "hello-1.0")
    assert p != make_store_path(store, "output:out", "abd", "hello-1.0")
    assert p != make_store_path(store + "x", "output:out", "abc", "hello-1.0")
    base = os.path.basename(p)
    assert os.path.dirname(p) == store and base.endswith("-hello-1.0")
    assert all(c in ALPHABET for c in base[:32])
    # Nix's makeStorePath: sha256 of the fingerprint, compressed to 160 bits.
    inner = hashlib.sha256(b"abc").hexdigest()
    fp = f"output:out:sha256:{inner}:{store}:hello-1.0".encode()
    assert base[:32] == reference_base32(compress_hash(hashlib.sha256(fp).digest()))
    assert parse_store_path(store, p) == (base[:32], "hello-1.0")


def test_parse_store_path_rejects(tmp_path):
    store = str(tmp_path / "store")
    good = make_store_path(store, "source", "x", "foo")
    with pytest.raises(StoreError, match="is not in the store"):
        parse_store_path(store, "/nix/store/" + os.path.basename(good))
    with pytest.raises(StoreError, match="not a store path"):
        parse_store_path(store, store + "/foo")
    with pytest.raises(StoreError, match="invalid store path name"):
        make_store_path(store, "source", "x", "bad name")
    assert to_store_path(store, good + "/bin/x") == good


def _tree(root, *, exec_bit=True, target="a", order=("b", "a")):
    root.mkdir()
    for name in order:
        (root / name).write_bytes(name.encode() * 10)
    if exec_bit:
        os.chmod(root / "a", 0o755)
    (root / "sub").mkdir()
    (root / "sub" / "link").symlink_to(target)


def test_nar_format_of_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"hello")

    def s(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b + b"\0" * (-len(b) % 8)

    expected = s(b"nix-archive-1") + s(b"(") + s(b"type") + s(b"regular") + s(b"contents") + s(b"hello") + s(b")")
    assert b"".join(nar.dump(f)) == expected
    assert nar.nar_hash(f) == (hashlib.sha256(expected).digest(), len(expected))


def test_nar_deterministic_and_sensitive(tmp_path):
    _tree(tmp_path / "x")
    _tree(tmp_path / "y", order=("a", "b"))  # creation order does not matter
    os.utime(tmp_path / "y" / "a", (5, 5))  # nor mtimes
    base = nar.nar_hash(tmp_path / "x")
    assert nar.nar_hash(tmp_path / "y") == base
    _tree(tmp_path / "noexec", exec_bit=False)
    assert nar.nar_hash(tmp_path / "noexec") != base
    _tree(tmp_path / "other", target="b")
    assert nar.nar_hash(tmp_path / "other") != base
    (tmp_path / "x" / "sub" / "new").write_text("")
    assert nar.nar_hash(tmp_path / "x") != base


def test_scan_finds_hash_across_chunk_boundary(tmp_path, monkeypatch):
    monkeypatch.setattr(nar, "CHUNK", 16)
    h = "0mdqa9w1p6cmli6976v4wi0sw9r4p5pr"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "bin").write_bytes(b"\x7fELF\0\0\0" + b"/s/" + h.encode() + b"-dep/lib\0")
    (tmp_path / "d" / "l").symlink_to("/s/" + h + "-dep")
    seen = []
    found = nar.scan_for_hashes(tmp_path / "d", [h, "1" * 32], on_found=lambda hh, rel: seen.append(rel))
    assert found == {h} and sorted(seen) == ["bin", "l"]


@given(st.lists(st.sampled_from([b"0", b"a", b"z", b"e", b"_", b"\0", b"/", b"0mdqa9w1", b"p6cmli69"]), max_size=80))
def test_the_scan_finds_what_every_window_of_the_base32_runs_holds(pieces):
    import re

    from cudapkgs.store.paths import BASE32_CHARS
    from cudapkgs.store.refscan import Candidates, find_hashes

    data = b"".join(pieces)
    windows = {run[i : i + 32] for run in re.findall(rb"[%s]{32,}" % BASE32_CHARS.encode(), data) for i in range(len(run) - 31)}
    wanted = Candidates([w.decode() for w in sorted(windows)[:3]] + [f"{i:02d}" + "a" * 30 for i in range(40)])
    found: set[bytes] = set()
    find_hashes(data, wanted, found)
    assert found == windows & wanted


@pytest.mark.parametrize("many", [False, True])  # a substring search per candidate, or the base-32 runs
@pytest.mark.parametrize("chunk", [16, 1 << 18])
def test_named_scan_finds_full_store_paths_of_any_hash_across_chunks(tmp_path, monkeypatch, chunk, many):
    monkeypatch.setattr(nar, "CHUNK", chunk)
    known, unknown = "0mdqa9w1p6cmli6976v4wi0sw9r4p5pr", "1" * 32
    others = [f"{i:02d}" + "a" * 30 for i in range(40)] if many else []
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "bin").write_bytes(b"\x7fELF" + b"x" * 37 + f"/s/t/{unknown}-libfoo-1.0/lib\0".encode()
                                         + known.encode() + b" /s/tt/" + ("2" * 32).encode() + b"-other")
    (tmp_path / "d" / "l").symlink_to(f"/s/t/{known}-dep")
    digest, size, found, named = nar.hash_and_scan_named(tmp_path / "d", [known, *others], "/s/t")
    assert (digest, size) == nar.nar_hash(tmp_path / "d") and found == {known}
    assert set(named) == {unknown}  # known is among the hashes found; /s/tt/ is another store directory
    names = {unknown: "libfoo-1.0", known: "dep"}  # for messages: a name split by a chunk's end is cut short
    assert all(names[h].startswith(name) for h, name in named.items()) and (chunk == 16 or named == {unknown: names[unknown]})
    found, named = nar.scan_named(tmp_path / "d", [], "/s/t/")  # no candidates: every full path is named
    assert found == set() and set(named) == {unknown, known}
    assert all(names[h].startswith(name) for h, name in named.items()) and (chunk == 16 or named == names)


def test_a_path_of_another_store_names_that_store(tmp_path):
    """A new user ran a command on a `result` link of a private store without --store: the error said
    only "not in the store <default>".  It now names the store the path belongs to, and how to use it;
    a path that is no store path anywhere gets no guess."""
    store = tmp_path / "team" / "store"
    other = f"{store}/0c6kzph7l0dcbyfpd6qgmmpdkbisaqbx-python3-3.12"
    for call, path in ((parse_store_path, other), (to_store_path, other + "/bin/python3")):
        with pytest.raises(StoreError) as refused:
            call("/nix/store", path)
        assert "--store" not in str(refused.value)  # no cudapkgs store there: no guess
    (store / ".meta").mkdir(parents=True)
    (store / ".meta" / "db.sqlite").write_bytes(b"")
    for call, path in ((parse_store_path, other), (to_store_path, other + "/bin/python3")):
        with pytest.raises(StoreError, match=f"it is a path of the store {store}: pass --store {store}"):
            call("/nix/store", path)
    with pytest.raises(StoreError) as refused:
        to_store_path("/nix/store", "/etc/passwd")
    assert "--store" not in str(refused.value)


def test_the_other_store_hint_names_no_store_in_use_and_pastes_as_one_word(tmp_path):
    """An attacker's review of the hint: a path inside a store path of the store in use (parse_store_path
    takes store paths only) was told "it is a path of the store S: pass --store S" of that very store; and
    the other store's directory went raw into the command to paste (a name with ``; rm -rf ~`` or a newline,
    as a cloned repository or an archive may name it)."""
    store = tmp_path / "store"
    (store / ".meta").mkdir(parents=True)
    (store / ".meta" / "db.sqlite").write_bytes(b"")
    inside = f"{store}/0c6kzph7l0dcbyfpd6qgmmpdkbisaqbx-python3-3.12"
    with pytest.raises(StoreError) as refused:
        parse_store_path(str(store), inside + "/bin/python3")
    assert "--store" not in str(refused.value) and f"inside the store path {inside}: name that path" in str(refused.value)

    hostile = tmp_path / "x; touch pwned\nset CUDAPKGS_STORE"
    (hostile / ".meta").mkdir(parents=True)
    (hostile / ".meta" / "db.sqlite").write_bytes(b"")
    with pytest.raises(StoreError) as refused:
        parse_store_path("/nix/store", f"{hostile}/0c6kzph7l0dcbyfpd6qgmmpdkbisaqbx-python3-3.12")
    hint = str(refused.value).partition(" (it is")[2]
    assert "\n" not in hint and "pass --store '" in hint  # one word, the newline escaped
    import shlex

    word = hint.partition("pass --store ")[2].partition(", or set")[0]
    assert len(shlex.split(word)) == 1


def test_every_chmod_a_refusal_suggests_pastes_as_one_command(tmp_path):
    """"fix it with: chmod go-w DIR" named the directory raw: a project in ``x;touch PWNED;b`` (a cloned
    repository chooses its directories' names) made the pasted fix run ``touch PWNED``; the store's and
    serve's --cache-dir refusals likewise.  Each names it as one shell word now (`errors.shell_word`)."""
    import shlex

    from cudapkgs.owners import problem
    from cudapkgs.store.caches.serve_cache import check_cache_dir
    from cudapkgs.store.store import Store

    def command(message: str) -> list[str]:
        return shlex.split(message.partition("fix it with: ")[2].partition(", or choose")[0])

    hostile = tmp_path / "x;touch PWNED;b"
    hostile.mkdir()
    os.chmod(hostile, 0o777)
    assert command(problem(hostile)) == ["chmod", "go-w", str(hostile)]
    with pytest.raises(StoreError) as refused:
        check_cache_dir(hostile)
    assert command(str(refused.value)) == ["chmod", "700", str(hostile)]
    os.chmod(hostile, 0o755)
    store = hostile / "store"
    Store.open(store).close()
    os.chmod(store, 0o777)
    with pytest.raises(StoreError) as refused:
        Store.open(store)
    assert command(str(refused.value)) == ["chmod", "go-w", str(store)]
