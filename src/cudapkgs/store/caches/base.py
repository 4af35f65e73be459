"""`Cache`: a Nix binary cache, whatever it is stored on; backends supply four primitives.

Layout (Nix's, so Nix and cudapkgs read each other's caches):

    nix-cache-info                    StoreDir, WantMassQuery, Priority
    <hash part>.narinfo               one per store path (see `narinfo.py`)
    nar/<file hash>.nar.zst|.xz|      the compressed NARs, named by the sha256 of the compressed file

A backend implements `_get` (a readable stream of at most the bytes the caller allows, or None
when the object is absent), `_exists`, `_put_bytes` and `_put_file`; uploads go NAR first and
narinfo last, so a reader never sees a narinfo whose NAR is not all there.
Everything streams: memory is bounded by a few MiB whatever the NAR's size.

The three operations other code builds on (issue 14's distributed builds among
them) are `narinfo(path)`, `upload(store, path, ...)` and `substitute(store, path, ...)`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, BinaryIO

from ...errors import StoreError
from .. import nar
from ..content_address import ContentAddress, derive_content_address, file_sha256, parse_content_address, store_path_for
from ..nar_restore import HashingReader, NarFormatError, restore
from ..paths import base32_encode, hash_part
from ..direct_writes import DirectWriter, direct_writes_wanted
from .compression import HashingFile, compress_stream, decompressed_reader
from .narinfo import COMPRESSIONS, CacheInfo, NarInfo, NarInfoError
from .signing import PublicKey, SecretKey

__all__ = ["Cache", "CacheError", "CacheUnavailable", "ObjectTooLarge", "SubstituteRefused"]


class CacheError(StoreError):
    """Something went wrong with a binary cache; the message names the cache and the path."""


class CacheUnavailable(CacheError):
    """The cache does not answer (connection refused, DNS, timeout, 5xx): stop asking it for this run."""


class SubstituteRefused(CacheError):
    """A narinfo or NAR failed a check (signature, hash, size, references); nothing was registered."""


class ObjectTooLarge(SubstituteRefused):
    """A backend saw an object pass the byte bound its reader gave (`Cache._get`'s `max_bytes`)."""


#: Nix's StoreConfig settings a substituter URL commonly carries (``https://cache.nixos.org?priority=40``;
#: NixOS/nix src/libstore/store-api.hh, ``priority`` and ``want-mass-query``): accepted so that such a URL
#: works, and not used: cudapkgs asks its substituters in the order they are listed, and asks every one for
#: the paths it needs.
SUBSTITUTER_SETTINGS = ("priority", "want-mass-query")

#: The values Nix takes for them (an int setting; a bool one: Nix's pre-JSON "true"/"false"/"1"/"0"/"yes"/"no",
#: NixOS/nix src/libutil/config.cc), as (pattern, what it must be): a value outside is refused, as Nix does.
_SETTING_VALUES = {
    "priority": (r"-?[0-9]{1,9}", "an integer"),
    "want-mass-query": (r"true|false|1|0|yes|no", "true or false"),
}


def url_settings(url: str, query: str, known: Iterable[str] = ()) -> dict[str, str]:
    """The store settings in a cache URL's `query` (``compression-level=9&…``): {name: value}.

    Nix reads a binary cache's settings from its URL's query (``file:///dir?compression=xz&compression-level=5``,
    NixOS/nix tests/functional/compression-levels.sh@88b09c6). cudapkgs takes ``compression-level`` on
    every backend, Nix's `SUBSTITUTER_SETTINGS` (accepted, not used), and the names in `known` (a
    backend's own: S3's region, endpoint…). Anything else, a name given twice, or a part that is no
    ``name=value``, raises CacheError naming `url`: a misspelled setting would otherwise do nothing
    without a word. Nix's ``trusted`` (substitutes without a trusted signature) is refused with the way
    to trust the cache's key instead.
    """
    import re
    import urllib.parse

    from ...errors import shown_cache_url  # a caller's `url` may hold credentials: never shown

    allowed = {"compression-level", *SUBSTITUTER_SETTINGS, *known}
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError:
        raise CacheError(f"{shown_cache_url(url)}: its query is not name=value&…") from None
    settings: dict[str, str] = {}
    for name, value in pairs:
        if name == "trusted":  # Nix's StoreConfig `isTrusted`: substitutes without a trusted signature
            raise CacheError(f"{shown_cache_url(url)}: the setting 'trusted' is not taken: cudapkgs checks every "
                             "substitute's signature; trust the cache's key instead (trustedPublicKeys, "
                             "--trusted-public-key)")
        if name == "compression" and name not in allowed:  # Nix's; here a flag of copy --to and serve
            raise CacheError(f"{shown_cache_url(url)}: the setting 'compression' is not taken on the URL: "
                             "give --compression (copy --to, serve) instead")
        if name not in allowed:
            raise CacheError(f"{shown_cache_url(url)}: unknown setting {name!r} (this cache takes {', '.join(sorted(allowed))})")
        if name in _SETTING_VALUES and re.fullmatch(_SETTING_VALUES[name][0], value) is None:
            raise CacheError(f"{shown_cache_url(url)}: {name}={value!r} is not {_SETTING_VALUES[name][1]}")
        if name in settings:
            raise CacheError(f"{shown_cache_url(url)}: the setting {name!r} is given twice")
        settings[name] = value
    return settings


def _compression_level(url: str, settings: dict[str, str]) -> int | None:
    """The ``compression-level`` of `settings` as an int (None when absent or -1, Nix's "default"); CacheError if it is no integer.

    Its range depends on the compression, known only at upload: `compression.check_level` checks it there."""
    text = settings.get("compression-level")
    if text is None:
        return None
    import re

    if re.fullmatch(r"-?[0-9]{1,4}", text) is None:  # ASCII digits only (int() takes others), short
        from ...errors import shown_cache_url

        raise CacheError(f"{shown_cache_url(url)}: compression-level={text!r} is not an integer (zstd 1-22, xz 0-9, bzip2 1-9; -1: the default)")
    level = int(text)
    return None if level == -1 else level


class Cache:
    """A binary cache at `url`. Thread-safe: every call opens its own connection or file.

    `settings`: the store settings of its URL (`url_settings`); ``compression-level`` is kept as
    `compression_level` (None: the compression's default), the level `upload` compresses at unless told.
    """

    #: Backends whose `_put_file` can move a temporary file into place (file://) set this.
    local_dir: str | None = None

    def __init__(self, url: str, settings: dict[str, str] | None = None) -> None:
        self.url = url
        self._info: CacheInfo | None = None
        self.compression_level = _compression_level(url, settings or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- backend primitives -------------------------------------------------

    def _get(self, name: str, max_bytes: int) -> BinaryIO | None:
        """A readable stream of object `name` (close it), or None if absent; CacheUnavailable if the cache is down.

        `max_bytes` is the most the caller will read: a backend refuses (CacheError) an object it can
        tell is larger, and never reads much past it. Only regular files or a response body are read.
        """
        raise NotImplementedError

    def _exists(self, name: str) -> bool:
        raise NotImplementedError

    def _put_bytes(self, name: str, data: bytes, content_type: str) -> None:
        raise NotImplementedError

    def _put_file(self, name: str, local: str, content_type: str) -> None:
        """Store the local file `local` as `name` (atomically for readers); `local` may be moved."""
        raise NotImplementedError

    def _upload_temp(self) -> Any:
        """Where `upload` compresses a NAR before `_put_file`: an object with `fd` (open for writing),
        `path` and `close()` (removes the file if `_put_file` did not move it). Here a locked temporary
        (`upload_temps`) in ``<tmp>/cudapkgs-<uid>``, which the next upload's `init` clears of those whose
        writer was killed (they were ``/tmp/.upload-*.nar``, left there by a SIGKILL); a plain temporary
        file where that directory cannot be used. A file cache's are in its own directory."""
        from . import upload_temps

        root = _private_upload_root()
        if root is None:
            return _SystemTemp()
        try:
            return upload_temps.create(root)
        except OSError as error:
            raise CacheError(f"cannot create a temporary file for an upload to {self.url}: "
                             f"{error.strerror or error} ({error.filename})") from None

    def _read_small(self, name: str, limit: int = 1 << 20) -> bytes | None:
        too_large = CacheError(f"{self.url}/{name}: larger than {limit} bytes, not a narinfo")
        try:
            stream = self._get(name, limit)
            if stream is None:
                return None
            with contextlib.closing(stream):
                # One receive at a time where the backend can (a peer dripping bytes is cut early); reads may be short.
                read = getattr(stream, "read1", stream.read)
                data = b""
                while len(data) <= limit and (chunk := read(limit + 1 - len(data))):
                    data += chunk
        except ObjectTooLarge:
            raise too_large from None
        if len(data) > limit:
            raise too_large
        return data

    # -- reading -------------------------------------------------------------

    def cache_info(self) -> CacheInfo | None:
        """The cache's nix-cache-info, or None for a cache nothing was uploaded to yet."""
        if self._info is None:
            data = self._read_small("nix-cache-info")
            if data is None:
                return None
            self._info = CacheInfo.parse(data, f"{self.url}/nix-cache-info")
        return self._info

    def narinfo(self, path: str) -> NarInfo | None:
        """The narinfo of store path `path`, or None if the cache does not have it.

        Raises CacheUnavailable when the cache does not answer, NarInfoError
        (naming the cache and the path) when the narinfo is malformed or describes another path.
        """
        name = hash_part(path) + ".narinfo"
        data = self._read_small(name)
        if data is None:
            return None
        info = NarInfo.parse(data, f"{self.url}/{name} ({path})")
        if info.store_path != path:
            raise NarInfoError(f"{self.url}/{name}: describes {info.store_path}, not {path}")
        return info

    def check_store_dir(self, store_dir: str) -> None:
        """CacheError if the cache holds paths of another store directory."""
        info = self.cache_info()
        if info is not None and info.store_dir != store_dir:
            raise CacheError(
                f"{self.url} holds paths of the store {info.store_dir}, not {store_dir}: "
                "store paths embed their store directory, so only a store at "
                f"{info.store_dir} (storeDir, or --store) can use this cache; {store_dir}'s paths need "
                "a cache of their own"
            )

    # -- substituting ----------------------------------------------------------

    def verify(self, info: NarInfo, trusted_keys: Iterable[PublicKey], *, require_sigs: bool = True) -> ContentAddress | None:
        """SubstituteRefused unless a signature of `info` verifies with one of `trusted_keys` (when required)
        or `info` is content-addressed.

        Returns the content address that stands in for a signature (the caller must check the
        contents against it), or None when a signature (or no requirement) let `info` through. As
        Nix: a `CA:` whose address makes exactly `info.store_path` needs no signature
        (`content_address` cites Nix's source); one that does not is ignored.
        """
        if not require_sigs:
            return None
        keys = list(trusted_keys)
        fingerprint = info.fingerprint()
        if any(key.verify(sig, fingerprint) for key in keys for sig in info.sigs):
            return None
        if info.ca:
            ca = parse_content_address(info.ca)
            refs = [f"{info.store_dir}/{r}" for r in info.references]
            name = os.path.basename(info.store_path)[33:]
            if ca is not None and store_path_for(info.store_dir, name, ca, refs, info.store_path) == info.store_path:
                return ca
        signed_by = ", ".join(sorted({s.partition(":")[0] for s in info.sigs})) or "nobody"
        trusted = ", ".join(k.name for k in keys) or "no key (set trustedPublicKeys)"
        names = {k.name for k in keys}
        by_trusted = sorted({s.partition(":")[0] for s in info.sigs} & names)
        if by_trusted:
            # A trusted key's name signed, but its signature does not verify with the trusted key of
            # that name. Said as Nix says the refusal ("cannot add path '%s' because it lacks a
            # signature by a trusted key", NixOS/nix src/libstore/local-store.cc, addToStore), the
            # likelier cause first: a cache re-keyed under the same name, more often than tampering.
            named = ", ".join(by_trusted)
            raise SubstituteRefused(
                f"{info.store_path} from {self.url} lacks a signature by a trusted key: it is signed by a key named "
                f"{named}, as a trusted key is, but the signature does not verify with the trusted {named}: a "
                "different key under that name signed it (compare the cache's public key with trustedPublicKeys), "
                "or its fields (StorePath, NarHash, NarSize or References) changed after signing; not substituted"
            )
        raise SubstituteRefused(
            f"{info.store_path} from {self.url}: no valid signature by a trusted key "
            f"(signed by: {signed_by}; trusted: {trusted}); not substituted"
        )

    def substitute(
        self,
        store,
        path: str,
        *,
        trusted_keys: Iterable[PublicKey] = (),
        require_sigs: bool = True,
        info: NarInfo | None = None,
        on_bytes=None,
        wait_for_references=None,
        expected: Iterable[str] = (),
    ) -> NarInfo:
        """Download, check and register one store path whose references are valid in `store` already.

        Checks, in order: the narinfo names `path` and is signed by a trusted key
        (unless `require_sigs` is False), every reference is valid in `store`, and
        while the NAR streams in, its FileSize and NarHash/NarSize. The signed References
        are registered as given (as Nix does); only with `require_sigs` False are the files
        scanned for store paths the list leaves out (refused then). Any
        failure raises SubstituteRefused (or CacheError / CacheUnavailable) naming
        the path and the cache; nothing is registered then. `on_bytes(n)` is called
        with the compressed bytes read so far. With `wait_for_references` (a callable
        returning once the references are registered, or raising), the NAR is unpacked
        at once and registered after it returns. `expected`: store paths that may become valid
        while this one unpacks (the rest of the closure being substituted), looked for as
        references during the one read when the files are scanned (`Store.add_verified_path`).
        Returns the narinfo used.
        """
        path = store.parse(path)
        if info is None:
            info = self.narinfo(path)
            if info is None:
                raise CacheError(f"{self.url} does not have {path}")
        if info.store_path != path:
            raise SubstituteRefused(f"{self.url}: the narinfo for {path} describes {info.store_path}")
        by_address = self.verify(info, trusted_keys, require_sigs=require_sigs)
        if by_address is not None and by_address.method == "nar" and by_address.render() != "fixed:r:" + info.nar_hash:
            raise SubstituteRefused(f"{path} from {self.url}: its CA {info.ca} and NarHash {info.nar_hash} disagree; not substituted")
        refs = [f"{store.store_dir}/{r}" for r in info.references]
        absent = [] if wait_for_references else [r for r in refs if r != path and not store.is_valid(r)]
        if absent:
            raise SubstituteRefused(
                f"{path} from {self.url}: its reference {absent[0]} is not valid in the store"
                + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else "")
                + "; substitute the closure, dependencies first"
            )

        bound = info.file_size_bound()  # from the signed NarSize: FileSize is not signed

        def fill(out, scanner=None) -> None:
            raw = self._get(info.url, bound)
            if raw is None:
                raise SubstituteRefused(f"{path} from {self.url}: its NAR {info.url} is missing")
            with contextlib.closing(raw):
                counted = _Counting(raw, on_bytes) if on_bytes else raw
                hashed = HashingFile(counted, limit=bound, hash=False)
                try:
                    reader = restore(decompressed_reader(hashed, info.compression), out, limit=info.nar_size, scanner=scanner)
                    while hashed.read(1 << 20):  # the rest of the compressed file (a zstd epilogue, say)
                        pass
                except (NarFormatError, ValueError, EOFError, OSError) as error:
                    if isinstance(error, OSError) and not _is_format_error(error):
                        raise
                    raise SubstituteRefused(f"{path} from {self.url}: the NAR {info.url} is damaged ({error}); not substituted") from None
                except Exception as error:  # zstandard.ZstdError, lzma.LZMAError, zlib.error, brotli.error (bz2: OSError/EOFError)
                    if type(error).__name__ not in ("ZstdError", "LZMAError") and not (
                            type(error).__name__ == "error" and type(error).__module__.startswith(("zlib", "brotli"))):
                        raise
                    raise SubstituteRefused(f"{path} from {self.url}: the NAR {info.url} is damaged ({error}); not substituted") from None
            # FileHash is not checked (Nix does not either): the signed NarHash covers the contents, and
            # hashing the compressed bytes too would cost a third more time. The signed NarSize bounds the
            # download (with FileSize when smaller): a cache cannot make it read forever (issue 23).
            if info.file_size is not None and hashed.size != info.file_size:
                raise SubstituteRefused(
                    f"{path} from {self.url}: {info.url} has {hashed.size} bytes, "
                    f"not the narinfo's {info.file_size}; not substituted"
                )
            nar_hash = "sha256:" + base32_encode(reader.sha256.digest())
            if (nar_hash, reader.size) != (info.nar_hash, info.nar_size):
                raise SubstituteRefused(
                    f"{path} from {self.url}: the NAR hashes to {nar_hash} ({reader.size} bytes), "
                    f"not the narinfo's {info.nar_hash} ({info.nar_size} bytes); not substituted"
                )
            if by_address is not None and by_address.method != "nar" and file_sha256(os.fspath(out)) != by_address.digest:
                # The NAR hash came from the (unsigned) narinfo: only the address vouches for the contents.
                raise SubstituteRefused(f"{path} from {self.url}: its contents do not match its CA {info.ca}; not substituted")
            # import's rule: a relative link, through every link on its way, stays in the store (a signed NAR
            # may still hold a chain such as a/s1 -> .., a/s2 -> s1/../..).
            from ... import confine

            try:
                confine.check_store_path_links(out, store.store_dir, os.path.basename(path))
            except confine.TreeEscapeError as error:
                raise SubstituteRefused(f"{path} from {self.url}: {error}; not substituted") from None

        deriver = f"{store.store_dir}/{info.deriver}" if info.deriver else None
        # References a trusted key signed (or that the content address fixes) are registered as given, the
        # files not scanned: Nix's rule (`Store.add_verified_path`'s trust_references cites its source); the
        # signer answers for them as for the NarHash. Without required signatures nothing vouches for them:
        # the files are scanned while the NAR streams, and a mention the list leaves out is refused.
        store.add_verified_path(path, fill, nar_hash=info.nar_hash, nar_size=info.nar_size, references=refs,
                                deriver=deriver, before_register=wait_for_references, source=self.url,
                                expected=expected, scans=True, trust_references=require_sigs)
        return info

    # -- uploading -------------------------------------------------------------

    def init(self, store_dir: str) -> None:
        """Write nix-cache-info if there is none; CacheError if the cache serves another store directory.
        Upload temporaries of killed uploads are removed first (`upload_temps.remove_stale`)."""
        root = _private_upload_root(create=False)
        if root is not None:
            from .upload_temps import remove_stale

            remove_stale(root)
        if self.cache_info() is None:
            info = CacheInfo(store_dir)
            self._put_bytes("nix-cache-info", info.to_text().encode(), "text/x-nix-cache-info")
            self._info = info
        else:
            self.check_store_dir(store_dir)

    def upload(
        self,
        store,
        path: str,
        *,
        secret_key: SecretKey | None = None,
        compression: str = "zstd",
        level: int | None = None,
        force: bool = False,
        workers: int = 1,
        on_start: Callable[[int], object] | None = None,
        on_bytes: Callable[[int], object] | None = None,
    ) -> NarInfo | None:
        """Upload one valid store path: its compressed NAR first, then its narinfo (signed with `secret_key`).

        `level`: the compression level (None: the cache URL's ``compression-level``, else the method's
        default); CacheError before anything is read if the method does not take it (`checked_level`).
        Returns the narinfo written, or None if the cache had the path already
        (and not `force`). The NAR is re-hashed while it streams and must match
        the store's record (StoreError otherwise: the store path was modified).
        `workers`: zstd frames compressed at once (`compression.compress_stream`). `on_bytes(done)`
        gets the NAR's bytes read so far, at most once a MiB (from the reading thread); `on_start(nar_size)`
        is called once the cache is found not to have the path, before anything is read.
        Call `init(store.store_dir)` once first (`upload_closure` does).
        """
        if compression not in COMPRESSIONS:
            raise CacheError(f"unsupported compression {compression!r} (zstd, xz, bzip2 or none)")
        level = self.checked_level(compression, level)
        record = store.query(path)
        if not force and self._exists(hash_part(record.path) + ".narinfo"):
            return None
        if on_start is not None:
            on_start(record.nar_size)
        temp = self._upload_temp()
        try:
            digest_nar = nar_sha = None
            with os.fdopen(temp.fd, "wb") as out:
                counted = _HashedChunks(nar.dump(record.path), on_bytes)
                # A big NAR's compressed file goes around the page cache (store/direct_writes.py; its size is
                # not known before it is written: the NAR's is the policy's estimate, and nothing is checked)
                direct = (DirectWriter(temp.fd, None) if direct_writes_wanted(os.path.dirname(temp.path), record.nar_size)
                          else None)
                # Reading and hashing in one thread, compressing and writing in this one (as `tar | zstd`
                # runs two processes); the queue holds a few MiB at most.
                try:
                    file_digest, file_size = compress_stream(_read_ahead(counted, depth=_AHEAD), direct or out, compression,
                                                             level=level, total=record.nar_size, workers=workers)
                    if direct is not None:
                        direct.finish()
                except ValueError as error:  # more or fewer bytes than registered: a frame's size would lie
                    raise StoreError(f"{record.path} was modified in the store (its NAR has {error}); run `cudapkgs "
                                     "verify`; not uploaded") from None
                finally:
                    if direct is not None:
                        direct.close()
                nar_sha, nar_size = counted.digest(), counted.size
            digest_nar = "sha256:" + base32_encode(nar_sha)
            if (digest_nar, nar_size) != (record.nar_hash, record.nar_size):
                raise StoreError(
                    f"{record.path} was modified in the store (its NAR hashes to {digest_nar}, registered "
                    f"{record.nar_hash}); run `cudapkgs verify`; not uploaded"
                )
            file_hash = base32_encode(file_digest)
            url = f"nar/{file_hash}.nar{COMPRESSIONS[compression]}"
            self._put_file(url, temp.path, "application/x-nix-nar")
        finally:
            temp.close()
        info = NarInfo(
            store_path=record.path, url=url, compression=compression, file_hash="sha256:" + file_hash,
            file_size=file_size, nar_hash=record.nar_hash, nar_size=record.nar_size,
            references=tuple(sorted(os.path.basename(r) for r in record.references)),
            deriver=os.path.basename(record.deriver) if record.deriver else None,
        )
        ca = derive_content_address(store.store_dir, record.path, record.nar_hash, list(record.references))
        if ca is not None:  # Nix then trusts it without a signature (content_address)
            info = replace(info, ca=ca.render())
        if secret_key is not None:
            info = info.with_sigs((secret_key.sign(info.fingerprint()),))
        self._put_bytes(hash_part(record.path) + ".narinfo", info.to_text().encode(), "text/x-nix-narinfo")
        return info

    def checked_level(self, compression: str, level: int | None = None) -> int | None:
        """The level an upload in `compression` uses: `level`, else the URL's ``compression-level``; None for the
        method's default. CacheError naming the cache when the method does not take it (`compression.check_level`)."""
        from .compression import check_level

        try:
            return check_level(compression, self.compression_level if level is None else level)
        except (TypeError, ValueError) as error:
            raise CacheError(f"{self.url}: {error}") from None

    def upload_closure(self, store, paths: Iterable[str], *, on_path=None, progress=None,
                       **options) -> list[tuple[str, NarInfo | None]]:
        """Upload the closure of `paths`, dependencies first; (path, narinfo or None if already there) for each.

        `on_path(index, total, path, narinfo or None)` is called after each path. `progress` (as
        `substitute_progress.PlainUploadProgress`) gets `begin(paths)` with the ordered closure,
        `started(path, nar_size)` once a path is found missing from the cache, before its upload, `bytes(path, done)` as its NAR is read
        (bytes of the uncompressed NAR; from the reading thread) and `finished(path, narinfo or None)`.
        """
        self.checked_level(options.get("compression", "zstd"), options.get("level"))  # before anything is written
        self.init(store.store_dir)
        closure = store.closure(store.parse(p) for p in paths)
        ordered = dependencies_first(store, closure)
        if progress is not None:
            progress.begin(ordered)
        results = []
        for index, path in enumerate(ordered, 1):
            on_start = on_bytes = None
            if progress is not None:
                on_start = functools.partial(progress.started, path)
                on_bytes = functools.partial(progress.bytes, path)
            results.append((path, self.upload(store, path, on_start=on_start, on_bytes=on_bytes, **options)))
            if progress is not None:
                progress.finished(path, results[-1][1])
            if on_path is not None:
                on_path(index, len(ordered), path, results[-1][1])
        return results


def dependencies_first(store, paths: Iterable[str]) -> list[str]:
    """`paths` ordered so that each comes after the paths it refers to (among `paths`)."""
    wanted = set(paths)
    order: list[str] = []
    seen: set[str] = set()
    for start in sorted(wanted):
        stack: list[tuple[str, Iterator[str]]] = []
        if start in seen:
            continue
        seen.add(start)
        stack.append((start, iter(sorted(store.references(start)))))
        while stack:
            node, refs = stack[-1]
            for ref in refs:
                if ref in wanted and ref not in seen and ref != node:
                    seen.add(ref)
                    stack.append((ref, iter(sorted(store.references(ref)))))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def _private_upload_root(*, create: bool = True) -> str | None:
    """``<system temporary directory>/cudapkgs-<uid>``, where uploads to remote caches compress (the
    file system they always used): made private to the user when `create`. None where it cannot be
    used: absent (without `create`), or not a real directory of this user's that only they may
    enter (another user may have made it first in a shared ``/tmp``)."""
    import stat
    import tempfile

    root = os.path.join(tempfile.gettempdir(), f"cudapkgs-{os.geteuid()}")
    if create:
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        st = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return root


class _SystemTemp:
    """A temporary file in the system's temporary directory (`Cache._upload_temp`)."""

    def __init__(self) -> None:
        import tempfile  # here: only uploads need it (random, shutil: a few ms of every start-up)

        self.fd, self.path = tempfile.mkstemp(prefix="cudapkgs-upload-", suffix=".part")

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class _HashedChunks:
    """Iterates `chunks`, hashing and counting them on the way."""

    def __init__(self, chunks: Iterable[bytes], on_bytes: Callable[[int], object] | None = None) -> None:
        import hashlib

        self._chunks = chunks
        self._sha = hashlib.sha256()
        self._on_bytes = on_bytes
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        told = 0
        for chunk in self._chunks:
            self._sha.update(chunk)
            self.size += len(chunk)
            if self._on_bytes is not None and self.size - told >= 1 << 20:
                told = self.size
                self._on_bytes(told)
            yield chunk
        if self._on_bytes is not None:
            self._on_bytes(self.size)

    def digest(self) -> bytes:
        return self._sha.digest()


#: Blocks of 1 MiB the upload's reader may be ahead: two zstd frames (with several workers a frame is handed
#: over whole), so the reader keeps going while frames compress.
_AHEAD = 16


def _read_ahead(chunks: Iterable[bytes], depth: int = 4, block: int = 1 << 20) -> Iterator[bytes]:
    """Iterate `chunks` in a worker thread, coalesced into blocks of about `block` bytes, `depth` blocks ahead."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        pending: list[bytes] = []
        size = 0
        try:
            for chunk in chunks:
                pending.append(chunk)
                size += len(chunk)
                if size >= block:
                    if not _put(q, b"".join(pending), stop):
                        return
                    pending, size = [], 0
            if pending:
                _put(q, b"".join(pending), stop)
            _put(q, done, stop)
        except BaseException as error:  # handed to the consumer, raised there
            _put(q, error, stop)

    worker = threading.Thread(target=produce, name="cudapkgs-nar-read", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def _put(q, item, stop) -> bool:
    import queue

    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


class _Counting:
    """`raw`, telling `on_bytes` the bytes read so far; it has `readinto` when `raw` has (no copy on the way)."""

    def __init__(self, raw: BinaryIO, on_bytes) -> None:
        self.raw, self.on_bytes, self.done = raw, on_bytes, 0
        if callable(getattr(raw, "readinto", None)):
            self.readinto = self._readinto

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.done += len(data)
        self.on_bytes(self.done)
        return data

    def _readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        self.done += n
        self.on_bytes(self.done)
        return n


def _is_format_error(error: OSError) -> bool:
    # zstandard raises plain OSError/ZstdError subclasses for corrupt input; real I/O errors carry an errno.
    return error.errno is None
