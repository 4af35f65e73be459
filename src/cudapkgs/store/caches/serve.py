"""`cudapkgs serve`: a store as a read-only binary cache over HTTP (what nix-serve does for Nix).

    GET /nix-cache-info                 StoreDir of this store
    GET /<hash part>.narinfo            generated from the store's metadata (signed on the fly with a key)
    GET /nar/<hash part>-<nar hash>.nar the path's NAR, streamed uncompressed (Compression: none)

Nothing is written: any other method is 405. The NAR is produced from the files
as they are, so a path modified since registration gives a NAR whose hash does not
match its narinfo, and a client refuses it.
"""

from __future__ import annotations

import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .. import nar
from ..paths import BASE32_CHARS, HASH_LEN
from .narinfo import CacheInfo, NarInfo
from .signing import SecretKey

__all__ = ["make_server", "narinfo_for"]

_NARINFO = re.compile(f"/([{BASE32_CHARS}]{{{HASH_LEN}}})\\.narinfo")
_NAR = re.compile(f"/nar/([{BASE32_CHARS}]{{{HASH_LEN}}})-([{BASE32_CHARS}]{{52}})\\.nar")


def narinfo_for(store, path: str, secret_key: SecretKey | None = None) -> NarInfo:
    """The narinfo describing the valid `path` of `store` as this server offers it (uncompressed NAR)."""
    info = store.query(path)
    digest = info.nar_hash.split(":", 1)[1]
    narinfo = NarInfo(
        store_path=info.path, url=f"nar/{os.path.basename(info.path)[:HASH_LEN]}-{digest}.nar", compression="none",
        file_hash=info.nar_hash, file_size=info.nar_size, nar_hash=info.nar_hash, nar_size=info.nar_size,
        references=tuple(sorted(os.path.basename(r) for r in info.references)),
        deriver=os.path.basename(info.deriver) if info.deriver else None,
    )
    if secret_key is not None:
        narinfo = narinfo.with_sigs((secret_key.sign(narinfo.fingerprint()),))
    return narinfo


def _find(store, hash_part: str) -> str | None:
    prefix = f"{store.store_dir}/{hash_part}-"
    row = store.db.conn.execute(
        "SELECT path FROM ValidPaths WHERE path >= ? AND path < ? LIMIT 1", (prefix, prefix[:-1] + ".")
    ).fetchone()
    return row[0] if row else None


def make_server(store_root: str, host: str = "127.0.0.1", port: int = 8080, *, secret_key: SecretKey | None = None,
                log=None) -> ThreadingHTTPServer:
    """A threading HTTP server for the store at `store_root`; call `serve_forever()`, stop with `shutdown()`."""
    from ..store import Store

    local = threading.local()
    opened: list = []
    lock = threading.Lock()

    def store():
        if not hasattr(local, "store"):
            local.store = Store.open(store_root)
            with lock:
                opened.append(local.store)
        return local.store

    class Handler(BaseHTTPRequestHandler):
        server_version = "cudapkgs-serve"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args) -> None:  # noqa: A002
            if log is not None:
                log(f"{self.address_string()} {format % args}")

        def _send(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            s = store()
            path = self.path.split("?", 1)[0]
            if path == "/nix-cache-info":
                return self._send(200, CacheInfo(s.store_dir, priority=30).to_text().encode(), "text/x-nix-cache-info")
            m = _NARINFO.fullmatch(path)
            if m:
                found = _find(s, m[1])
                if found is None:
                    return self._send(404, b"no such path\n")
                text = narinfo_for(s, found, secret_key).to_text().encode()
                return self._send(200, text, "text/x-nix-narinfo")
            m = _NAR.fullmatch(path)
            if m:
                found = _find(s, m[1])
                if found is None:
                    return self._send(404, b"no such path\n")
                info = s.query(found)
                if info.nar_hash != f"sha256:{m[2]}":
                    return self._send(404, b"no such NAR\n")
                self.send_response(200)
                self.send_header("Content-Type", "application/x-nix-nar")
                self.send_header("Content-Length", str(info.nar_size))
                self.end_headers()
                if self.command == "HEAD":
                    return None
                try:
                    for chunk in nar.dump(found):
                        self.wfile.write(chunk)
                except (OSError, ValueError):
                    self.close_connection = True  # the client sees a short body and refuses it
                return None
            return self._send(404, b"not found\n")

        do_HEAD = do_GET  # noqa: N815

        def _read_only(self) -> None:
            self._send(405, b"this cache is read-only\n")

        do_PUT = do_POST = do_DELETE = do_PATCH = _read_only  # noqa: N815

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def server_close(self) -> None:
            super().server_close()
            with lock:
                for s in opened:
                    s.close()
                opened.clear()

    return Server((host, port), Handler)
