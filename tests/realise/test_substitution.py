"""Substitution in the scheduler: plan top-down from caches, fetch in parallel, fall back to building."""

from __future__ import annotations

import io
import os
import shutil
import socket

import pytest
from test_scheduler import EVENTS, _fake_builder, diamond, mk  # noqa: F401  (the fixture registers the fake builder)

from cudapkgs.cli.build import realise_and_link
from cudapkgs.cli.installables import Installable
from cudapkgs.realise.scheduler import plan, run
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.store import Store


def _built() -> list[str]:
    return sorted(n for e, n, _ in EVENTS if e == "start")


def _upload_then_empty(tmp_path, build, upload, key_name: str):
    """Build BUILD in a fresh store, upload the closure of the paths UPLOAD(store) names to a file://
    cache signed by a new key, then delete the store: what a machine with only the cache starts from.
    Returns (key, cache)."""
    store_dir = tmp_path / "store"
    key = generate(key_name)
    cache = open_cache(f"file://{tmp_path}/cache")
    with Store.open(store_dir) as store:
        run(store, plan(store, build), jobs=2)
        cache.upload_closure(store, upload, secret_key=key)
    for dirpath, _, _ in os.walk(store_dir):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(store_dir)
    EVENTS.clear()
    return key, cache


@pytest.fixture
def cached(tmp_path):
    """A diamond a <- b, c <- d built, its closure uploaded (signed) to a file:// cache, and the store emptied."""
    store_dir = tmp_path / "store"
    a, b, c, d = diamond(store_dir)
    key, cache = _upload_then_empty(tmp_path, [d], list(d.outputs.values()), "test-1")
    return store_dir, (a, b, c, d), key, cache


def test_everything_substitutable_builds_nothing(cached):
    store_dir, (a, b, c, d), key, cache = cached
    warnings: list[str] = []
    subs = Substituters([cache], [key.public], warn=warnings.append)
    with Store.open(store_dir) as store:
        the_plan = plan(store, [d], subs)
        assert the_plan.to_build == ()
        paths = {s.path for s in the_plan.to_substitute}
        assert paths == {a.outputs["out"], b.outputs["out"], c.outputs["out"], *d.outputs.values()}
        assert the_plan.substitute_download_size == sum(s.info.file_size for s in the_plan.to_substitute) > 0
        assert the_plan.to_json()["substitute"][0]["cache"] == cache.url
        out = io.StringIO()
        run(store, the_plan, jobs=3, substituters=subs, stream=out)
        assert _built() == []
        assert all(store.is_valid(p) for p in paths) and store.verify() == []
        text = out.getvalue()
        assert f"substituting 5 path(s) (" in text and f"from {cache.url}" in text and "[5/5] substituted" in text
    assert warnings == []


def test_top_down_only_the_runtime_closure_comes(tmp_path):
    """e refers to d's out only: d's dev output is neither substituted nor built (as Nix, top-down)."""
    store_dir = tmp_path / "store"
    a, b, c, d = diamond(store_dir)
    e = mk(store_dir, "e", [d])
    key, cache = _upload_then_empty(tmp_path, [e], [e.outputs["out"]], "k-1")
    with Store.open(store_dir) as store:
        subs = Substituters([cache], [key.public])
        the_plan = plan(store, [e], subs)
        assert {s.path for s in the_plan.to_substitute} == {x.outputs["out"] for x in (a, b, c, d, e)}
        assert the_plan.to_build == ()
        run(store, the_plan, substituters=subs, stream=io.StringIO())
        assert _built() == [] and not store.is_valid(d.outputs["dev"])


def test_partial_cache_substitutes_what_it_has_and_builds_the_rest(tmp_path):
    store_dir = tmp_path / "store"
    a, b, c, d = diamond(store_dir)
    key, cache = _upload_then_empty(tmp_path, [a], [a.outputs["out"]], "test-1")
    with Store.open(store_dir) as store:
        subs = Substituters([cache], [key.public])
        the_plan = plan(store, [d], subs)
        assert [s.path for s in the_plan.to_substitute] == [a.outputs["out"]]
        assert [x.name for x in the_plan.to_build] == ["b", "c", "d"]
        run(store, the_plan, jobs=2, substituters=subs, stream=io.StringIO())
        assert _built() == ["b", "c", "d"] and store.verify() == []


def test_a_tampered_narinfo_is_a_miss_with_one_line_and_gets_built(cached):
    store_dir, (a, b, c, d), key, cache = cached
    narinfo = f"{cache.root}/{os.path.basename(d.outputs['out'])[:32]}.narinfo"
    text = open(narinfo).read()
    with open(narinfo, "w") as f:
        f.write(text.replace("NarSize: ", "NarSize: 9"))
    warnings: list[str] = []
    with Store.open(store_dir) as store:
        subs = Substituters([cache], [key.public], warn=warnings.append)
        the_plan = plan(store, [d], subs)
        assert [x.name for x in the_plan.to_build] == ["d"]
        assert d.outputs["out"] not in {s.path for s in the_plan.to_substitute}
        run(store, the_plan, substituters=subs, stream=io.StringIO())
        assert _built() == ["d"] and store.verify() == []
    assert len(warnings) == 1 and d.outputs["out"] in warnings[0] and "changed after signing" in warnings[0]


