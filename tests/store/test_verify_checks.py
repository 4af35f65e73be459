"""`Store.verify` after the one-pass rewrite (issue 24, goal 5): every check still fails when it should.

The store has more than `refscan.MANY` paths, so the scan looks up base-32 runs (the path
`verify` takes on a real store); each damage is one path among clean ones.
"""

from __future__ import annotations

import os

import pytest

from cudapkgs.store import nar
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.refscan import MANY
from cudapkgs.store.store import Store


def _store(tmp_path, contents: dict[int, bytes], refs: dict[int, list[int]], n: int = MANY + 8):
    """A store of `n` paths; path i holds one file `contents[i]` (default: its own number) and records `refs[i]`."""
    store = Store.open(tmp_path / "store")
    paths = [make_store_path(store.store_dir, "output:out", f"check-{i}", f"p{i}") for i in range(n)]
    rows = []
    for i, path in enumerate(paths):
        os.mkdir(path)
        body = contents.get(i, b"%d" % i)
        body = body.replace(b"@", paths[0].encode()).replace(b"#", os.path.basename(paths[1])[:32].encode())
        with open(os.path.join(path, "f"), "wb") as f:
            f.write(body)
        digest, size = nar.nar_hash(path)
        rows.append((path, nar.format_hash(digest), size, {paths[j] for j in refs.get(i, [])}, None))
    store.db.register_many(rows)
    return store, paths


def test_a_clean_store_has_no_problem(tmp_path):
    store, _ = _store(tmp_path, {5: b"uses @ and " + b"x" * 300 + b"#" + b"x" * 40}, {5: [0, 1]})
    assert store.verify() == []


def test_a_changed_file_of_the_same_size_is_a_hash_mismatch(tmp_path):
    store, paths = _store(tmp_path, {}, {})
    with open(os.path.join(paths[7], "f"), "r+b") as f:
        f.write(b"9")  # "7" -> "9": same size, other bytes
    problems = store.verify()
    assert [(p.path, p.kind) for p in problems] == [(paths[7], "hash-mismatch")]
    assert "was modified: expected hash" in problems[0].message and problems[0].message.count("sha256:") == 2


@pytest.mark.parametrize("body", [b"a full path: @/bin", b"x" * 77 + b"#" + b"x" * 5, b"#"])
def test_a_mentioned_valid_path_left_out_of_the_references_is_reported(tmp_path, body):
    # Exact runs of 32 and hashes inside long base-32 runs (the strided piece lookup).
    store, paths = _store(tmp_path, {9: body}, {})
    problems = store.verify()
    mentioned = paths[0] if b"@" in body else paths[1]
    assert [(p.path, p.kind) for p in problems] == [(paths[9], "missing-reference")]
    assert f"mentions '{mentioned}'" in problems[0].message


def test_a_stray_full_path_that_is_not_valid_is_reported(tmp_path):
    store, paths = _store(tmp_path, {}, {})
    stray = make_store_path(store.store_dir, "output:out", "never-built", "stray-1.0")
    with open(os.path.join(paths[3], "f"), "wb") as f:
        f.write(b"RPATH=" + stray.encode() + b"/lib\0")
    # Recorded hash and size follow the new bytes: only the reference check can object.
    digest, size = nar.nar_hash(paths[3])
    store.db.register_many([(paths[3], nar.format_hash(digest), size, set(), None)])
    problems = store.verify()
    assert [(p.path, p.kind) for p in problems] == [(paths[3], "missing-reference")]
    assert f"mentions '{stray}', which is not valid in the store" in problems[0].message


def test_a_reference_split_across_two_reads_of_a_large_file_is_reported(tmp_path):
    store, paths = _store(tmp_path, {}, {})
    body = b"\0" * (nar.CHUNK - 20) + paths[0].encode() + b"\0" * 100
    with open(os.path.join(paths[4], "f"), "wb") as f:
        f.write(body)
    digest, size = nar.nar_hash(paths[4])
    store.db.register_many([(paths[4], nar.format_hash(digest), size, set(), None)])
    assert [(p.path, p.kind) for p in store.verify()] == [(paths[4], "missing-reference")]


def test_missing_paths_and_invalid_references_are_reported(tmp_path):
    store, paths = _store(tmp_path, {}, {})
    (tmp_path / "store" / os.path.basename(paths[2]) / "f").unlink()
    os.rmdir(paths[2])
    ghost = make_store_path(store.store_dir, "output:out", "ghost", "ghost")
    with store.db.transaction() as conn:
        conn.execute("INSERT INTO Refs (referrer, reference) VALUES (?, ?)", (paths[6], ghost))
    got = sorted((p.path, p.kind) for p in store.verify())
    assert got == sorted([(paths[2], "missing"), (paths[6], "invalid-reference")])
