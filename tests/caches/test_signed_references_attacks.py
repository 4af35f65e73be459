"""Attacks on "signed References are registered as given": only a signature by a trusted key over exactly
these fields (or a content address that makes the path) lets a list through unscanned; anything else is
refused, and a NAR that differs from the NarHash/NarSize is refused with nothing registered either way."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from cache_helpers import fresh_store_like, signed_file_cache

from cudapkgs.errors import CudapkgsError
from cudapkgs.store.caches.signing import generate


@pytest.fixture
def setup(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    yield store, dep, top, key, cache, tmp_path
    store.close()


def _write(tmp_path: Path, path: str, info) -> None:
    (tmp_path / "cache" / (os.path.basename(path)[:32] + ".narinfo")).write_text(info.to_text())


def _refused(cache, fresh, dep, top, key, **options) -> None:
    cache.substitute(fresh, dep, trusted_keys=[key.public])
    with pytest.raises(CudapkgsError):
        cache.substitute(fresh, top, trusted_keys=[key.public], **options)
    assert not fresh.is_valid(top)


@pytest.mark.parametrize("attack", ["untrusted key", "other fields", "garbage signature", "same name, other key"])
def test_an_omitted_reference_without_a_trusted_signature_over_it_is_refused(setup, attack):
    store, dep, top, key, cache, tmp_path = setup
    info = cache.narinfo(top)
    wrong = replace(info, references=())
    if attack == "untrusted key":
        wrong = wrong.with_sigs((generate("other-1").sign(wrong.fingerprint()),))
    elif attack == "other fields":  # the original signature, over the list that names dep
        wrong = wrong.with_sigs(info.sigs)
    elif attack == "garbage signature":
        wrong = wrong.with_sigs((f"{key.public.name}:" + "A" * 86 + "==",))
    else:
        wrong = wrong.with_sigs((generate(key.public.name).sign(wrong.fingerprint()),))
    _write(tmp_path, top, wrong)
    with fresh_store_like(store, tmp_path / "old") as fresh:
        _refused(cache, fresh, dep, top, key)


def test_a_content_address_that_does_not_make_the_path_lets_nothing_through(setup):
    store, dep, top, key, cache, tmp_path = setup
    info = cache.narinfo(top)
    _write(tmp_path, top, replace(info, references=(), sigs=(), ca="fixed:r:" + info.nar_hash))
    with fresh_store_like(store, tmp_path / "old") as fresh:
        _refused(cache, fresh, dep, top, key)


@pytest.mark.parametrize("field", ["nar_hash", "nar_size"])
def test_a_trusted_signature_over_another_nar_registers_nothing(setup, field):
    """Signed, References trusted, files not scanned: the NAR must still be the signed one."""
    store, dep, top, key, cache, tmp_path = setup
    info = cache.narinfo(top)
    other = "sha256:" + "0" * 52 if field == "nar_hash" else info.nar_size + 8
    wrong = replace(info, **{field: other})
    _write(tmp_path, top, wrong.with_sigs((key.sign(wrong.fingerprint()),)))
    with fresh_store_like(store, tmp_path / "old") as fresh:
        _refused(cache, fresh, dep, top, key)


def test_unsigned_without_required_signatures_an_omitted_reference_is_still_refused(setup):
    store, dep, top, key, cache, tmp_path = setup
    _write(tmp_path, top, replace(cache.narinfo(top), references=(), sigs=()))
    with fresh_store_like(store, tmp_path / "old") as fresh:
        _refused(cache, fresh, dep, top, key, require_sigs=False)
