"""`cudapkgs serve`: a store as a read-only binary cache over HTTP (what nix-serve does for Nix).

    GET /nix-cache-info                        StoreDir of this store
    GET /<hash part>.narinfo                   from the store's metadata, signed with a key (once per path)
    GET /nar/<hash part>-<nar hash>.nar        the path's NAR, uncompressed
    GET /nar/<hash part>-<nar hash>.nar.zst    the same, zstd-compressed (with ``compression="zstd"``)

Nothing is written to the store: any other method is 405. The HTTP side (`httpd.py`) bounds
connections, request heads and time; this module answers. A NAR is produced from the files as
they are (buffered into 256 KiB writes; contents of files over 256 KiB go by ``sendfile``), so a
path modified since registration gives a NAR whose hash does not match its narinfo, and a client
refuses it. Served NARs of up to 64 MiB, and every compressed NAR, are kept on disk by their hashes
(`serve_cache.NarCache`, checked before they are kept) and sent from there with ``sendfile``.
The narinfo of a path is made and signed once and kept while the path is valid with that NAR hash.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...errors import StoreError
from .. import nar
from ..paths import BASE32_CHARS, HASH_LEN, base32_encode
from .httpd import Connection, HTTPServer, Limits, Reply, Request
from .narinfo import CacheInfo, NarInfo
from .serve_cache import CachedNar, NarCache, default_cache_dir
from .signing import SecretKey

__all__ = ["Limits", "make_server", "narinfo_for"]

_NARINFO = re.compile(f"/([{BASE32_CHARS}]{{{HASH_LEN}}})\\.narinfo")
_NAR = re.compile(f"/nar/([{BASE32_CHARS}]{{{HASH_LEN}}})-([{BASE32_CHARS}]{{52}})\\.nar(\\.zst)?")

#: NARs up to this many bytes are kept on disk once served (their files are read through Python anyway).
KEEP_WHOLE_MAX = 64 << 20
#: File contents over this many bytes go to the socket by sendfile, not through Python.
SENDFILE_MIN = 256 << 10
#: Buffered writes of about this many bytes (issue 24: one send per NAR token took 75% of the time).
BATCH = 256 << 10
#: Narinfos kept made and signed.
NARINFOS_KEPT = 100_000
#: Default budget of the NARs kept on disk.
DEFAULT_CACHE_BYTES = 1 << 30

_NAR_TYPE = "application/x-nix-nar"
_NARINFO_TYPE = "text/x-nix-narinfo"


def narinfo_for(store: Any, path: str, secret_key: SecretKey | None = None, *, compressed: CachedNar | None = None) -> NarInfo:
    """The narinfo describing the valid `path` of `store` as this server offers it.

    Uncompressed (URL ``nar/<hash part>-<nar hash>.nar``, FileHash/FileSize those of the NAR),
    or with `compressed` (a zstd entry of `serve_cache`) its ``.nar.zst`` URL, FileHash and FileSize.
    Signed with `secret_key` when given (Nix's fingerprint: path, NAR hash and size, references).
    """
    info = store.query(path)
    digest = info.nar_hash.split(":", 1)[1]
    url = f"nar/{os.path.basename(info.path)[:HASH_LEN]}-{digest}.nar"
    if compressed is not None:
        url, compression, file_hash, file_size = url + ".zst", "zstd", compressed.file_hash, compressed.size
    else:
        compression, file_hash, file_size = "none", info.nar_hash, info.nar_size
    narinfo = NarInfo(
        store_path=info.path, url=url, compression=compression,
        file_hash=file_hash, file_size=file_size, nar_hash=info.nar_hash, nar_size=info.nar_size,
        references=tuple(sorted(os.path.basename(r) for r in info.references)),
        deriver=os.path.basename(info.deriver) if info.deriver else None,
    )
    if secret_key is not None:
        narinfo = narinfo.with_sigs((secret_key.sign(narinfo.fingerprint()),))
    return narinfo


class _Service:
    """What `cudapkgs serve` answers (the handler of an `httpd.HTTPServer`); its store is opened once."""

    def __init__(self, store_root: str, secret_key: SecretKey | None, compression: str, cache: NarCache,
                 workers: int, report: Callable[[str], None], level: int | None = None) -> None:
        from ..store import Store
        from .compression import check_level

        if compression not in ("none", "zstd"):
            raise StoreError(f"serve: unsupported compression {compression!r} (none or zstd)")
        try:
            self.level = check_level(compression, level)
        except (TypeError, ValueError) as error:
            raise StoreError(f"serve: {error}") from None
        self.store = Store.open(store_root, read_only=True)  # read by the event loop's thread only
        self.secret_key = secret_key
        self.compression = compression
        self.cache = cache
        self.report = report
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudapkgs-serve")
        self._narinfos: OrderedDict[str, tuple[str, bytes]] = OrderedDict()  # path -> (nar hash, text)
        self._compressing: dict[str, asyncio.Future[CachedNar]] = {}
        self._cache_info = Reply(200, CacheInfo(self.store.store_dir, priority=30).to_text().encode(),
                                 "text/x-nix-cache-info")
        self._query = self.store.db.conn.cursor()

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.store.close()

    # -- requests -------------------------------------------------------------------------------

    def handle(self, request: Request, conn: Connection) -> Any:
        if request.method not in ("GET", "HEAD"):
            return Reply(405, b"this cache is read-only\n", headers=(("Allow", "GET, HEAD"),))
        path = request.path
        if path == "/nix-cache-info":
            return self._cache_info
        m = _NARINFO.fullmatch(path)
        if m:
            return self._narinfo(m[1], conn)
        m = _NAR.fullmatch(path)
        if m:
            return self._nar(m[1], f"sha256:{m[2]}", bool(m[3]), request, conn)
        return Reply(404, b"not found\n")

    def _row(self, hash_part: str) -> tuple[str, str, int] | None:
        """(path, NAR hash, NAR size) of the valid path with this hash part, or None: one indexed query."""
        prefix = f"{self.store.store_dir}/{hash_part}-"
        return self._query.execute("SELECT path, hash, size FROM ValidPaths WHERE path >= ? AND path < ? LIMIT 1",
                                   (prefix, prefix[:-1] + ".")).fetchone()

    def _narinfo(self, hash_part: str, conn: Connection) -> Any:
        row = self._row(hash_part)
        if row is None:
            return Reply(404, b"no such path\n")
        path, nar_hash, nar_size = row
        kept = self._narinfos.get(path)
        if kept is not None and kept[0] == nar_hash:
            self._narinfos.move_to_end(path)
            return Reply(200, kept[1], _NARINFO_TYPE)
        if self.compression == "none":
            return Reply(200, self._keep_narinfo(path, nar_hash, None), _NARINFO_TYPE)
        cached = self.cache.get(nar_hash, "zstd")
        if cached is not None and os.path.exists(cached.file):
            return Reply(200, self._keep_narinfo(path, nar_hash, cached), _NARINFO_TYPE)
        return self._narinfo_after_compressing(path, nar_hash, nar_size, conn)

    async def _narinfo_after_compressing(self, path: str, nar_hash: str, nar_size: int, conn: Connection) -> int:
        try:
            cached = await self._compressed(path, nar_hash, nar_size, conn)
        except StoreError as error:
            return self._send_now(conn, Reply(500, f"{error}\n".encode()))
        return self._send_now(conn, Reply(200, self._keep_narinfo(path, nar_hash, cached), _NARINFO_TYPE))

    def _keep_narinfo(self, path: str, nar_hash: str, compressed: CachedNar | None) -> bytes:
        text = narinfo_for(self.store, path, self.secret_key, compressed=compressed).to_text().encode()
        self._narinfos[path] = (nar_hash, text)
        if len(self._narinfos) > NARINFOS_KEPT:
            self._narinfos.popitem(last=False)
        return text

    def _nar(self, hash_part: str, nar_hash: str, zst: bool, request: Request, conn: Connection) -> Any:
        row = self._row(hash_part)
        if row is None or row[1] != nar_hash:
            return Reply(404, b"no such NAR\n")
        path, _, nar_size = row
        if zst:
            if self.compression != "zstd":
                return Reply(404, b"this server does not compress NARs\n")
            return self._send_compressed(path, nar_hash, nar_size, request, conn)
        cached = self.cache.get(nar_hash, "none")
        if cached is not None:
            return self._send_cached(cached, request, conn, lambda: self._send_tree(path, nar_hash, nar_size, request, conn))
        return self._send_tree(path, nar_hash, nar_size, request, conn)

    # -- sending ---------------------------------------------------------------------------------

    @staticmethod
    def _send_now(conn: Connection, reply: Reply) -> int:
        """Send a whole `reply` from a streaming handler; returns its status."""
        conn.start(reply.status, reply.content_type, len(reply.body) if reply.length is None else reply.length)
        conn.write_now(reply.body)
        return reply.status

    def _send_cached(self, cached: CachedNar, request: Request, conn: Connection, otherwise: Callable[[], Any]) -> Any:
        """Send a kept NAR (small ones at once, others by sendfile); `otherwise()` if its file has gone."""
        from ...inputs import open_cached

        try:  # never blocking the event loop on a FIFO, a device or a link swapped in since the listing
            file = open_cached(cached.file)
        except OSError:  # evicted by another server sharing the directory, or no longer a plain file
            self.cache.forget(_nar_hash_of(cached), cached.compression)
            return otherwise()
        size = os.fstat(file.fileno()).st_size
        if request.method == "HEAD":
            file.close()
            return Reply(200, b"", _NAR_TYPE, length=size)
        if size <= 65536:
            with file:
                return Reply(200, file.read(), _NAR_TYPE)
        return self._sendfile(file, size, conn)

    async def _sendfile(self, file: Any, size: int, conn: Connection) -> int:
        with file:
            conn.start(200, _NAR_TYPE, size)
            sent = await conn.sendfile(file, 0, size)
            if sent != size:
                conn.abort()
        return 200

    def _send_compressed(self, path: str, nar_hash: str, nar_size: int, request: Request, conn: Connection) -> Any:
        cached = self.cache.get(nar_hash, "zstd")
        if cached is not None:
            return self._send_cached(cached, request, conn, lambda: self._compress_then_send(path, nar_hash, nar_size, request, conn))
        return self._compress_then_send(path, nar_hash, nar_size, request, conn)

    async def _compress_then_send(self, path: str, nar_hash: str, nar_size: int, request: Request, conn: Connection) -> int:
        try:
            cached = await self._compressed(path, nar_hash, nar_size, conn)
        except StoreError as error:
            return self._send_now(conn, Reply(500, f"{error}\n".encode()))
        result = self._send_cached(cached, request, conn, lambda: None)
        if result is None:
            return self._send_now(conn, Reply(503, b"the compressed NAR was evicted; try again\n"))
        if isinstance(result, Reply):
            return self._send_now(conn, result)
        return await result

    async def _compressed(self, path: str, nar_hash: str, nar_size: int, conn: Connection) -> CachedNar:
        """The zstd entry of `path`, made now (in the executor, once however many ask) if there is none."""
        cached = self.cache.get(nar_hash, "zstd")
        if cached is not None and os.path.exists(cached.file):
            return cached
        running = self._compressing.get(nar_hash)
        if running is None:
            loop = asyncio.get_running_loop()
            running = asyncio.ensure_future(loop.run_in_executor(self.executor, self._compress, path, nar_hash, nar_size))
            self._compressing[nar_hash] = running
            running.add_done_callback(lambda _f: self._compressing.pop(nar_hash, None))
        conn.hold()  # the server is working, not the client
        try:
            return await asyncio.shield(running)
        finally:
            conn.touch()

    def _compress(self, path: str, nar_hash: str, nar_size: int) -> CachedNar:
        """The NAR of `path` in zstd (`self.level`, 3 by default) into the cache, checked against its NAR hash (in the executor)."""
        import hashlib

        from .compression import compress_stream

        fd, temp = self.cache.temporary()
        try:
            sha = hashlib.sha256()
            size = 0

            def chunks() -> Iterator[bytes]:
                nonlocal size
                pending: list[bytes] = []
                pending_size = 0
                for chunk in nar.dump(path):
                    sha.update(chunk)
                    size += len(chunk)
                    pending.append(chunk)
                    pending_size += len(chunk)
                    if pending_size >= 1 << 20:
                        yield b"".join(pending)
                        pending, pending_size = [], 0
                if pending:
                    yield b"".join(pending)

            short = False
            with os.fdopen(fd, "wb") as out:
                try:
                    file_digest, _ = compress_stream(chunks(), out, "zstd", level=self.level, total=nar_size)
                except ValueError:  # more or fewer bytes than registered
                    short = True
            got = "sha256:" + base32_encode(sha.digest())
            if short or (got, size) != (nar_hash, nar_size):
                self.report(f"serve: {path} does not match its registration (NAR hash {got}, {size} bytes); not served")
                raise StoreError(f"{path} was modified since it was registered; `cudapkgs verify` says more")
            return self.cache.publish(temp, nar_hash, "zstd", "sha256:" + base32_encode(file_digest))
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    async def _send_tree(self, path: str, nar_hash: str, nar_size: int, request: Request, conn: Connection) -> int:
        """The NAR of `path` from its files: buffered batches from the executor, sendfile for large contents.

        A NAR of up to `KEEP_WHOLE_MAX` bytes is also written to a temporary file and kept in the
        cache if it hashes to `nar_hash`. A tree that no longer gives `nar_size` bytes ends the
        connection early (the client sees a short body and refuses it).
        """
        conn.start(200, _NAR_TYPE, nar_size)
        if request.method == "HEAD":
            return 200
        loop = asyncio.get_running_loop()
        keep = nar_size <= KEEP_WHOLE_MAX
        writer = _Batches(path, nar_hash, nar_size, self.cache if keep else None)
        try:
            while True:
                batch, span, done = await loop.run_in_executor(self.executor, writer.next)
                if done and not writer.kept:
                    self.report(f"serve: {path} does not match its registration; the client will refuse it "
                                "(`cudapkgs verify` says more)")
                if batch:
                    await conn.write(batch)
                if span is not None:
                    with open(nar.open_span(span), "rb", buffering=0) as file:  # no FIFO, link or other file
                        if await conn.sendfile(file, 0, span.size) != span.size:
                            raise ConnectionError(f"{os.fsdecode(span.path)} became shorter while it was sent")
                if done:
                    break
        except (OSError, ValueError) as error:
            if not isinstance(error, ConnectionError):
                self.report(f"serve: cannot send {path}: {error}")
            conn.abort()
            await loop.run_in_executor(self.executor, writer.discard)
        return 200


def _nar_hash_of(cached: CachedNar) -> str:
    """The NAR hash a cache entry's file name carries."""
    return "sha256:" + cached.file.name.split(".", 1)[0]


class _Batches:
    """The NAR of one path in batches of about `BATCH` bytes (run in the executor, one call at a time).

    Each `next()` returns (bytes to send, a `nar.FileSpan` to sendfile after them or None, done).
    With a `cache`, every byte also goes to a temporary file and its sha256; the call that returns
    done keeps the file if the NAR hashes to `nar_hash` (`kept` says whether it did: always True
    without a cache). Without one, file contents over `SENDFILE_MIN` come as spans.
    """

    def __init__(self, path: str, nar_hash: str, nar_size: int, cache: NarCache | None) -> None:
        import hashlib

        self.nar_hash = nar_hash
        self.kept = True
        self.nar_size = nar_size
        self.cache = cache
        self.parts = nar.dump_parts(path, KEEP_WHOLE_MAX if cache is not None else SENDFILE_MIN)
        self.size = 0
        self.sha = hashlib.sha256() if cache is not None else None
        self.file, self.temp = None, None
        if cache is not None:
            fd, self.temp = cache.temporary()
            self.file = os.fdopen(fd, "wb")

    def next(self) -> tuple[bytes, nar.FileSpan | None, bool]:
        pending: list[bytes] = []
        pending_size = 0
        for part in self.parts:
            if isinstance(part, nar.FileSpan):
                self._count(part.size)
                return self._out(pending), part, False
            pending.append(part)
            pending_size += len(part)
            if pending_size >= BATCH:
                return self._out(pending), None, False
        data = self._out(pending)
        self.kept = self._finish()
        return data, None, True

    def _count(self, n: int) -> None:
        self.size += n
        if self.size > self.nar_size:
            raise ValueError(f"the path gives more than its registered {self.nar_size} NAR bytes")

    def _out(self, pending: list[bytes]) -> bytes:
        data = b"".join(pending)
        self._count(len(data))
        if self.sha is not None and self.file is not None:
            self.sha.update(data)
            self.file.write(data)
        return data

    def _finish(self) -> bool:
        """Keep the temporary file as the cache entry if the NAR was whole and right; whether it was."""
        if self.cache is None or self.temp is None or self.sha is None or self.file is None:
            return True
        self.file.close()
        self.file = None
        if self.size == self.nar_size and "sha256:" + base32_encode(self.sha.digest()) == self.nar_hash:
            self.cache.publish(self.temp, self.nar_hash, "none")
            return True
        self.temp.unlink(missing_ok=True)
        return False

    def discard(self) -> None:
        """Drop the temporary file (the response was cut short)."""
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.temp is not None:
            self.temp.unlink(missing_ok=True)


def _fit_open_files(limits: Limits, workers: int, report: Callable[[str], None]) -> Limits:
    """`limits` with max_connections within what RLIMIT_NOFILE allows (raising the soft limit up to the hard one).

    Each connection may hold two descriptors (its socket and a file it sends); the store, the
    executor's temporary files and the listening socket need a few dozen more.
    """
    from dataclasses import replace

    reserve = 32 + 2 * workers
    need = 2 * limits.max_connections + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(hard, need)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < need:
        fitting = max(1, (soft - reserve) // 2)
        report(f"serve: at most {fitting} connections at once (open-file limit {soft}; `ulimit -n` raises it)")
        return replace(limits, max_connections=fitting)
    return limits


def make_server(store_root: str, host: str = "127.0.0.1", port: int = 8080, *, secret_key: SecretKey | None = None,
                log: Callable[[str], None] | None = None, compression: str = "none", compression_level: int | None = None,
                limits: Limits | None = None,
                cache_dir: str | os.PathLike[str] | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES,
                report: Callable[[str], None] | None = None, workers: int = 4) -> HTTPServer:
    """An HTTP server for the store at `store_root` (bound, not yet serving); `serve_forever()`, `shutdown()`, `server_close()`.

    `log(line)`: one line per request (None: none); `report(line)`: errors worth a line even
    when requests are not logged (default: `log`). `compression`: "none" or "zstd" (narinfos
    then point at zstd NARs, compressed once and kept), `compression_level` zstd's level (None or -1: 3;
    1-22, `compression.check_level`; a NAR kept at another level is served as it is: its file hash is in
    its name and narinfo, so it is still right). `limits`: see `httpd.Limits` (its
    max_connections is lowered to fit the open-file limit). `cache_dir`: where NARs are kept
    (default `serve_cache.default_cache_dir`), `cache_bytes` their budget. Raises OSError if the
    address cannot be bound, StoreError for a store or cache directory that cannot be used, or a
    compression level that `compression` does not take.
    """
    say = report or log or (lambda _line: None)
    limits = _fit_open_files(limits or Limits(), workers, say)
    root = os.path.abspath(os.fspath(store_root))
    cache = NarCache(cache_dir if cache_dir is not None else default_cache_dir(root), cache_bytes)
    service = _Service(root, secret_key, compression, cache, workers, say, compression_level)
    try:
        server = HTTPServer(service.handle, host, port, limits=limits, log=log, on_close=service.close)
    except BaseException:
        service.close()
        raise
    server.report = say  # type: ignore[method-assign]
    return server
