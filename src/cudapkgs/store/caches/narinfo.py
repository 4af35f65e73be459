"""`<hash>.narinfo` files and `nix-cache-info`: the text formats of a Nix binary cache.

A narinfo describes one store path: where its compressed NAR lies (URL,
Compression, FileHash, FileSize), what the NAR is (NarHash, NarSize), what it
refers to (References, as base names) and who signed it (Sig, repeatable).
Field names and meanings follow Nix's `NarInfo` (NixOS/nix
src/libstore/nar-info.cc); the signed fingerprint is Nix's
`ValidPathInfo::fingerprint` (src/libstore/path-info.cc):

    1;<store path>;<NarHash as sha256:base-32>;<NarSize>;<references as full paths, sorted, comma-separated>
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from ...errors import StoreError
from ...inputs import parse_decimal
from ..paths import BASE32_CHARS, HASH_LEN, is_hash_part

__all__ = ["CacheInfo", "NarInfo", "NarInfoError", "COMPRESSIONS", "MAX_OBJECT_BYTES", "READ_COMPRESSIONS"]

#: Compression name in a narinfo -> file extension of its NAR (Nix's names): what cudapkgs writes.
COMPRESSIONS = {"zstd": ".zst", "xz": ".xz", "bzip2": ".bz2", "none": ""}
#: What cudapkgs reads: the written ones and the two more Nix can write (`nix copy --to 'file://…?compression=br'`;
#: NixOS/nix src/libutil/compression.cc names them "br" and "gzip").
READ_COMPRESSIONS = (*COMPRESSIONS, "gzip", "br")

# What Nix's parser requires (NixOS/nix src/libstore/nar-info.cc): a narinfo without Compression means
# bzip2, and nix-serve and other servers of uncompressed NARs write no FileHash/FileSize.
_REQUIRED = ("StorePath", "URL", "NarHash", "NarSize")
_MAX_SIZE = 2**64 - 1  # NarSize and FileSize are uint64_t in Nix (libstore/nar-info.cc)
# Fields Nix writes that cudapkgs reads. Any other field is skipped, as Nix's parser skips it (NixOS/nix
# src/libstore/nar-info.cc: the `if (name == ...)` chain has no final else): a newer Nix or another server
# may add fields. A skipped field is never trusted: the signed fingerprint covers none of them, and
# `NarInfo.unknown` only keeps their names (for a message).
_KNOWN = set(_REQUIRED) | {"Compression", "FileHash", "FileSize", "References", "Deriver", "Sig", "System", "CA"}
_SHA256_B32 = re.compile(f"sha256:[{BASE32_CHARS}]{{52}}")
_URL = re.compile(r"[A-Za-z0-9+\-._=/]+")
_MAX_NARINFO = 1 << 20
#: The largest NAR (compressed or not) a cache may hand over, whatever its narinfo says: 1 TiB.
MAX_OBJECT_BYTES = 1 << 40


class NarInfoError(StoreError):
    """A narinfo (or nix-cache-info) is malformed; the message names where it came from."""


@dataclass(frozen=True)
class NarInfo:
    """One `<hash>.narinfo`: sizes in bytes, hashes as "sha256:<Nix base-32>".

    `references` and `deriver` are base names (as in the file); `sigs` are
    "keyname:base64" strings.
    """

    store_path: str
    url: str
    compression: str
    file_hash: str | None
    file_size: int | None
    nar_hash: str
    nar_size: int
    references: tuple[str, ...] = ()
    deriver: str | None = None
    sigs: tuple[str, ...] = field(default=())
    system: str | None = None
    ca: str | None = None
    #: Names of the fields the parser skipped (not known to cudapkgs; never written back, never trusted).
    unknown: tuple[str, ...] = field(default=(), compare=False)

    @property
    def store_dir(self) -> str:
        return os.path.dirname(self.store_path)

    @property
    def download_size(self) -> int:
        """Bytes to download: FileSize, or NarSize when the cache does not say (an upper bound for a compressed NAR)."""
        return self.file_size if self.file_size is not None else self.nar_size

    def file_size_bound(self) -> int:
        """The most bytes the compressed NAR may have: what the signed NarSize can compress to at worst,
        or FileSize (not signed) when that is smaller; never more than `MAX_OBJECT_BYTES`.

        The worst cases fit in NarSize + NarSize/32 + 1 MiB: zstd's ``ZSTD_COMPRESSBOUND`` (n + n/256
        + under 64 bytes; facebook/zstd lib/zstd.h), bzip2's 1 % + 600 bytes (bzip2 manual,
        ``BZ2_bzBuffToBuffCompress``), xz's few bytes per 64 KiB chunk (liblzma ``lzma_block_buffer_bound``),
        gzip's 5 bytes per 64 KiB stored block (RFC 1951 section 3.2.4) and brotli's few bytes per
        uncompressed meta-block (RFC 7932 section 9.2); "none" is the NAR itself. A cache adding padding (zstd skippable frames) past this is cut off.
        """
        if self.compression == "none":
            bound = self.nar_size
        else:
            bound = self.nar_size + self.nar_size // 32 + (1 << 20)
        if self.file_size is not None:
            bound = min(bound, self.file_size)
        return min(bound, MAX_OBJECT_BYTES)

    @property
    def hash_part(self) -> str:
        return os.path.basename(self.store_path)[:HASH_LEN]

    def reference_paths(self) -> list[str]:
        """The references as full store paths, sorted (as in the fingerprint)."""
        return sorted(f"{self.store_dir}/{r}" for r in self.references)

    def fingerprint(self) -> bytes:
        """What an ed25519 signature covers (Nix's `ValidPathInfo::fingerprint`)."""
        if self.nar_size <= 0:
            raise NarInfoError(f"cannot fingerprint {self.store_path}: its NAR size is not known")
        return f"1;{self.store_path};{self.nar_hash};{self.nar_size};{','.join(self.reference_paths())}".encode()

    def with_sigs(self, sigs: tuple[str, ...]) -> NarInfo:
        return replace(self, sigs=tuple(sigs))

    def to_text(self) -> str:
        """The narinfo file's text, fields in Nix's order."""
        lines = [
            f"StorePath: {self.store_path}",
            f"URL: {self.url}",
            f"Compression: {self.compression}",
            *([f"FileHash: {self.file_hash}"] if self.file_hash is not None else []),
            *([f"FileSize: {self.file_size}"] if self.file_size is not None else []),
            f"NarHash: {self.nar_hash}",
            f"NarSize: {self.nar_size}",
            f"References: {' '.join(sorted(self.references))}",
        ]
        if self.deriver:
            lines.append(f"Deriver: {self.deriver}")
        if self.system:
            lines.append(f"System: {self.system}")
        lines += [f"Sig: {s}" for s in self.sigs]
        if self.ca:
            lines.append(f"CA: {self.ca}")
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str | bytes, whence: str) -> NarInfo:
        """Parse a narinfo; NarInfoError naming `whence` on any missing or malformed field.

        Fields cudapkgs does not know are skipped (their names land in `unknown`), as Nix does.
        """
        if isinstance(text, bytes):
            if len(text) > _MAX_NARINFO:
                raise NarInfoError(f"{whence}: not a narinfo (larger than {_MAX_NARINFO} bytes)")
            try:
                text = text.decode()
            except UnicodeDecodeError:
                raise NarInfoError(f"{whence}: not a narinfo (not UTF-8)") from None
        fields: dict[str, str] = {}
        sigs: list[str] = []
        unknown: list[str] = []
        # Lines end at "\n" only, as in Nix's parser: str.splitlines would also split a value at
        # U+2028, U+0085 or a form feed, and read fields no other client sees.
        for number, line in enumerate(text.split("\n"), 1):
            if not line:
                continue
            key, sep, value = line.partition(": ")
            if not sep and line.endswith(":"):  # "References:" with nothing after it
                key, sep, value = line[:-1], ":", ""
            if not sep:
                raise NarInfoError(f"{whence}: line {number} is not 'Field: value'")
            if key not in _KNOWN:
                if key not in unknown and len(unknown) < 16:
                    unknown.append(key[:64])
                continue
            if key == "Sig":
                sigs.append(value)
            elif key in fields:
                raise NarInfoError(f"{whence}: field {key} given twice")
            else:
                fields[key] = value
        missing = [k for k in _REQUIRED if k not in fields]
        if missing:
            raise NarInfoError(f"{whence}: missing field(s) {', '.join(missing)}")
        store_path = fields["StorePath"]
        base = os.path.basename(store_path)
        if not store_path.startswith("/") or not is_hash_part(base[:HASH_LEN]) or base[HASH_LEN : HASH_LEN + 1] != "-":
            raise NarInfoError(f"{whence}: StorePath {store_path!r} is not a store path")
        for key in ("FileHash", "NarHash"):
            if key in fields and not _SHA256_B32.fullmatch(fields[key]):
                raise NarInfoError(f"{whence}: {key} {fields[key]!r} is not sha256:<base-32>")
        sizes: dict[str, int | None] = {"FileSize": None}
        for key in ("FileSize", "NarSize"):
            if key not in fields:
                continue
            try:
                sizes[key] = parse_decimal(fields[key])
            except ValueError:
                raise NarInfoError(f"{whence}: {key} {fields[key]!r} is not a number (ASCII digits)") from None
            if sizes[key] > _MAX_SIZE:  # type: ignore[operator]
                # Nix reads sizes as uint64_t and refuses more; a size past it is no size any NAR has.
                raise NarInfoError(f"{whence}: {key} {fields[key]} is larger than 2^64 - 1 bytes (what Nix can "
                                   "read); the narinfo is corrupt or hostile")
        compression = fields.get("Compression", "bzip2")
        if compression not in READ_COMPRESSIONS:
            raise NarInfoError(f"{whence}: compression {compression!r} is not supported ({', '.join(READ_COMPRESSIONS)})")
        url = fields["URL"]
        if not _URL.fullmatch(url) or url.startswith("/") or ".." in url.split("/"):
            raise NarInfoError(f"{whence}: URL {url!r} is not a relative path inside the cache")
        refs = tuple(r for r in fields.get("References", "").split(" ") if r)  # spaces only, as Nix splits them
        for ref in refs:
            if not is_hash_part(ref[:HASH_LEN]) or ref[HASH_LEN : HASH_LEN + 1] != "-" or "/" in ref:
                raise NarInfoError(f"{whence}: reference {ref!r} is not a store path base name")
        deriver = fields.get("Deriver") or None
        if deriver is not None and ("/" in deriver or not deriver.endswith(".drv")):
            raise NarInfoError(f"{whence}: Deriver {deriver!r} is not a .drv base name")
        for sig in sigs:
            if ":" not in sig:
                raise NarInfoError(f"{whence}: Sig {sig!r} is not keyname:base64")
        return cls(
            store_path=store_path, url=url, compression=compression, file_hash=fields.get("FileHash"),
            file_size=sizes["FileSize"], nar_hash=fields["NarHash"], nar_size=sizes["NarSize"], references=refs,
            deriver=deriver, sigs=tuple(sigs), system=fields.get("System"), ca=fields.get("CA"),
            unknown=tuple(unknown),
        )


@dataclass(frozen=True)
class CacheInfo:
    """`nix-cache-info`: the cache's store directory, and Nix's WantMassQuery and Priority."""

    store_dir: str
    want_mass_query: bool = True
    priority: int = 40

    def to_text(self) -> str:
        return f"StoreDir: {self.store_dir}\nWantMassQuery: {int(self.want_mass_query)}\nPriority: {self.priority}\n"

    @classmethod
    def parse(cls, text: bytes, whence: str) -> CacheInfo:
        """Parse nix-cache-info; NarInfoError naming `whence` if StoreDir is absent."""
        values: dict[str, str] = {}
        try:
            decoded = text[:65536].decode()
        except UnicodeDecodeError:
            raise NarInfoError(f"{whence}: nix-cache-info is not UTF-8") from None
        for line in decoded.splitlines():
            key, sep, value = line.partition(": ")
            if sep:
                values[key] = value.strip()
        if not values.get("StoreDir", "").startswith("/"):
            raise NarInfoError(f"{whence}: nix-cache-info has no StoreDir")
        try:
            priority = parse_decimal(values.get("Priority", "40"))
        except ValueError:
            priority = 40
        return cls(values["StoreDir"], values.get("WantMassQuery", "1") == "1", priority)
