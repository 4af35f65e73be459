"""The bytes a pip download reports: pip's download file only, not its HTTP cache's buffer of the same bytes.

pip 23.2+ (cachecontrol 0.13) writes each response body twice while it downloads: the file in
``$TMPDIR/pip-unpack-XXXX/`` and a `tempfile.NamedTemporaryFile` directly in ``$TMPDIR`` that its
HTTP cache fills (seen here with pip 23.2.1 on nvidia-curand-cu12). Counting both doubled every
progress figure and speed that `cudapkgs build` printed for a wheel (``103.7 MiB`` shown for a
58.7 MiB libnvvm wheel).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cudapkgs.fetch.pip_progress import bytes_under, run_watching


def test_bytes_under_counts_the_download_not_the_cache_buffer(tmp_path: Path) -> None:
    unpack = tmp_path / "pip-unpack-abc123"
    unpack.mkdir()
    (unpack / "demo-1.0-py3-none-any.whl").write_bytes(b"w" * 5000)
    (tmp_path / "tmpvzwq_z03").write_bytes(b"w" * 5000)  # cachecontrol's buffer of the same body
    assert bytes_under(tmp_path) == 5000


def test_bytes_under_follows_no_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * 9000)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    unpack = scratch / "pip-unpack-1"
    unpack.mkdir()
    (unpack / "a.whl").write_bytes(b"a" * 100)
    os.symlink(outside, scratch / "pip-unpack-2")
    os.symlink(outside / "big", unpack / "b.whl")
    assert bytes_under(scratch) == 100


def test_run_watching_reports_one_copy_of_the_bytes(tmp_path: Path) -> None:
    # A stand-in for pip that writes the download and its cache buffer side by side, as pip 23.2 does.
    script = (
        "import os, tempfile, time\n"
        "d = tempfile.mkdtemp(prefix='pip-unpack-')\n"
        "buf = tempfile.NamedTemporaryFile(delete=False)\n"
        "with open(os.path.join(d, 'demo-1.0-py3-none-any.whl'), 'wb') as out:\n"
        "    for _ in range(4):\n"
        "        out.write(b'w' * 4096); out.flush(); buf.write(b'w' * 4096); buf.flush(); time.sleep(0.3)\n"
        "time.sleep(0.6)\n"
    )
    seen: list[int] = []
    done = run_watching([sys.executable, "-c", script], scratch_parent=tmp_path, timeout=60, on_bytes=seen.append)
    assert done.returncode == 0, done.stderr
    assert seen, "no progress reported"
    assert max(seen) == 4 * 4096
