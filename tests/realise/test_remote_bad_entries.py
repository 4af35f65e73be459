"""A bad entry in the push cache no longer blocks a remote build forever (issue 23, class 8).

Before, a worker's upload skipped any path whose narinfo was already in the cache: an
unsigned entry (pushed without --sign-key), one signed by a key the client does not
trust, a malformed one or one whose NAR was deleted stayed, and the client refused the
output after every remote build of it. The worker's side (`remote_build._run`, what the
child process of a Dask task runs) is called here in-process, without a cluster; the
client's side is what `run_on_dask` does after the builds (substitute with its keys).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudapkgs.config import load_config
from cudapkgs.realise.remote_build import _run
from cudapkgs.stdenv import mk_derivation
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.publish import entry_problem, publish_closure
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.store import Store


def _drv(store_dir: Path, name: str = "remote-x"):
    config = load_config(overrides={"storeDir": str(store_dir)})
    return mk_derivation(config, {"pname": name, "version": "1", "stdenvCc": None,
                                  "buildPhase": f"echo {name} > result",
                                  "installPhase": 'mkdir -p "$out" && cp result "$out/"'}).derivation


@pytest.fixture
def world(tmp_path):
    """(drv, cache, the client's key, its key file, a stranger's key): the worker's store is its own
    (tmp/worker), the client's elsewhere; both at the same store directory in turn."""
    store_dir = tmp_path / "store"
    key, stranger = generate("client-1"), generate("stranger-1")
    key_file = tmp_path / "client.key"
    key_file.write_text(str(key))
    cache = open_cache(f"file://{tmp_path}/cache")
    return store_dir, _drv(store_dir), cache, key, key_file, stranger


def _plant(store_dir: Path, drv, cache, secret) -> None:
    """Build `drv` in a store of its own and push its output with `secret` (None: unsigned),
    as an earlier, misconfigured run would have; then remove that store."""
    from cudapkgs.realise.realise import realise

    with Store.open(store_dir) as store:
        realise(store, [drv])
        cache.upload_closure(store, drv.outputs.values(), secret_key=secret)
    _wipe(store_dir)


def _payload(drv, cache, key, key_file) -> dict:
    return {"drv": drv.to_json(), "context": None, "cache": cache.url, "trustedPublicKeys": [str(key.public)],
            "requireSigs": True, "signKeyFile": str(key_file), "fetchers": None}


def _wipe(store_dir: Path) -> None:
    import shutil

    for dirpath, _, _ in os.walk(store_dir):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(store_dir)


def _client_gets(store_dir: Path, drv, cache, key) -> list[str]:
    """What the client does after the remote builds (in its own, empty store): substitute the
    outputs trusting `key`."""
    _wipe(store_dir)
    reasons: list[str] = []
    subs = Substituters([cache], [key.public], warn=reasons.append)
    with Store.open(store_dir) as store:
        found = subs.query(store, list(drv.outputs.values()))
        assert set(found) == set(drv.outputs.values()), reasons
        subs.fetch(store, list(found.values()))
        assert store.verify() == []
    return reasons


@pytest.mark.parametrize("bad", ["unsigned", "untrusted", "malformed", "nar-missing"])
def test_a_worker_replaces_an_entry_the_client_would_refuse(world, bad):
    store_dir, drv, cache, key, key_file, stranger = world
    out = drv.outputs["out"]
    _plant(store_dir, drv, cache, {"unsigned": None, "malformed": None, "untrusted": stranger, "nar-missing": key}[bad])
    narinfo = Path(cache.local_dir) / (os.path.basename(out)[:32] + ".narinfo")
    if bad == "malformed":
        narinfo.write_text("StorePath: nonsense\n")
    if bad == "nar-missing":
        url = next(line.split(": ", 1)[1] for line in narinfo.read_text().splitlines() if line.startswith("URL: "))
        (Path(cache.local_dir) / url).unlink()
    before = entry_problem(cache, out, [key.public])
    assert before is not None and before != "absent"
    result = _run(_payload(drv, cache, key, key_file))  # the worker builds it, then publishes
    assert "error" not in result, result
    assert out in result["replaced"] and result["replaced"][out] == before
    assert entry_problem(cache, out, [key.public]) is None
    _client_gets(store_dir, drv, cache, key)


def test_a_good_entry_is_kept_and_an_absent_one_uploaded(world):
    store_dir, drv, cache, key, key_file, stranger = world
    result = _run(_payload(drv, cache, key, key_file))
    assert result["replaced"] == {} and result["uploaded"] == [drv.outputs["out"]]
    before = (Path(cache.local_dir) / (os.path.basename(drv.outputs["out"])[:32] + ".narinfo")).stat().st_mtime_ns
    _wipe(store_dir)
    result = _run(_payload(drv, cache, key, key_file))
    assert result["replaced"] == {} and result["uploaded"] == []
    assert (Path(cache.local_dir) / (os.path.basename(drv.outputs["out"])[:32] + ".narinfo")).stat().st_mtime_ns == before


def test_without_a_key_the_bad_entry_is_reported_exactly(world):
    store_dir, drv, cache, key, key_file, stranger = world
    _plant(store_dir, drv, cache, None)
    from cudapkgs.realise.remote_build import RemoteBuildError, build_task

    payload = {**_payload(drv, cache, key, key_file), "signKeyFile": None}
    with pytest.raises(RemoteBuildError) as info:  # the whole task, in its child process, as a worker runs it
        build_task(payload)
    assert f"its entry for {drv.outputs['out']} is not signed by a trusted key (signed by: nobody)" in str(info.value)
    assert "no signing key here" in str(info.value)
    assert entry_problem(cache, drv.outputs["out"], [key.public]).startswith("is not signed")  # left as it was
    from cudapkgs.store.caches.base import CacheError

    with Store.open(store_dir) as store, pytest.raises(CacheError, match="no signing key here"):
        publish_closure(cache, store, drv.outputs.values(), secret_key=None, trusted_keys=[key.public])
