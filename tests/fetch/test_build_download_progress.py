"""Downloads pip makes inside a build (the pinned torch wheel, NVIDIA's NCCL and NVSHMEM wheels of
``prebuiltWheels``, fetchPypi) report bytes and speed to the build's progress, as other fetches do.
Before, those Python build steps had no progress to report to, and a 900 MB torch wheel said nothing."""

from __future__ import annotations

import hashlib
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from cudapkgs.fetch.pinned_wheels import PinnedWheel, fetch_pinned_wheel
from cudapkgs.fetch.pip_progress import build_download_progress, reporting_downloads_to
from cudapkgs.fetch.pypi import _PipDownload
from cudapkgs.realise.context import BuildContext

WHEEL = "demo-1.0-py3-none-any.whl"


def fake_pip(tmp_path: Path, body: bytes) -> list[str]:
    """A stand-in for pip: writes the download into a tempfile directory in steps (as pip does, under
    $TMPDIR), then copies it to --dest whole."""
    script = tmp_path / "pip.py"
    script.write_text(textwrap.dedent(f"""\
        import os, sys, tempfile, time
        body = {body!r}
        part = os.path.join(tempfile.mkdtemp(prefix="pip-unpack-"), {WHEEL!r})
        with open(part, "wb") as f:
            for i in range(0, len(body), len(body) // 4):
                f.write(body[i:i + len(body) // 4]); f.flush(); time.sleep(0.4)
        dest = sys.argv[sys.argv.index("--dest") + 1]
        os.makedirs(dest, exist_ok=True)
        open(os.path.join(dest, {WHEEL!r}), "wb").write(body)
    """))
    return [sys.executable, str(script)]


def test_a_pinned_wheel_download_reports_its_bytes_then_its_size(tmp_path):
    body = b"w" * 40_000
    pin = PinnedWheel(WHEEL, hashlib.sha256(body).hexdigest())
    seen: list[tuple[int, int | None]] = []
    got = fetch_pinned_wheel(pin, cache=tmp_path / "cache", pip=fake_pip(tmp_path, body),
                             progress=lambda done, total: seen.append((done, total)))
    assert got.read_bytes() == body
    growing = [done for done, total in seen if total is None]
    assert growing and 0 < growing[0] < len(body), seen  # while pip ran, not only at the end
    assert seen[-1] == (len(body), len(body))
    seen.clear()
    fetch_pinned_wheel(pin, cache=tmp_path / "cache", pip=fake_pip(tmp_path, body),
                       progress=lambda done, total: seen.append((done, total)))
    assert seen == []  # a cache hit downloads nothing


def test_a_pip_download_in_a_build_step_reports_to_the_build_s_progress(tmp_path):
    body = b"s" * 40_000
    seen: list[tuple[int, int | None]] = []
    download = _PipDownload("demo", "1.0", hashlib.sha256(body).hexdigest(), pip=fake_pip(tmp_path, body),
                            wheel=("py3", "none", "any"))
    (tmp_path / "s").mkdir()
    with reporting_downloads_to(lambda done, total: seen.append((done, total))):
        got = download(tmp_path / "s")
    assert got.read_bytes() == body and seen and all(total is None for _, total in seen)
    assert build_download_progress() is None  # only inside the block


def test_a_python_build_step_runs_with_the_build_s_download_progress(tmp_path):
    """`realise.generic` runs each Python step with the build's on_download in reach (NCCL's and torch's install)."""
    from cudapkgs.realise import generic

    heard: list[object] = []

    def install(attrs, env, cwd, outputs):
        progress = build_download_progress()
        heard.append(progress)
        progress(5, None)

    got: list[tuple[int, int | None]] = []
    on_download = lambda done, total: got.append((done, total))  # noqa: E731
    drv = SimpleNamespace(context={"python": {"installPhase": install}}, name="demo")
    ctx = BuildContext(store=None, work_dir=tmp_path, log=open(tmp_path / "log", "w"), on_download=on_download)
    with ctx.log:
        generic._run_step(drv, ctx, {"installPhase": {"python": "tests:install"}}, {}, tmp_path, {}, "installPhase")
    assert heard == [on_download] and got == [(5, None)]
    assert build_download_progress() is None