def test_a_damaged_nar_falls_back_to_building(cached):
    store_dir, (a, b, c, d), key, cache = cached
    info = cache.narinfo(b.outputs["out"])
    with open(f"{cache.root}/{info.url}", "r+b") as f:
        f.truncate(info.file_size // 2)
    out = io.StringIO()
    with Store.open(store_dir) as store:
        subs = Substituters([cache], [key.public])
        the_plan = plan(store, [d], subs)
        assert the_plan.to_build == ()
        run(store, the_plan, jobs=2, substituters=subs, stream=out)
        assert all(store.is_valid(p) for p in d.outputs.values()) and store.verify() == []
    assert "could not substitute b" in out.getvalue()
    assert "building what is missing instead" in out.getvalue()
    assert "b" in _built() and "a" not in _built()


def test_a_cache_that_is_down_is_reported_once_and_everything_builds(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store_dir = tmp_path / "store"
    a, b, c, d = diamond(store_dir)
    warnings: list[str] = []
    with Store.open(store_dir) as store:
        subs = Substituters([open_cache(f"http://127.0.0.1:{port}")], [], warn=warnings.append)
        the_plan = plan(store, [d], subs)
        run(store, the_plan, substituters=subs, stream=io.StringIO())
        assert _built() == ["a", "b", "c", "d"]
    assert len(warnings) == 1 and "does not answer" in warnings[0] and "building instead" in warnings[0]


def test_dry_run_shows_both_lists_and_push_to_uploads(cached, tmp_path, capsys, monkeypatch):
    store_dir, (a, b, c, d), key, cache = cached
    monkeypatch.chdir(tmp_path)
    e = mk(store_dir, "e", [d])
    subs = Substituters([cache], [key.public])
    items = [Installable("e", drv=e)]
    assert realise_and_link(str(store_dir), items, dry_run=True, substituters=subs) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("these 5 paths will be substituted (") and lines[0].endswith(f"from {cache.url}:")
    assert "this derivation will be built:" in lines and lines[-1] == f"  {e.drv_path}"
    push = open_cache(f"file://{tmp_path}/pushed")
    assert realise_and_link(str(store_dir), items, substituters=subs, push=(push, key)) == 0
    assert _built() == ["e"]
    assert "pushed 5 path(s)" in capsys.readouterr().err
    assert push.narinfo(e.outputs["out"]).sigs and push.narinfo(a.outputs["out"]) is not None


def test_building_a_package_one_of_whose_outputs_was_substituted_keeps_that_output(tmp_path):
    """d.out comes from the cache (e refers to it); d itself is also asked for, so d.dev is built: d.out stays."""
    store_dir = tmp_path / "store"
    a, b, c, d = diamond(store_dir)
    e = mk(store_dir, "e", [d])
    key, cache = _upload_then_empty(tmp_path, [e], [e.outputs["out"]], "k-1")
    with Store.open(store_dir) as store:
        subs = Substituters([cache], [key.public])
        the_plan = plan(store, [e, d], subs)
        assert [x.name for x in the_plan.to_build] == ["d"] and d.outputs["out"] in {s.path for s in the_plan.to_substitute}
        subs.fetch(store, the_plan.to_substitute)
        inode = os.stat(d.outputs["out"]).st_ino
        run(store, plan(store, [e, d]))  # what is left: build d (its out is valid now)
        assert _built() == ["d"] and store.is_valid(d.outputs["dev"])
        assert os.stat(d.outputs["out"]).st_ino == inode  # not replaced by the build's copy
        assert store.verify() == []


def test_a_substituted_package_does_not_need_its_fetcher_inputs_checked(tmp_path):
    """A fetcher output valid with other contents stops what would be built from it, but not the
    substitution of a package that takes it as input (top-down, it is neither built nor used);
    without the cache the build is still refused."""
    import hashlib

    from cudapkgs.derivation import Derivation
    from cudapkgs.realise.realise import FixedOutputMismatchError

    store_dir = tmp_path / "store"
    body = b"the real source\n"
    src = Derivation(store_dir=os.fspath(store_dir), name="src.txt", system="x86_64-linux", outputs=["out"],
                     builder="fetchurl", src=None, input_paths={}, attrs={"urls": ["file:///nonexistent"]},
                     output_hash={"algo": "sha256", "mode": "flat", "hash": hashlib.sha256(body).hexdigest()})
    e = mk(store_dir, "e", [src])
    key = generate("k-fixed")
    cache = open_cache(f"file://{tmp_path}/cache")
    with Store.open(store_dir) as store:
        store.add_path(src.outputs["out"], lambda out: out.write_bytes(body))
        run(store, plan(store, [e]), stream=io.StringIO())
        cache.upload_closure(store, [e.outputs["out"]], secret_key=key)
    for dirpath, _, _ in os.walk(store_dir):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(store_dir)
    EVENTS.clear()
    with Store.open(store_dir) as store:
        store.add_path(src.outputs["out"], lambda out: out.write_bytes(b"planted\n"))
        with pytest.raises(FixedOutputMismatchError, match="e is not built from it"):
            plan(store, [e])
        subs = Substituters([cache], [key.public])
        the_plan = plan(store, [e], subs)
        assert the_plan.to_build == () and [s.path for s in the_plan.to_substitute] == [e.outputs["out"]]
        run(store, the_plan, substituters=subs, stream=io.StringIO())
        assert _built() == [] and store.is_valid(e.outputs["out"])
