"""`s3://bucket[/prefix]?region=…&endpoint=…&scheme=…&profile=…`: a binary cache in an S3 bucket (boto3).

The query parameters are Nix's S3 store settings: `region`, `endpoint`
(host[:port], or a full http(s):// URL, for MinIO, Ceph, R2, …), `scheme`
(http or https, with a bare endpoint) and `profile` (an AWS profile); `compression-level`
as every cache takes it (`base.url_settings`). Credentials
come from boto3's usual chain (environment, ~/.aws, instance role). Each object
is written with one PUT (multipart for large NARs, which S3 only makes visible when
complete), NARs before narinfos, so readers never see half an upload.
"""

from __future__ import annotations

import os
import urllib.parse
import weakref
from typing import BinaryIO

from ...errors import shown_cache_url
from .base import Cache, CacheError, CacheUnavailable, ObjectTooLarge, url_settings

__all__ = ["S3Cache"]


class S3Cache(Cache):
    """A cache in an S3 bucket; `url` as in the module docstring."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise CacheError(f"{shown_cache_url(url)}: an S3 cache URL is s3://bucket[/prefix]?region=…&endpoint=…")
        if "@" in parts.netloc:  # the bucket: S3 takes no credentials there either, and it is named everywhere
            raise CacheError(f"s3://{parts.hostname or ''}…: the bucket is named with credentials (user:secret@), which "
                             "S3 does not take from there and which every message would show: remove them and set "
                             "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile")
        # Shown without the query in the errors about it: an endpoint may name credentials (refused below)
        query = url_settings(f"s3://{parts.netloc}{parts.path}", parts.query, ("region", "endpoint", "scheme", "profile"))
        super().__init__(url, query)
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self.region = query.get("region") or "us-east-1"
        endpoint = query.get("endpoint")
        if endpoint and "@" in urllib.parse.urlsplit(endpoint if "://" in endpoint else f"//{endpoint}").netloc:
            # botocore takes no credentials from the endpoint (they come from its chain), and the URL is named
            # in every error: refused, without echoing what precedes the "@"
            raise CacheError(f"s3://{parts.netloc}{parts.path}: its endpoint names credentials (user:secret@), which "
                             "S3 does not take from there and which every message would show: remove them and set "
                             "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile")
        if endpoint and "://" not in endpoint:
            endpoint = f"{query.get('scheme', 'https')}://{endpoint}"
        self.endpoint = endpoint
        self.profile = query.get("profile")
        self._client = None
        _CACHES.add(self)  # a forked child makes its own boto3 client (`_after_fork_in_child`)
        # The low-speed rule of the HTTP client (`transport.http.Limits`, curl's --speed-limit/--speed-time):
        # a body slower than this many bytes/s over this many seconds of waiting is cut, inside a read too.
        self.low_speed_bps = 1024
        self.low_speed_s = 30.0

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            session = boto3.session.Session(profile_name=self.profile) if self.profile else boto3.session.Session()
            self._client = session.client(
                "s3", region_name=self.region, endpoint_url=self.endpoint,
                config=Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=10, read_timeout=60),
            )
        return self._client

    def _call(self, what: str, name: str, fn, *args, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

        try:
            return fn(*args, **kwargs)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            if status >= 500:
                raise CacheUnavailable(f"the cache {self.url} answers {status} ({code}) for {name}") from None
            raise CacheError(f"{self.url}: cannot {what} {name}: {code or status} {error.response.get('Error', {}).get('Message', '')}".rstrip()) from None
        except NoCredentialsError:
            raise CacheError(f"{self.url}: no S3 credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile)") from None
        except (EndpointConnectionError, BotoCoreError, OSError) as error:
            raise CacheUnavailable(f"the cache {self.url} does not answer ({error})") from None

    def _get(self, name: str, max_bytes: int) -> BinaryIO | None:
        response = self._call("read", name, self.client.get_object, Bucket=self.bucket, Key=self._key(name))
        if response is None:
            return None
        body = response["Body"]
        length = response.get("ContentLength")
        if isinstance(length, int) and length > max_bytes:
            body.close()
            raise ObjectTooLarge(f"{self.url}/{name}: has {length} bytes, more than the {max_bytes} allowed for it; "
                                 "not substituted")
        return _BoundedBody(body, max_bytes, f"{self.url}/{name}",  # type: ignore[return-value]
                            low_speed_bps=self.low_speed_bps, low_speed_s=self.low_speed_s)

    def _exists(self, name: str) -> bool:
        return self._call("check", name, self.client.head_object, Bucket=self.bucket, Key=self._key(name)) is not None

    def _put_bytes(self, name: str, data: bytes, content_type: str) -> None:
        self._call("upload", name, self.client.put_object, Bucket=self.bucket, Key=self._key(name), Body=data,
                   ContentType=content_type)

    def _put_file(self, name: str, local: str, content_type: str) -> None:
        from boto3.s3.transfer import TransferConfig

        # Two 16 MiB parts in flight at most: memory stays bounded whatever the NAR's size.
        config = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=16 << 20, max_concurrency=2)
        self._call("upload", name, self.client.upload_file, local, self.bucket, self._key(name),
                   ExtraArgs={"ContentType": content_type}, Config=config)


_CACHES: weakref.WeakSet[S3Cache] = weakref.WeakSet()  # every S3Cache alive, for a forked child


def _after_fork_in_child() -> None:
    """A forked child makes its own boto3 clients: a client's urllib3 pool holds the parent's kept-alive
    connections (two processes reading one socket would take each other's responses), as
    `transport.http.Client`'s do; its pool's lock may be held by a parent's thread. Dropped, not closed
    (closing would end the parent's connections too)."""
    for cache in list(_CACHES):
        cache._client = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _BoundedBody:
    """boto3's streaming body read within a byte bound, a deadline (botocore bounds each receive, not the object)
    and the HTTP client's low-speed rule: fewer than `low_speed_bps` bytes/s over `low_speed_s` seconds of
    waiting is cut, checked when a read returns and, by `transport.stall.StallGuard` on the socket under
    urllib3, while one read waits (botocore's ``read(1 MiB)`` gathers many receives, each within its
    60 s ``read_timeout``: a peer dripping a byte a minute kept one read, and the substitution, waiting
    until the object's deadline). Raises CacheUnavailable for a stall, a deadline or a broken read,
    ObjectTooLarge past `max_bytes`."""

    def __init__(self, body, max_bytes: int, where: str, *, low_speed_bps: int = 1024, low_speed_s: float = 30.0) -> None:
        import time

        from ...transport import deadline
        from ...transport.stall import StallGuard

        self.body, self.max_bytes, self.where = body, max_bytes, where
        self.received = 0
        self.watch = deadline.watch(time.monotonic() + deadline.deadline_for(max_bytes))
        raw = getattr(body, "_raw_stream", None)
        if hasattr(raw, "shutdown"):  # urllib3's: ends a blocked receive from the watchdog's thread
            self.watch.add(raw.shutdown)
        self._bps, self._seconds = low_speed_bps, low_speed_s
        self._waited, self._window = 0.0, 0
        self._stall = StallGuard(raw, low_speed_bps, low_speed_s, self.watch)

    def read(self, n: int = -1) -> bytes:
        import time

        if self.watch.expired:
            raise CacheUnavailable(f"the cache took longer than its deadline for {self.where}")
        began = time.monotonic()
        self._stall.begin()
        try:
            data = self.body.read(n if n is not None and n >= 0 else 1 << 20)
        except Exception as error:  # botocore's and urllib3's read errors share no base class but Exception
            if self.watch.expired:
                raise CacheUnavailable(f"the cache took longer than its deadline for {self.where}") from None
            self._raise_if_stalled()
            raise CacheUnavailable(f"the cache does not answer for {self.where} ({error})") from None
        finally:
            self._stall.end()
        self._raise_if_stalled()  # the guard cut the socket: what came is not the body's end
        if not data and self.watch.close():
            raise CacheUnavailable(f"the cache took longer than its deadline for {self.where}")
        self.received += len(data)
        if self.received > self.max_bytes:
            raise ObjectTooLarge(f"{self.where}: sent more than the {self.max_bytes} bytes allowed for it; not substituted")
        if data:
            self._check_speed(time.monotonic() - began, len(data))
        return data

    def _raise_if_stalled(self) -> None:
        if self._stall.stalled:
            self.close()
            raise CacheUnavailable(f"the cache stalled for {self.where}: {self._stall.stalled} "
                                   f"({self.received} bytes received)")

    def _check_speed(self, waited: float, got: int) -> None:
        """The rule across reads, as `transport.http.Response._check_speed`: each window of `low_speed_s`
        seconds of waiting must bring `low_speed_bps` bytes per second of it."""
        self._waited += waited
        self._window += got
        if self._seconds > 0 and self._waited >= self._seconds:
            if self._window < self._bps * self._waited:
                self.close()
                raise CacheUnavailable(f"the cache stalled for {self.where}: {self._window} bytes in "
                                       f"{self._waited:.0f} s of waiting, slower than {self._bps} bytes/s "
                                       f"({self.received} bytes received)")
            self._waited, self._window = 0.0, 0

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._stall.close()
        self.watch.close()
        self.body.close()
