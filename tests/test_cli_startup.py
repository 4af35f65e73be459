"""Start-up: only the invoked command's module is imported and its parser built; data files
are parsed once per installation; bench/bench_startup.py runs in its tiny mode."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cudapkgs import cli
from cudapkgs.datafiles import load_toml

REPO = Path(__file__).resolve().parents[1]


def test_the_command_table_is_complete():
    registered = {}
    for module in cli.COMMAND_MODULES:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(module).register(sub)
        registered.update({name: module for name in sub.choices})
    assert cli.COMMANDS == registered


def test_only_the_invoked_command_is_loaded():
    code = (
        "import sys; from cudapkgs import cli; p = cli.build_parser('eval'); "
        "sub = next(a for a in p._actions if a.dest == 'command'); "
        "print(sorted(sub.choices)); "
        "print(sorted(m for m in ('cudapkgs.cli.build', 'cudapkgs.cli.installables', 'cudapkgs.cli.store', 'cudapkgs.cli.containers', "
        "'cudapkgs.cli.doctor', 'cudapkgs.cli.manifests') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["['eval']", "[]"]
    assert cli._command_of(["--version"]) is None and cli._command_of(["gc", "--caches"]) == "gc"
    assert cli._command_of(["-h"]) is None


def test_an_evaluation_imports_no_heavy_module(manifests_dir):
    code = ("import sys; from cudapkgs import cli; cli.main(['eval', 'cudaPackages.cudaMajorMinorVersion']); "
            "print(sorted(m for m in ('inspect', 'hashlib', 'tomllib', 'dataclasses', 'sqlite3', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == '"12.9"'
    # tomllib only on the first run after install (the parsed data files are cached)
    assert out[1] in ("[]", "['tomllib']")
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert again[1] == "[]"


def test_data_files_are_parsed_once_and_reparsed_when_edited(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = tmp_path / "x.toml"
    data.write_text('a = 1\n[b]\nc = ["d"]\n')
    assert load_toml(data) == {"a": 1, "b": {"c": ["d"]}}
    cached = list((tmp_path / "cache" / "cudapkgs" / "data").iterdir())
    assert len(cached) == 1 and json.loads(cached[0].read_text()) == {"a": 1, "b": {"c": ["d"]}}
    cached[0].write_text('{"a": 2}')  # the cache is what is read while the file is unchanged
    assert load_toml(data) == {"a": 2}
    cached[0].write_text("{not json")  # a corrupt cache falls back to the file
    assert load_toml(data) == {"a": 1, "b": {"c": ["d"]}}
    time.sleep(0.01)
    data.write_text("a = 3\n")  # edited: parsed again
    assert load_toml(data) == {"a": 3}


def test_bench_startup_tiny():
    env = {k: v for k, v in os.environ.items()}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(REPO / "bench" / "bench_startup.py"), "--tiny"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    labels = [r[0].strip() for r in rows]
    assert labels == ["python -I -c pass (floor)", "eval", "cdi generate", "doctor"]
    assert rows[0][4].strip() == "1.0×"
    for row in rows[1:]:
        assert float(row[1]) > 0 and row[4].strip().endswith("×") and float(row[4].strip()[:-1]) > 1


_HTTP_STACK = ("urllib3", "ssl", "http.client", "cudapkgs.transport.http")


def test_an_evaluation_and_a_cached_build_load_no_http_stack(manifests_dir, tmp_path):
    """urllib3, ssl and http.client load only when something is transferred: not for `eval`, nor for a
    build with nothing to do, even with an https:// substituter configured (before, the cache backend
    imported ssl and http.client as soon as it was configured)."""
    from cudapkgs.store.store import Store

    with Store.open(tmp_path / "store") as store:
        path = store.add_path("hello", lambda out: (out.mkdir(), (out / "x").write_text("hi")))
    env = {**os.environ, "CUDAPKGS_STORE": str(tmp_path / "store")}
    probe = "; print(sorted(m for m in {names!r} if m in sys.modules))".format(names=_HTTP_STACK)
    evaluate = "import sys; from cudapkgs import cli; cli.main(['eval', 'cudaPackages.cudaMajorMinorVersion'])" + probe
    build = ("import sys; from cudapkgs import cli; "
             f"assert cli.main(['build', '--no-link', '--set', 'substituters=[\"https://cache.invalid/x\"]', {path!r}]) == 0"
             + probe)
    for code in (evaluate, build):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        assert out.stdout.splitlines()[-1] == "[]", out.stdout


def test_the_command_freezes_the_heap_at_exit_once(manifests_dir):
    """The shutdown then skips a last traversal of every object of the evaluation (a tenth of
    `cudapkgs eval`, docs/bench-startup.md); before, every object was traversed again at exit."""
    code = ("import atexit, gc; from cudapkgs import cli; cli.main(['eval', 'cudaPackages.cudaMajorMinorVersion']); "
            "once = atexit._ncallbacks(); cli.main(['eval', 'cudaPackages.cudaMajorMinorVersion']); "
            "frozen = gc.get_freeze_count(); again = atexit._ncallbacks(); atexit._run_exitfuncs(); "
            "print(once == again, frozen, gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[-1] == "True 0 True"  # registered once; nothing frozen before the exit, the heap at it


def test_bench_startup_tiny_against_a_peer_tree():
    """--peer-src runs each command from another checkout in the same rounds; here the same tree."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(REPO / "bench" / "bench_startup.py"), "--tiny", "--peer-src", str(REPO / "src")],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout.split("against the peer", 1)[1]
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r[0].strip() for r in rows] == ["eval", "cdi generate", "doctor"]
    for row in rows:
        assert all(float(cell) > 0 for cell in row[1:])
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "bench_startup.py"), "--tiny", "--peer-src", str(REPO)],
                         capture_output=True, text=True, env=env, timeout=60, check=False)
    assert bad.returncode == 2 and "no cudapkgs/__init__.py there" in bad.stderr
