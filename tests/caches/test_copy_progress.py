"""`copy --to` and `copy --from` report alike: progress lines on stderr (with --json too), each path's
bytes, time and speed, and in --json the paths that were there already ("present")."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

from cache_helpers import cli_file_cache, fresh_store_like, make_closure

from cudapkgs.store.caches.substitute_progress import PlainUploadProgress
from cudapkgs.store.store import Store


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudapkgs", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def name(path: str) -> str:
    return os.path.basename(path)[33:]


SPEED = r"\d+(?:\.\d)? (?:[KM]i)?B/s"  # none for a path done in under 10 ms
UPLOADED = re.compile(rf"^\[(\d)/2\] uploaded (\S+) \((\S+ \S+) → (\S+ \S+) zstd in \d+\.\d s(?:, {SPEED})?\)$", re.M)


def test_copy_to_json_prints_progress_with_time_and_speed_and_says_what_was_present(tmp_path):
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store, size=3 << 20)  # a few MiB: a bytes callback during the read too
    store.close()
    env = {"CUDAPKGS_STORE": store.store_dir}
    url = f"file://{tmp_path}/cache"
    out = run_cli("copy", "--to", url, "--json", top, env=env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # stdout stays the JSON alone
    assert result["uploaded"] == [dep, top] and result["present"] == []
    assert [m.group(2) for m in UPLOADED.finditer(out.stderr)] == [name(dep), name(top)], out.stderr
    assert f"uploading {name(dep)} (" in out.stderr and f") to {url}" in out.stderr
    assert re.search(rf"^uploaded \S+ \S+ of NARs in \d+\.\d s(?: \({SPEED}\))?, 2 of 2 paths done$", out.stderr, re.M)
    again = run_cli("copy", "--to", url, "--json", top, env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"to": url, "uploaded": [], "present": [dep, top], "fileSize": 0}
    assert f"[1/2] {name(dep)} is in the cache already" in again.stderr
    assert "\nuploading " not in again.stderr and "of NARs in" not in again.stderr  # nothing was uploaded
    human = run_cli("copy", "--to", url, top, env=env)
    assert human.returncode == 0 and "[2/2] " + name(top) + " is in the cache already" in human.stderr
    assert "copied 0 path(s)" in human.stderr and "2 were there already" in human.stderr


def test_copy_from_json_says_which_paths_were_present(tmp_path):
    store, dep, top, key, env, url = cli_file_cache(tmp_path)
    assert run_cli("copy", "--to", url, "--sign-key", str(tmp_path / "k"), top, env=env).returncode == 0
    fresh = fresh_store_like(store, tmp_path / "old")
    fresh.close()
    trust = ("--trusted-public-key", str(key.public))
    dep_only = run_cli("copy", "--from", url, *trust, "--json", dep, env=env)
    assert dep_only.returncode == 0, dep_only.stderr
    assert json.loads(dep_only.stdout) == {"from": url, "substituted": [dep], "present": []}
    out = run_cli("copy", "--from", url, *trust, "--json", top, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"from": url, "substituted": [top], "present": [dep]}
    assert f"[1/1] substituted {name(top)}" in out.stderr  # progress with --json, on stderr
    again = run_cli("copy", "--from", url, *trust, "--json", top, env=env)
    assert json.loads(again.stdout) == {"from": url, "substituted": [], "present": sorted([dep, top])}
    human = run_cli("copy", "--from", url, *trust, top, env=env)
    assert human.stdout == top + "\n" and f"copied 0 path(s) from {url}; 2 were there already" in human.stderr


def test_upload_progress_lines_bytes_while_a_nar_streams_and_the_summary():
    now = [100.0]
    stream = io.StringIO()
    progress = PlainUploadProgress(stream, "file:///c", "zstd", every=5.0, clock=lambda: now[0])
    a, b = "/s/" + "a" * 32 + "-big-1", "/s/" + "b" * 32 + "-small-1"
    progress.begin([a, b])
    progress.started(a, 300 << 20)
    now[0] += 2
    progress.bytes(a, 100 << 20)  # within `every` of the start: no line
    now[0] += 4
    progress.bytes(a, 200 << 20)
    now[0] += 4
    progress.finished(a, SimpleNamespace(nar_size=300 << 20, file_size=100 << 20))
    progress.finished(b, None)
    assert stream.getvalue().splitlines() == [
        "uploading big-1 (300.0 MiB) to file:///c",
        "uploaded 200.0 MiB of NARs in 6.0 s (33.3 MiB/s), 0 of 2 paths done",
        "[1/2] uploaded big-1 (300.0 MiB → 100.0 MiB zstd in 10.0 s, 30.0 MiB/s)",
        "[2/2] small-1 is in the cache already",
    ]
    assert progress.summary() == "uploaded 200.0 MiB of NARs in 10.0 s (20.0 MiB/s), 2 of 2 paths done"


def test_tiny_uploads_show_kib_s_and_no_speed_under_ten_milliseconds():
    """Last session: "[2/2] uploaded top-1.0 (352 B → 196 B zstd in 0.0 s, 0.0 MiB/s)"."""
    now = [100.0]
    stream = io.StringIO()
    progress = PlainUploadProgress(stream, "file:///c", "zstd", every=5.0, clock=lambda: now[0])
    a, b, c = ("/s/" + x * 32 + "-" + n for x, n in (("a", "dep-1"), ("b", "top-1"), ("c", "mid-1")))
    progress.begin([a, b, c])
    progress.started(a, 4096)
    now[0] += 2.0
    progress.finished(a, SimpleNamespace(nar_size=4096, file_size=3000))  # 2 KiB/s
    progress.started(b, 352)
    now[0] += 0.002
    progress.finished(b, SimpleNamespace(nar_size=352, file_size=196))  # 2 ms: no speed
    progress.started(c, 300)
    now[0] += 1.0
    progress.finished(c, SimpleNamespace(nar_size=300, file_size=200))  # 300 B/s
    lines = stream.getvalue().splitlines()
    assert "[1/3] uploaded dep-1 (4.0 KiB → 2.9 KiB zstd in 2.0 s, 2.0 KiB/s)" in lines
    assert "[2/3] uploaded top-1 (352 B → 196 B zstd in 0.0 s)" in lines
    assert "[3/3] uploaded mid-1 (300 B → 200 B zstd in 1.0 s, 300 B/s)" in lines
    assert "MiB/s" not in stream.getvalue()


def test_a_bad_direct_writes_setting_is_refused_once_before_any_work(tmp_path):
    """$CUDAPKGS_DIRECT_WRITES=maybe: one error line, before the cache is made or any path is uploaded
    (before, each path failed with it in turn, after the work had begun)."""
    store, dep, top, key, env, url = cli_file_cache(tmp_path)
    store.close()
    out = run_cli("copy", "--to", url, "--sign-key", str(tmp_path / "k"), top, env={**env, "CUDAPKGS_DIRECT_WRITES": "maybe"})
    assert out.returncode != 0
    assert out.stderr.strip() == ("cudapkgs: error: $CUDAPKGS_DIRECT_WRITES is 'maybe': set it to auto, on or off "
                                  "(or unset it)")
    assert not (tmp_path / "cache").exists()
