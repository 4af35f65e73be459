"""The s3:// backend through boto3 against moto's S3 server on 127.0.0.1.

moto (PyPI `moto[server]`) is chosen over MinIO because it installs with pip like
every other test dependency (no binary download), starts in about a second, and
implements the S3 calls the backend uses (GetObject, HeadObject, PutObject, multipart).
"""

from __future__ import annotations

import pytest
from cache_helpers import fresh_store_like, make_closure
from cache_servers import free_port, s3_server  # noqa: F401 (fixture)

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.base import CacheError, CacheUnavailable, SubstituteRefused
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.store import Store


@pytest.fixture
def bucket_url(s3_server, monkeypatch):
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    boto3.client("s3", region_name="us-east-1", endpoint_url=s3_server).create_bucket(Bucket="lab-cache")
    return f"s3://lab-cache/cuda?endpoint={s3_server}&region=us-east-1"


def test_upload_then_substitute_through_s3(bucket_url, tmp_path):
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store, size=200_000)
    key = generate("s3-cache-1")
    cache = open_cache(bucket_url)
    cache.upload_closure(store, [top], secret_key=key, compression="xz")
    keys = sorted(o["Key"] for o in cache.client.list_objects_v2(Bucket="lab-cache")["Contents"])
    assert keys[0].startswith("cuda/") and "cuda/nix-cache-info" in keys
    assert sum(k.endswith(".nar.xz") for k in keys) == 2 and sum(k.endswith(".narinfo") for k in keys) == 2
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        reader = open_cache(bucket_url)
        with pytest.raises(SubstituteRefused, match="not valid in the store"):
            reader.substitute(fresh, top, trusted_keys=[key.public])
        for path in (dep, top):
            reader.substitute(fresh, path, trusted_keys=[key.public])
        assert fresh.verify() == []
        assert reader.narinfo(f"{fresh.store_dir}/{'b' * 32}-absent") is None


def test_bad_s3_urls_and_a_server_that_does_not_answer(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with pytest.raises(CacheError, match="unknown S3 parameter"):
        open_cache("s3://b?colour=red")
    cache = open_cache(f"s3://b?endpoint=127.0.0.1:{free_port()}&scheme=http")
    with pytest.raises(CacheUnavailable, match="does not answer"):
        cache.narinfo(f"/s/{'a' * 32}-x")
