"""``cudapkgs manifests update``: downloading a manifest, validating it, and writing it to the user directory.

The maintainer workflow of Nixpkgs' manifest updates.  The HTTP client (`cudapkgs.transport.http`)
is imported only when a download is actually made; evaluation never imports this module (`cudapkgs.manifests`
loads it on first use of one of its names).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ManifestError
from .locate import (
    _HAND_MADE_PRODUCTS,
    SetUse,
    _check_name,
    _forget_parsed,
    _read_sha256_file,
    _sha256_path,
    manifest_file_name,
    override_directory,
    sets_using,
    user_directory,
    vendored_directory,
)
from .model import Manifest, parse_manifest

__all__ = ["REDIST_URL_PREFIX", "UpdateResult", "manifest_url", "update_manifest", "update_source_url", "validate_update"]

#: Where NVIDIA serves the redistributables and their manifests.
REDIST_URL_PREFIX = "https://developer.download.nvidia.com/compute"

# Download tuning; module attributes so that tests can shorten them.
_DOWNLOAD_TIMEOUT_S = 30.0
_DOWNLOAD_ATTEMPTS = 3
_DOWNLOAD_BACKOFF_S = 1.0  # delay before retry i (0-based) is BACKOFF * 2**i
_DOWNLOAD_MAX_BYTES = 64 * 1024 * 1024


def manifest_url(product: str, version: str) -> str:
    """NVIDIA's URL of the ``product`` ``version`` manifest."""
    _check_name("product", product)
    _check_name("version", version)
    if product in _HAND_MADE_PRODUCTS:
        raise ManifestError(
            f"{product} has no NVIDIA-published manifest (Nixpkgs writes the {product} manifests by hand); "
            f"give its file with --from URL, or point CUDAPKGS_MANIFESTS or the `manifestsDir` config key "
            f"at a manifest directory holding {product}/redistrib_{version}.json"
        )
    return f"{REDIST_URL_PREFIX}/{product}/redist/redistrib_{version}.json"


