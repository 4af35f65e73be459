"""Malformed inputs are one-line errors, never a traceback, an exit 70 or a hang (issue 8, part 11).

Config files that are not UTF-8 or nest 1,200 levels deep, manifests with a lone
surrogate, and FIFOs or character devices given as file arguments.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cudapkgs.errors import ManifestError
from cudapkgs.manifests import parse_manifest


def _cudapkgs(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudapkgs", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def _one_line_error(run: subprocess.CompletedProcess, needle: str) -> None:
    assert run.returncode in (1, 2), (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert needle in run.stderr, run.stderr


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"\xff\xfe not utf-8", "not UTF-8"),
        (("a = " + "[" * 1200 + "]" * 1200).encode(), "nested too deeply"),
    ],
    ids=["not-utf8", "deep"],
)
def test_bad_config_files(tmp_path, content, needle):
    config = tmp_path / "c.toml"
    config.write_bytes(content)
    _one_line_error(_cudapkgs("list", "--config", str(config)), needle)


def test_a_fifo_or_device_as_a_file_argument_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _one_line_error(_cudapkgs("list", "--config", str(fifo)), "is a FIFO")
    _one_line_error(_cudapkgs("list", "--config", "/dev/zero"), "is a character device")
    store = str(tmp_path / "store")
    _one_line_error(_cudapkgs("import", str(fifo), "--store", store), "is a FIFO")
    _one_line_error(_cudapkgs("import", "/dev/zero", "--store", store), "is a character device")


@pytest.mark.parametrize(
    "data",
    [b'{"release_label": "\\ud800"}', b'{"cuda_cudart": {"name": "\\udfff"}}', b"[" * 100_000, b'{"a": ' * 5000],
    ids=["surrogate-label", "surrogate-name", "deep", "deep-truncated"],
)
def test_bad_manifests_are_manifest_errors(data):
    with pytest.raises(ManifestError):
        parse_manifest(data, product="cuda", version="12.8.2", source="t.json")
