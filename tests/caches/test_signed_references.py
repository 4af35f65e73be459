"""What a narinfo says about references: signed, registered as given (as Nix); unsigned, checked against the files.

Issue 23 (class 6) scanned every substituted tree: a signed narinfo that left out a dependency
made a valid path whose closure lacked it. Nix does not scan a substitute: it registers the
References a trusted key signed (NixOS/nix src/libstore/build/substitution-goal.cc@002bb435:
`copyStorePath` with the narinfo's `ValidPathInfo`), and the signer answers for them as for the
NarHash. Issue 34 (the ML closure at half uv's wall time) took that rule back: the scan was a sixth
of the substitution's CPU. What stays: without required signatures (nothing vouches for the list)
the files are still scanned and a mention the list leaves out is refused, and `verify` reports a
mention of a path that is not in the store, signed or not.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from cache_helpers import fresh_store_like, signed_file_cache

from cudapkgs.errors import StoreError
from cudapkgs.store import nar
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.store import Store


@pytest.fixture
def setup(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    yield store, dep, top, key, cache, tmp_path
    store.close()


def _sign_wrong_references(cache, tmp_path: Path, key, path: str, references: tuple[str, ...]) -> None:
    """Rewrite `path`'s narinfo with `references` and a valid signature over them (a signer's mistake)."""
    info = replace(cache.narinfo(path), references=references)
    info = info.with_sigs((key.sign(info.fingerprint()),))
    narinfo = tmp_path / "cache" / (os.path.basename(path)[:32] + ".narinfo")
    narinfo.write_text(info.to_text())


def test_signed_references_are_registered_as_given_without_reading_the_files(setup, monkeypatch):
    """The signer left dep out of top's References: registered as signed (Nix's rule), no scan of any kind."""
    store, dep, top, key, cache, tmp_path = setup
    _sign_wrong_references(cache, tmp_path, key, top, ())

    def refuse(*args, **kwargs):
        raise AssertionError("a signed substitute's files were scanned for references")

    monkeypatch.setattr(nar, "ReferenceScanner", refuse)
    monkeypatch.setattr(nar, "scan_named", refuse)
    monkeypatch.setattr(nar, "scan_for_hashes", refuse)
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        cache.substitute(fresh, dep, trusted_keys=[key.public])
        cache.substitute(fresh, top, trusted_keys=[key.public])
        assert fresh.references(top) == [] and fresh.references(dep) == []
        assert fresh.is_valid(top)


def test_without_required_signatures_an_omitted_valid_dependency_is_refused(setup):
    store, dep, top, key, cache, tmp_path = setup
    _sign_wrong_references(cache, tmp_path, key, top, ())
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        cache.substitute(fresh, dep, require_sigs=False)
        with pytest.raises(StoreError, match=f"'{top}' from file://.*: its files mention '{dep}', which its declared "
                                             "references leave out; not added"):
            cache.substitute(fresh, top, require_sigs=False)
        assert not fresh.is_valid(top) and not os.path.lexists(top)
        assert fresh.all_paths() == [dep]


def test_without_required_signatures_an_omitted_absent_dependency_is_refused(setup):
    """The dependency is in no store here: only its full path in top's files names it."""
    store, dep, top, key, cache, tmp_path = setup
    _sign_wrong_references(cache, tmp_path, key, top, ())
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        subs = Substituters([cache], [], require_sigs=False)
        found = subs.query(fresh, [top])
        assert list(found) == [top]  # the wrong list makes top look self-contained
        with pytest.raises(Exception, match=f"its files mention '{dep}'"):
            subs.fetch(fresh, list(found.values()))
        assert fresh.all_paths() == []


def test_a_signed_list_that_omits_an_absent_dependency_is_what_verify_reports(setup):
    """Signed, top is registered without dep; `verify` (reading the files) names the path it mentions."""
    store, dep, top, key, cache, tmp_path = setup
    _sign_wrong_references(cache, tmp_path, key, top, ())
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        subs = Substituters([cache], [key.public])
        assert subs.fetch(fresh, list(subs.query(fresh, [top]).values())) == [top]
        problems = fresh.verify()
        assert [(p.path, p.kind) for p in problems] == [(top, "missing-reference")]
        assert f"mentions '{dep}'" in problems[0].message


def test_a_declared_reference_the_files_do_not_mention_is_kept(setup):
    """More references only keep more alive (Nix also counts hashes in file names, which this scan does not)."""
    store, dep, top, key, cache, tmp_path = setup
    _sign_wrong_references(cache, tmp_path, key, top, (os.path.basename(dep), os.path.basename(top)))
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        cache.substitute(fresh, dep, trusted_keys=[key.public])
        cache.substitute(fresh, top, trusted_keys=[key.public])
        assert fresh.references(top) == sorted([dep, top])
        assert fresh.verify() == []


def test_the_honest_closure_still_substitutes_and_verifies(setup):
    store, dep, top, key, cache, tmp_path = setup
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        subs = Substituters([cache], [key.public])
        assert sorted(subs.fetch(fresh, list(subs.query(fresh, [top]).values()))) == sorted([dep, top])
        assert fresh.references(top) == [dep] and fresh.verify() == []


def test_verify_reports_a_mention_of_a_path_that_is_not_in_the_store(tmp_path):
    with Store.open(tmp_path / "store") as store:
        absent = f"{store.store_dir}/{'1' * 32}-libfoo-1.0"

        def top(out: Path) -> None:
            out.mkdir()
            (out / "uses").write_text(f"RUNPATH={absent}/lib\n")
            os.symlink(f"{absent}/bin/tool", out / "tool")

        path = store.add_path("top-1.0", top)  # no candidates: recorded with no references
        assert store.references(path) == []
        problems = store.verify()
        assert [(p.path, p.kind) for p in problems] == [(path, "missing-reference")]
        assert f"mentions '{absent}', which is not valid in the store" in problems[0].message
        assert store.verify(check_contents=False) == []  # only reading the files can tell
