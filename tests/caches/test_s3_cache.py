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
    with pytest.raises(CacheError, match="unknown setting .colour."):
        open_cache("s3://b?colour=red")
    cache = open_cache(f"s3://b?endpoint=127.0.0.1:{free_port()}&scheme=http")
    with pytest.raises(CacheUnavailable, match="does not answer"):
        cache.narinfo(f"/s/{'a' * 32}-x")


def test_a_fake_s3_dripping_bytes_into_one_read_is_cut_as_a_stall(monkeypatch):
    """S3 downloads had only the object's deadline: botocore's read(1 MiB) gathers receives, each within its
    60 s read_timeout, so a peer sending a byte every 0.2 s held one read until the deadline (tens of
    minutes for a NAR). Now the HTTP client's low-speed rule applies inside the read (transport/stall.py)."""
    from slow_server import raw_server

    def dripping_s3(conn, server) -> None:
        server.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n"
                     b"x-amz-request-id: fake\r\n\r\n")
        server.drip(conn, b"x" * 100_000, 0.2)

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with raw_server(dripping_s3, cap_s=15.0) as server:
        cache = open_cache(f"s3://lab-cache?endpoint=127.0.0.1:{server.port}&scheme=http&region=us-east-1")
        cache.low_speed_s = 1.0  # the rule's window (30 s by default), short for the test
        body = cache._get("nar/x.nar", 100_000)
        with pytest.raises(CacheUnavailable, match=r"stalled for s3://lab-cache.*/nar/x\.nar: stalled: \d+ bytes in "
                                                   r"\d+ s of waiting inside one read, slower than 1024 bytes/s"):
            body.read(1 << 20)
        assert server.requests and server.requests[0].startswith(b"GET /lab-cache/nar/x.nar")


@pytest.mark.parametrize("endpoint", ["http://AKIAX:s3cretKEY@127.0.0.1:9", "AKIAX:s3cretKEY@minio.lan:9000"])
def test_an_endpoint_naming_credentials_is_refused_without_echoing_them(endpoint):
    """botocore ignores credentials in the endpoint, and the URL, endpoint included, was named in every error
    ("s3://b?endpoint=http://AKIAX:s3cretKEY@…: no S3 credentials")."""
    from cudapkgs.store.caches.base import CacheError
    from cudapkgs.store.caches.s3 import S3Cache

    with pytest.raises(CacheError) as raised:
        S3Cache(f"s3://bucket/prefix?endpoint={endpoint}")
    said = str(raised.value)
    assert "s3cretKEY" not in said and "AKIAX" not in said and "endpoint names credentials" in said
    assert said.startswith("s3://bucket/prefix: ")
