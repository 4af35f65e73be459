"""Small wheels written in tests: members deflated as regular files, and a RECORD of their digests."""

from __future__ import annotations

import base64
import hashlib
import stat
import zipfile
from pathlib import Path


def record_digest(data: bytes) -> str:
    """A RECORD row's hash of `data` (PEP 376/427: ``sha256=`` and urlsafe base64 without padding)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(path: Path, files: dict[str, bytes], dist: str = "w-1.0.dist-info",
               record: dict[str, bytes] | None = None) -> Path:
    """Write a wheel at `path` holding `files` (name -> bytes) and ``dist/RECORD``; RECORD's digest of a
    name in `record` is of those bytes instead of the member's (a RECORD that lies). Returns `path`."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        rows = []
        for name, content in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
            rows.append(f"{name},{record_digest((record or {}).get(name, content))},{len(content)}")
        rows.append(f"{dist}/RECORD,,")
        archive.writestr(f"{dist}/RECORD", "\n".join(rows) + "\n")
    return path
