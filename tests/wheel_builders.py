"""Wheels made by hand for tests: no build backend, no network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def pure_wheel(path: Path, name: str, version: str, files: dict[str, bytes], metadata: str = "") -> Path:
    """Write a pure-Python ``py3-none-any`` wheel at `path` holding `files` (archive name → bytes), with
    METADATA (plus the `metadata` lines, e.g. ``"Requires-Python: >=3.12\\n"``), WHEEL and a true RECORD
    (PEP 376/427 sha256 digests); returns `path`."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{metadata}".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    digest = {n: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode() for n, d in files.items()}
    record = "".join(f"{n},sha256={digest[n]},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{info}/RECORD", record)
    return path