def _download(url: str, product: str, version: str) -> bytes:
    """The manifest at ``url``: over HTTP(S) through the one client (retries with backoff, a deadline,
    at most `_DOWNLOAD_MAX_BYTES`), or a local ``file:`` URL read as a regular file only.

    Raises `ManifestError` naming the URL, the reason and the next step.
    """
    next_step = "nothing was written (give a mirror with --from URL, or a local file)"
    if url.startswith("file:"):
        import urllib.parse

        from ..inputs import InputFileError, read_input_file

        try:  # unquote is url2pathname on POSIX, without loading urllib.request (and with it http.client)
            return read_input_file(urllib.parse.unquote(urllib.parse.urlsplit(url).path), what="manifest",
                                   max_bytes=_DOWNLOAD_MAX_BYTES)
        except InputFileError as error:  # a local file that is missing stays so: no retry, no backoff
            raise ManifestError(f"cannot read the {product} {version} manifest from {url}: {error.reason}; {next_step}") from None
    from ..transport.errors import TooLarge, TransferError
    from ..transport.http import Limits, get_bytes

    limits = Limits(max_bytes=_DOWNLOAD_MAX_BYTES, connect_s=_DOWNLOAD_TIMEOUT_S, read_s=_DOWNLOAD_TIMEOUT_S)
    try:
        return get_bytes(url, limits=limits, attempts=_DOWNLOAD_ATTEMPTS, backoff_s=_DOWNLOAD_BACKOFF_S)
    except TransferError as error:
        problem = f"larger than {_DOWNLOAD_MAX_BYTES} bytes" if isinstance(error, TooLarge) else error.reason
        raise ManifestError(
            f"cannot download the {product} {version} manifest from {error.url}: {problem}{error.tries}; {next_step}"
        ) from None


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync and os.replace (all or nothing).

    Raises OSError; the temporary file is removed on any failure.
    """
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_name = None
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as tmp:
            tmp_name = tmp.name
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, path)
        tmp_name = None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """What `update_manifest` did.

    ``status`` is ``"written"`` (new file), ``"replaced"`` (a different user copy was
    replaced) or ``"unchanged"`` (the user copy already had these bytes).  ``size`` is in
    bytes; ``sha256`` is hexadecimal; ``shadows`` is the vendored copy this file now wins
    over (None when there is none), and ``same_as_vendored`` says whether its bytes are equal.
    """

    product: str
    version: str
    url: str
    path: Path
    sha256: str
    size: int
    releases: int
    status: str
    used_by: tuple[SetUse, ...]
    shadows: Path | None
    same_as_vendored: bool
    hidden_by_override: Path | None


def update_source_url(product: str, version: str, source: str | None = None) -> str:
    """The URL `update_manifest` downloads.

    ``source`` None: NVIDIA's (`manifest_url`).  A URL or path ending in ``.json`` names the
    file itself; any other URL is a mirror laid out like NVIDIA's redist root
    (``<source>/<product>/redist/redistrib_<version>.json``).  A local directory may also be
    a manifest directory (``<dir>/<product>/redistrib_<version>.json``, tried first).  A local
    path becomes a ``file://`` URL.
    """
    if source is None or source == "":
        return manifest_url(product, version)
    _check_name("product", product)
    _check_name("version", version)
    if "://" not in source:
        path = Path(source).expanduser().resolve()
        if not source.endswith(".json"):
            # a manifest directory (<dir>/<product>/redistrib_V.json, as Nixpkgs and cudapkgs keep
            # them), else a local mirror of NVIDIA's server (<dir>/<product>/redist/redistrib_V.json)
            flat = path / product / manifest_file_name(version)
            path = flat if flat.is_file() else path / product / "redist" / manifest_file_name(version)
        return path.as_uri()
    if source.endswith(".json"):
        return source
    return f"{source.rstrip('/')}/{product}/redist/{manifest_file_name(version)}"


def validate_update(data: bytes, *, product: str, version: str, source: str) -> Manifest:
    """Parse ``data`` and check that it is the ``product`` ``version`` manifest.

    Beyond `parse_manifest`'s checks: ``release_label`` (when present) must equal
    ``version``, ``release_product`` (when present) must equal ``product``, and the file
    must hold at least one release.  Raises ManifestError naming ``source`` and the field.
    """
    manifest = parse_manifest(data, product=product, version=version, source=source)
    if manifest.release_label != version:
        raise ManifestError(
            f"{source}: release_label: {manifest.release_label!r} disagrees with the requested "
            f"version {version!r} (file name redistrib_{version}.json)"
        )
    if manifest.release_product is not None and manifest.release_product != product:
        raise ManifestError(
            f"{source}: release_product: {manifest.release_product!r} disagrees with the requested product {product!r}"
        )
    if not manifest.releases:
        raise ManifestError(f"{source}: holds no releases (no component objects at the top level)")
    return manifest


def update_manifest(
    product: str,
    version: str,
    *,
    source: str | None = None,
    target: str | os.PathLike[str] | None = None,
) -> UpdateResult:
    """Download, validate and store ``redistrib_<version>.json`` of ``product``.

    ``source``: see `update_source_url`.  ``target``: the directory to write into (default
    `user_directory`); the file goes to ``<target>/<product>/redistrib_<version>.json``
    with its sha256 in ``redistrib_<version>.json.sha256`` beside it (``sha256sum`` format,
    checked by `load_manifest`).  Nothing is written unless the download is complete and
    valid (`validate_update`); the file and its digest are replaced so that a crash at any
    point leaves either the old or the new file, never a mismatching pair.

    Raises ManifestError: bad names, download failure (after retries), invalid content,
    or an unwritable directory.
    """
    import hashlib

    from .locate import check_known_product

    check_known_product(product, "cudapkgs manifests update")
    url = update_source_url(product, version, source)
    data = _download(url, product, version)
    manifest = validate_update(data, product=product, version=version, source=url)
    root = Path(target).expanduser() if target is not None else user_directory()
    path = root / product / manifest_file_name(version)
    digest = hashlib.sha256(data).hexdigest()
    try:
        old = path.read_bytes()
    except OSError:
        old = None
    status = "unchanged" if old == data and _read_sha256_file(path) == digest else ("replaced" if old is not None else "written")
    if status != "unchanged":
        sidecar = _sha256_path(path)
        try:
            # Old digest first: between the steps the directory holds either the old file without
            # a digest or the new file without one; never a file with the wrong digest.
            try:
                sidecar.unlink()
            except FileNotFoundError:
                pass
            _write_atomically(path, data)
            _write_atomically(sidecar, f"{digest}  {path.name}\n".encode())
        except OSError as error:
            raise ManifestError(f"cannot write {path}: {error.strerror or error}") from None
        _forget_parsed(path)
    vendored = vendored_directory() / product / manifest_file_name(version)
    shadows = vendored if vendored.is_file() else None
    same = shadows is not None and shadows.read_bytes() == data
    override = override_directory()
    hidden = override if override is not None and target is None else None
    return UpdateResult(
        product=product,
        version=version,
        url=url,
        path=path,
        sha256=digest,
        size=len(data),
        releases=len(manifest.releases),
        status=status,
        used_by=sets_using(product, version),
        shadows=shadows,
        same_as_vendored=same,
        hidden_by_override=hidden,
    )
