"""The parallel scheduler: plans, dependency order, parallelism, failures, logs, progress, the no-op path."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudapkgs.realise import context
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import log_path, realise
from cudapkgs.realise.errors import BuildFailed
from cudapkgs.cli.progress import PlainProgress, RichProgress, make_progress
from cudapkgs.realise.scheduler import NullProgress, plan, realise_parallel, run
from cudapkgs.derivation import Derivation
from cudapkgs.errors import CudapkgsError
from cudapkgs.store.store import Store
from cudapkgs.table import format_size

# -- a fake builder, told what to do by the derivation's attrs -------------------------------

EVENTS: list[tuple[str, str, float]] = []  # (event, name, time)
_lock = threading.Lock()
_active = [0, 0]  # running now, most at once
GATES: dict[str, threading.Event] = {}  # a build with attrs gate=NAME waits for GATES[NAME]


def fake_build(drv: Derivation, ctx: context.BuildContext, outputs) -> None:
    """Writes each output (with its inputs' paths, so references exist); may sleep, download, step or fail."""
    attrs = drv.attrs
    with _lock:
        EVENTS.append(("start", drv.name, time.monotonic()))
        _active[0] += 1
        _active[1] = max(_active)
    try:
        ctx.log.write(f"hello from {drv.name}\n")
        for step in attrs.get("steps", []):
            ctx.step(step)
        if attrs.get("download") and ctx.on_download:
            total = attrs["download"]
            for done in (0, total // 2, total):
                ctx.on_download(done, total)
        if attrs.get("sleep"):
            time.sleep(attrs["sleep"])
        if attrs.get("gate"):  # wait until the test opens this gate
            assert GATES[attrs["gate"]].wait(60)
        if attrs.get("compileWith"):  # byte code, with the python3 of this PATH
            from cudapkgs.builders.python_bytecode import compile_tree

            site = ctx.work_dir / "site"
            site.mkdir()
            (site / "m.py").write_text("x = 1\n")
            compile_tree(site, ctx.work_dir, {"PATH": attrs["compileWith"]}, ctx.log)
        if attrs.get("fail"):
            (ctx.work_dir / "partial").write_text("half done")
            raise CudapkgsError(attrs["fail"])
        if attrs.get("crash"):
            raise KeyError(attrs["crash"])
        for name, directory in outputs.items():
            directory.mkdir()
            (directory / "name").write_text(f"{drv.name} {name}\n")
            if not attrs.get("noReferences"):  # build-time inputs only, as nvcc is to saxpy
                (directory / "inputs").write_text("\n".join(drv.data["inputs"].values()))
    finally:
        with _lock:
            _active[0] -= 1
            EVENTS.append(("end", drv.name, time.monotonic()))


@pytest.fixture(autouse=True)
def _fake_builder(monkeypatch):
    monkeypatch.setitem(context.BUILDERS, "test", f"{__name__}:fake_build")
    EVENTS.clear()
    _active[:] = [0, 0]


def mk(store_dir, name: str, deps=(), outputs=("out",), size: int | None = None, **attrs) -> Derivation:
    """A test derivation; `size` gives it a source of that many bytes."""
    src = {"name": f"{name}.tar.xz", "size": size, "sha256": "0" * 64, "urls": [f"https://example.invalid/{name}.tar.xz"]}
    return Derivation(
        store_dir=os.fspath(store_dir), name=name, system="x86_64-linux", outputs=outputs, builder="test",
        src=src if size is not None else None,
        input_paths={f"{d.name}.out": d.outputs["out"] for d in deps}, attrs=attrs, deps=deps,
    )


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


def diamond(store_dir, **attrs):
    a = mk(store_dir, "a", size=1000, **attrs)
    b = mk(store_dir, "b", [a], size=2048, **attrs)
    c = mk(store_dir, "c", [a], **attrs)
    d = mk(store_dir, "d", [b, c], outputs=("out", "dev"), **attrs)
    return a, b, c, d


def times(name: str, event: str) -> float:
    return next(t for e, n, t in EVENTS if e == event and n == name)


# -- plan ------------------------------------------------------------------------------------


def test_plan_lists_builds_in_dependency_order_with_download_sizes(store):
    a, b, c, d = diamond(store.store_dir)
    p = plan(store, [d])
    assert [x.name for x in p.to_build] == ["a", "b", "c", "d"]
    assert [(f.name, f.size) for f in p.to_fetch] == [("a.tar.xz", 1000), ("b.tar.xz", 2048)]
    assert p.download_size == 3048
    assert p.to_json()["downloadSize"] == 3048
    assert not p.nothing_to_do


def test_plan_skips_valid_derivations(store):
    a, b, c, d = diamond(store.store_dir)
    realise(store, [b])
    p = plan(store, [d])
    assert [x.name for x in p.to_build] == ["c", "d"]
    assert p.to_fetch == ()
    realise(store, [d])
    assert plan(store, [d]).nothing_to_do


def test_inputs_of_a_valid_derivation_are_not_rebuilt_after_gc(tmp_path):
    # After `cudapkgs gc` collected the build inputs of a valid saxpy (or nvcc), Nix builds
    # nothing; cudapkgs rebuilt (and fetched) libnvvm, nvcc, gcc-wrapper...
    root = tmp_path / "store"
    a, b, c, d = diamond(root, noReferences=True)

    def build_then_gc(*links):  # `cudapkgs build -o result ...`, then `cudapkgs gc`
        with Store.open(root) as s:
            realise(s, [d])
            for name, output in links:
                s.add_indirect_root(tmp_path / name, d.outputs[output])
        with Store.open(root) as s:  # the build's temporary roots are gone
            return s.gc().deleted

    assert set(build_then_gc(("result", "out"))) == {a.outputs["out"], b.outputs["out"], c.outputs["out"], d.outputs["dev"]}
    with Store.open(root) as s:
        # d.dev was collected: d is built again, and so what d's build needs.
        assert [x.name for x in plan(s, [d]).to_build] == ["a", "b", "c", "d"]
    build_then_gc(("result", "out"), ("result-dev", "dev"))
    with Store.open(root) as s:
        assert s.is_valid(d.outputs["out"]) and s.is_valid(d.outputs["dev"]) and not s.is_valid(a.outputs["out"])
        assert plan(s, [d]).to_build == () and plan(s, [d]).to_fetch == ()  # every output of d valid
        EVENTS.clear()
        realise(s, [d])
        assert EVENTS == []
        # A root needed for itself still gets its inputs: c, whose input a is gone.
        assert [x.name for x in plan(s, [d, c]).to_build] == ["a", "c"]


def test_a_local_path_source_is_not_a_download(store):
    drv = Derivation(store_dir=store.store_dir, name="local", system="x86_64-linux", outputs=["out"], builder="test",
                     src={"type": "path", "name": "saxpy.cu", "narHash": "sha256:" + "0" * 64},
                     input_paths={}, attrs={})
    p = plan(store, [drv])
    assert [d.name for d in p.to_build] == ["local"] and p.to_fetch == ()


def test_format_size():
    assert format_size(None) == "?"
    assert format_size(512) == "512 B"
    assert format_size(26657716) == "25.4 MiB"
    assert format_size(3 * 1024**4) == "3072.0 GiB"


# -- running ----------------------------------------------------------------------------------


def test_builds_dependencies_first_and_registers_references(store):
    a, b, c, d = diamond(store.store_dir, sleep=0.05)
    paths = realise_parallel(store, [d], jobs=4)
    assert paths == [d.outputs["out"], d.outputs["dev"]]
    for before, after in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
        assert times(before, "end") <= times(after, "start")
    assert set(store.references(d.outputs["out"])) == {b.outputs["out"], c.outputs["out"]}
    assert store.query(d.outputs["dev"]).deriver == d.drv_path
    assert _active[1] == 2  # b and c ran together


def test_two_independent_builds_run_in_parallel(store):
    x, y = mk(store.store_dir, "x", sleep=0.5), mk(store.store_dir, "y", sleep=0.5)
    run(store, plan(store, [x, y]), jobs=2)
    assert _active[1] == 2  # both builders were running at the same moment (no wall-clock budget)
    assert not store.db.invalid_paths([x.outputs["out"], y.outputs["out"]])


def test_jobs_bounds_concurrency(store):
    drvs = [mk(store.store_dir, f"p{i}", sleep=0.1) for i in range(5)]
    run(store, plan(store, drvs), jobs=2)
    assert _active[1] == 2


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edges=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=16),
    jobs=st.integers(1, 4),
    prebuilt=st.sets(st.integers(0, 7), max_size=3),
)
def test_random_dags_build_each_derivation_after_its_deps(tmp_path_factory, edges, jobs, prebuilt):
    root = tmp_path_factory.mktemp("dag")
    EVENTS.clear()
    deps: dict[int, set[int]] = {i: set() for i in range(8)}
    for x, y in edges:  # only edges to a lower index: acyclic
        if x > y:
            deps[x].add(y)
    drvs: dict[int, Derivation] = {}
    for i in range(8):
        drvs[i] = mk(root, f"n{i}", [drvs[j] for j in sorted(deps[i])])
    with Store.open(root) as s:
        realise(s, [drvs[i] for i in sorted(prebuilt)])
        EVENTS.clear()
        expected = {d.name for d in plan(s, drvs.values()).to_build}
        run(s, plan(s, drvs.values()), jobs=jobs)
        assert {n for e, n, _ in EVENTS if e == "start"} == expected
        assert plan(s, drvs.values()).nothing_to_do
        for i, ds in deps.items():
            for j in ds:
                if drvs[i].name in expected and drvs[j].name in expected:
                    assert times(drvs[j].name, "end") <= times(drvs[i].name, "start")


# -- failures -------------------------------------------------------------------------------


def test_failure_stops_new_builds_lets_running_finish(store):
    bad = mk(store.store_dir, "bad", fail="exit code 2")
    slow = mk(store.store_dir, "slow", sleep=0.3)
    after_bad = mk(store.store_dir, "after-bad", [bad])
    after_slow = mk(store.store_dir, "after-slow", [slow])
    with pytest.raises(BuildFailed) as caught:
        run(store, plan(store, [bad, slow, after_bad, after_slow]), jobs=2)
    error = caught.value
    assert isinstance(error, CudapkgsError) and "\n" not in str(error)
    assert [f.args[0].split(":")[0] for f in error.failures] == ["building bad failed"]
    assert "exit code 2" in str(error) and str(log_path(store, bad)) in str(error)
    assert error.skipped == 2 and "2 build(s) not started" in str(error)
    assert store.is_valid(slow.outputs["out"])  # the running build was let finish
    assert {n for e, n, _ in EVENTS if e == "start"} == {"bad", "slow"}
    assert not store.is_valid(bad.outputs["out"])
    assert "error: building bad failed" in log_path(store, bad).read_text()


def test_every_failure_is_reported(store):
    one = mk(store.store_dir, "one", fail="first", sleep=0.1)
    two = mk(store.store_dir, "two", fail="second", sleep=0.1)
    with pytest.raises(BuildFailed) as caught:
        run(store, plan(store, [one, two]), jobs=2)
    message = str(caught.value)
    lines = message.splitlines()
    assert lines[0] == "2 builds failed:" and len(lines) == 3  # one failure per line
    assert sorted(l.split(":")[0] for l in lines[1:]) == ["  building one failed", "  building two failed"]
    assert all("(log: " in l and l.endswith(".log)") for l in lines[1:])
    assert "first" in message and "second" in message


def test_a_builder_bug_becomes_a_one_line_error_with_the_traceback_in_the_log(store):
    drv = mk(store.store_dir, "buggy", crash="oops")
    with pytest.raises(BuildFailed) as caught:
        run(store, plan(store, [drv]), jobs=1)
    assert "building buggy failed: KeyError: 'oops'" in str(caught.value)
    log = log_path(store, drv).read_text()
    assert "hello from buggy" in log and "Traceback" in log and "KeyError: 'oops'" in log


def test_keep_failed_keeps_the_build_directory(store, kept_builds_dir):
    drv = mk(store.store_dir, "kept", fail="nope")
    with pytest.raises(BuildError) as caught:
        run(store, plan(store, [drv]), keep_failed=True)
    kept = str(caught.value).split("build directory kept at ")[1].split(")")[0]
    assert (Path(kept) / "partial").read_text() == "half done"
    with pytest.raises(BuildError) as caught:
        run(store, plan(store, [mk(store.store_dir, "gone", fail="nope")]))
    assert "kept" not in str(caught.value)
    assert os.listdir(kept_builds_dir) == [os.path.basename(kept)]


# -- logs and progress ----------------------------------------------------------------------


def test_each_build_has_a_log_with_its_steps(store):
    a, b, c, d = diamond(store.store_dir, steps=["unpack", "fixup"])
    run(store, plan(store, [d]), jobs=3)
    for drv in (a, b, c, d):
        text = log_path(store, drv).read_text()
        assert text.startswith(f"hello from {drv.name}\n@ unpack\n@ fixup\n")


def test_plain_progress_says_how_many_sources_are_already_cached(store):
    # "fetching 2 source(s) (0 B)" read as if nothing would be fetched; say that a cache holds them.
    from types import SimpleNamespace

    from cudapkgs.realise.scheduler import Fetch, Plan

    a, b = mk(store.store_dir, "a", size=10), mk(store.store_dir, "b", size=20)
    cached = SimpleNamespace(cached="wheel cache", size=10)
    fresh = SimpleNamespace(cached=None, size=2048)
    out = io.StringIO()
    PlainProgress(out).begin(Plan((a, b), (a, b), (Fetch(a, "a", 10, (), cached), Fetch(b, "b", 20, (), fresh))), 2)
    assert out.getvalue() == "building 2 derivation(s) with 2 job(s), fetching 2 source(s) (2.0 KiB to download; 1 already cached)\n"
    # A wheel's size is unknown until fetched (only --dry-run asks the index): not "(0 B)" either.
    unknown = SimpleNamespace(cached=None, size=None)
    for fetches, said in [((Fetch(a, "a", 10, (), unknown), Fetch(b, "b", 20, (), unknown)), "sizes unknown"),
                          ((Fetch(a, "a", 10, (), cached), Fetch(b, "b", 20, (), unknown)), "1 of unknown size; 1 already cached"),
                          ((Fetch(a, "a", 10, (), cached), Fetch(b, "b", 20, (), cached)), "2 already cached")]:
        out = io.StringIO()
        PlainProgress(out).begin(Plan((a, b), (a, b), fetches), 2)
        assert out.getvalue().endswith(f"fetching 2 source(s) ({said})\n")


def test_rich_progress_says_what_it_fetches_not_0_b(store):
    """Before, the TTY bar said "0 B to fetch" for wheels, whose size is unknown until fetched."""
    from types import SimpleNamespace

    from cudapkgs.realise.scheduler import Fetch, Plan

    a = mk(store.store_dir, "a", size=10)
    progress = RichProgress(_Terminal())
    progress.begin(Plan((a,), (a,), (Fetch(a, "a", 10, (), SimpleNamespace(cached=None, size=None)),)), 1)
    try:
        described = [task.description for task in progress._bars.tasks]
    finally:
        progress.end()
    assert described == ["[bold]building[/] (1 jobs, fetching 1 (sizes unknown))"]


def test_plain_download_lines_give_bytes_and_speed(store, monkeypatch):
    import cudapkgs.cli.progress as progress_module

    a = mk(store.store_dir, "a", size=10)
    clock = iter([0.0, 5.0, 10.0, 20.0, 40.0])
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    progress = PlainProgress(out)
    mib = 1 << 20
    for done in (0, 100 * mib, 150 * mib, 300 * mib):
        progress.download(a, done, 400 * mib)
    progress.download(a, 400 * mib, 400 * mib)
    assert out.getvalue().splitlines() == [
        "a: fetching 400.0 MiB",
        "a: 100.0 MiB of 400.0 MiB (20.0 MiB/s)",
        "a: 300.0 MiB of 400.0 MiB (15.0 MiB/s)",
        "a: fetched 400.0 MiB in 40 s (10.0 MiB/s)",
    ]


def test_plain_progress_says_when_a_size_is_unknown(store, monkeypatch):
    # A wheel's size is unknown before it is cached: the first line read "a: fetching ?".
    a = mk(store.store_dir, "a", size=10)
    import cudapkgs.cli.progress as progress_module

    monkeypatch.setattr(progress_module.time, "monotonic", lambda: 0.0)
    out = io.StringIO()
    PlainProgress(out).download(a, 0, None)
    assert out.getvalue().splitlines() == ["a: fetching (size unknown)"]


def test_plain_progress_lines(store):
    a = mk(store.store_dir, "a", size=4096, download=4096, steps=["unpack"])
    b = mk(store.store_dir, "b", [a])
    out = io.StringIO()
    run(store, plan(store, [b]), jobs=2, progress=PlainProgress(out))
    assert out.getvalue().splitlines() == [
        "building 2 derivation(s) with 2 job(s), fetching 1 source(s) (4.0 KiB)",
        "building a",
        "a: unpack",
        "a: fetching 4.0 KiB",
        "a: fetched 4.0 KiB",
        "[1/2] built a",
        "building b",
        "[2/2] built b",
    ]


def test_plain_progress_reports_failures(store):
    out = io.StringIO()
    with pytest.raises(BuildFailed):
        run(store, plan(store, [mk(store.store_dir, "bad", fail="boom")]), progress=PlainProgress(out))
    assert out.getvalue().splitlines()[-1] == "[1/1] failed bad"  # the reason comes once, in the error


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_make_progress_picks_rich_on_a_terminal_only(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    assert isinstance(make_progress(io.StringIO()), PlainProgress)
    assert isinstance(make_progress(_Terminal()), RichProgress)
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(make_progress(_Terminal()), PlainProgress)


def test_rich_progress_runs_a_build(store):
    out = _Terminal()
    a = mk(store.store_dir, "a", size=4096, download=4096, steps=["unpack", "fixup"])
    bad = mk(store.store_dir, "bad", fail="boom")
    with pytest.raises(BuildFailed):
        run(store, plan(store, [a, bad]), jobs=1, progress=RichProgress(out))
    text = out.getvalue()
    assert "built a" in text and "failed bad" in text


# -- the no-op path ---------------------------------------------------------------------------


def test_a_valid_closure_costs_one_query_and_no_build(store):
    chain: list[Derivation] = []
    for i in range(50):
        chain.append(mk(store.store_dir, f"pkg{i}", chain[-2:]))
    realise_parallel(store, chain, jobs=4)
    queries: list[str] = []
    store.db.conn.set_trace_callback(queries.append)
    try:
        p = plan(store, chain)
        assert run(store, p, jobs=4, progress=NullProgress()) == []
    finally:
        store.db.conn.set_trace_callback(None)
    assert p.nothing_to_do
    assert len(queries) == 1 and queries[0].startswith("SELECT path FROM ValidPaths WHERE path IN")


def test_jobs_must_be_positive(store):
    with pytest.raises(ValueError):
        run(store, plan(store, [mk(store.store_dir, "x")]), jobs=0)


# -- which ready build starts first ----------------------------------------------------------


def test_the_head_of_the_longest_chain_of_work_gets_the_highest_priority(store):
    from cudapkgs.realise.priorities import FLOOR, priorities

    small = [mk(store.store_dir, f"small{i}", size=10) for i in range(3)]
    big = mk(store.store_dir, "big", size=50 * FLOOR)
    top = mk(store.store_dir, "top", [*small, big], size=5 * FLOOR)
    the_plan = plan(store, [top])
    rank = priorities(the_plan.to_build, the_plan.to_fetch)
    assert rank[top.drv_path] == 5 * FLOOR
    assert rank[big.drv_path] == 55 * FLOOR  # its own work and top's, which waits for it
    assert all(rank[s.drv_path] == 6 * FLOOR for s in small)  # unknown or tiny sizes count FLOOR


def test_a_large_build_others_wait_for_starts_before_small_ones_listed_first(store):
    from cudapkgs.realise.priorities import FLOOR

    small = [mk(store.store_dir, f"small{i}", size=10) for i in range(4)]
    big = mk(store.store_dir, "big", size=50 * FLOOR)
    top = mk(store.store_dir, "top", [*small, big])
    the_plan = plan(store, [top])
    assert [d.name for d in the_plan.to_build].index("big") > 0  # the plan lists it after a small one
    run(store, the_plan, jobs=1)
    started = [n for e, n, _ in EVENTS if e == "start"]
    assert started[0] == "big" and started[-1] == "top"


def test_a_build_that_becomes_ready_later_overtakes_queued_lower_priority_ones(store):
    from cudapkgs.realise.priorities import FLOOR

    first = mk(store.store_dir, "first", size=10, sleep=0.2)
    small = [mk(store.store_dir, f"small{i}", size=10) for i in range(4)]
    big = mk(store.store_dir, "big", [first], size=50 * FLOOR)
    top = mk(store.store_dir, "top", [*small, big])
    run(store, plan(store, [top]), jobs=1)
    started = [n for e, n, _ in EVENTS if e == "start"]
    assert started[:2] == ["first", "big"], started  # big was ready after first, ahead of the small ones


def test_a_python_package_counts_its_byte_compilation(store):
    """sympy's build (a 6 MB wheel whose 1,533 modules take 8 s of CPU to compile) starts beside the large unpacks."""
    import cudapkgs
    from cudapkgs.realise.priorities import FLOOR, PYTHON_PACKAGE, priorities, work_estimate

    pkgs = cudapkgs.import_pkgs(config={"storeDir": store.store_dir})
    sympy = pkgs.python3Packages.sympy.derivation
    assert work_estimate(sympy) == PYTHON_PACKAGE > 64 * FLOOR
    wrapper = mk(store.store_dir, "wrapper")
    assert work_estimate(wrapper) == FLOOR
    rank = priorities([sympy, wrapper])
    assert rank[sympy.drv_path] > rank[wrapper.drv_path]


def test_ctrl_c_stops_a_byte_compilation_under_way_in_a_worker(store, tmp_path, monkeypatch):
    """The compiler runs in its own session (the terminal's SIGINT misses it) and is waited for in a
    worker thread (no KeyboardInterrupt there): an interrupted build waited for it to finish."""
    import concurrent.futures
    import shutil
    import signal
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "hung.pid"
    (bin_dir / "python3").write_text(f"#!/bin/sh\n{shutil.which('sleep')} 3600 & echo $! > {pid_file}; wait\n")  # a compiler that hangs
    (bin_dir / "python3").chmod(0o755)
    real_wait = concurrent.futures.wait

    def interrupted_wait(futures, **kwargs):
        while not (pid_file.is_file() and pid_file.read_text().strip()):
            done, _ = real_wait(futures, timeout=0.01)
            if done:
                return real_wait(futures, **kwargs)
        raise KeyboardInterrupt  # Ctrl-C, while the worker waits for its compiler

    monkeypatch.setattr(concurrent.futures, "wait", interrupted_wait)
    drv = mk(store.store_dir, "compiles", compileWith=f"{bin_dir}:{os.path.dirname(sys.executable)}")
    try:
        with pytest.raises(KeyboardInterrupt):
            run(store, plan(store, [drv]), jobs=1)
        workers = [t for t in threading.enumerate() if t.name.startswith("cudapkgs-build")]
        for worker in workers:
            worker.join(60)
        assert not any(worker.is_alive() for worker in workers), "the worker still waits for its compiler"
        hung = int(pid_file.read_text())
        for _ in range(1000):
            try:
                os.kill(hung, 0)
                if Path(f"/proc/{hung}/stat").read_text().split(") ")[-1].startswith("Z"):
                    break
            except (ProcessLookupError, FileNotFoundError):
                break
            time.sleep(0.01)
        else:
            os.kill(hung, signal.SIGKILL)
            raise AssertionError("the compiler outlived the interrupted build")
    finally:
        from cudapkgs.builders import python_bytecode

        if hasattr(python_bytecode, "resume"):
            python_bytecode.resume()
    assert not store.is_valid(drv.outputs["out"])


def _hanging_compiler(tmp_path, name: str, seconds: int = 3600):
    """A directory whose python3 hangs as a compiler stuck on a module would; the file its sleeper's pid goes to."""
    import shutil

    bin_dir = tmp_path / name
    bin_dir.mkdir()
    pid_file = tmp_path / f"{name}.pid"
    (bin_dir / "python3").write_text(f"#!/bin/sh\n{shutil.which('sleep')} {seconds} & echo $! > {pid_file}; wait\n")
    (bin_dir / "python3").chmod(0o755)
    return bin_dir, pid_file


def _interrupted_run(store, tmp_path, monkeypatch) -> None:
    """A run of this thread interrupted (Ctrl-C) while its worker waits for a compiler that hangs; returns once
    that compiler is gone."""
    import concurrent.futures
    import signal
    import sys

    bin_dir, pid_file = _hanging_compiler(tmp_path, "hangs")
    real_wait = concurrent.futures.wait
    me = threading.current_thread()

    def interrupted_wait(futures, **kwargs):
        if threading.current_thread() is not me:
            return real_wait(futures, **kwargs)
        while not (pid_file.is_file() and pid_file.read_text().strip()):
            done, _ = real_wait(futures, timeout=0.01)
            if done:
                return real_wait(futures, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(concurrent.futures, "wait", interrupted_wait)
    drv = mk(store.store_dir, "hangs", compileWith=f"{bin_dir}:{os.path.dirname(sys.executable)}")
    try:
        with pytest.raises(KeyboardInterrupt):
            run(store, plan(store, [drv]), jobs=1)
    finally:
        monkeypatch.setattr(concurrent.futures, "wait", real_wait)
    hung = int(pid_file.read_text())
    for _ in range(1000):
        try:
            os.kill(hung, 0)
            if Path(f"/proc/{hung}/stat").read_text().split(") ")[-1].startswith("Z"):
                break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.01)
    else:
        os.kill(hung, signal.SIGKILL)
        raise AssertionError("the compiler outlived the interrupted build")


def test_an_interrupted_run_leaves_no_stop_behind_for_a_later_build(store, tmp_path, monkeypatch):
    """Before, the stop was the whole process's and only `run` lifted it: after a Ctrl-C'd run, a build by
    the Python API's `realise` (or a Dask worker's) in that process failed 'not started: the build was interrupted'."""
    import sys

    try:
        _interrupted_run(store, tmp_path, monkeypatch)
        later = mk(store.store_dir, "compiles-later", compileWith=os.path.dirname(sys.executable))
        realise(store, [later])
        assert store.is_valid(later.outputs["out"])
    finally:
        from cudapkgs.builders import python_bytecode

        python_bytecode.resume()


def test_an_interrupted_run_stops_only_its_own_compilations(store, tmp_path, monkeypatch):
    """Two runs in threads of one process: Ctrl-C of one stopped the other's compilations (and refused its next)."""
    import sys

    GATES["other"] = threading.Event()
    other = mk(store.store_dir, "other-run", gate="other", compileWith=os.path.dirname(sys.executable))
    result: list[object] = []

    def other_run() -> None:
        own = Store.open(store.root)
        try:
            result.append(run(own, plan(own, [other]), jobs=1))
        except BaseException as error:  # noqa: BLE001 - the test looks at it
            result.append(error)
        finally:
            own.close()

    thread = threading.Thread(target=other_run)
    thread.start()
    try:
        for _ in range(6000):  # the other run's build has started (it waits at its gate)
            if any(event == "start" and name == "other-run" for event, name, _ in list(EVENTS)):
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the other run's build did not start")
        _interrupted_run(store, tmp_path, monkeypatch)
    finally:
        GATES["other"].set()
        thread.join(60)
        from cudapkgs.builders import python_bytecode

        python_bytecode.resume()
    assert result and isinstance(result[0], list), result
    assert store.is_valid(other.outputs["out"])


def test_ctrl_c_stops_a_byte_compilation_ahead_too(store, tmp_path, monkeypatch):
    """The run's stop reaches the threads that install wheels ahead (their compilations are the run's):
    else the interrupted run waited in `UnpackAhead.close` for one that hung (here: 60 s, then it fails)."""
    import concurrent.futures
    import sys

    from cudapkgs.builders import python_bytecode
    from cudapkgs.realise import install_ahead

    bin_dir, pid_file = _hanging_compiler(tmp_path, "ahead", seconds=60)
    site = tmp_path / "site"
    site.mkdir()
    (site / "m.py").write_text("x = 1\n")
    stopped: list[BaseException] = []

    def prepare(drv, store, fetchers=()):
        compiling = python_bytecode.start_compile(site, tmp_path, {"PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}"})
        try:
            compiling.wait(io.StringIO())
        except python_bytecode.ByteCompileError as error:
            stopped.append(error)
            raise
        raise AssertionError("the compilation ahead was not stopped")

    monkeypatch.setattr(install_ahead, "eligible", lambda drv: drv.name == "ahead")
    monkeypatch.setattr(install_ahead, "prepare", prepare)
    real_wait = concurrent.futures.wait

    def interrupted_wait(futures, **kwargs):
        while not (pid_file.is_file() and pid_file.read_text().strip()):
            done, _ = real_wait(futures, timeout=0.01)
            if done:
                return real_wait(futures, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(concurrent.futures, "wait", interrupted_wait)
    GATES["first"] = threading.Event()
    first, ahead = mk(store.store_dir, "first", gate="first"), mk(store.store_dir, "ahead")
    try:
        with pytest.raises(KeyboardInterrupt):
            run(store, plan(store, [first, ahead]), jobs=1)
    finally:
        GATES["first"].set()
        monkeypatch.setattr(concurrent.futures, "wait", real_wait)
    assert stopped and "interrupted" in str(stopped[0])


def test_ctrl_c_as_the_build_pool_starts_stops_the_work_ahead(store, tmp_path, monkeypatch):
    """Ctrl-C after the installs ahead had started but before the run's `try` (while its build pool was
    made): nothing stopped or closed them, and a compilation ahead ran on (here: one that hangs)."""
    import concurrent.futures
    import sys

    from cudapkgs.builders import python_bytecode
    from cudapkgs.realise import install_ahead

    bin_dir, pid_file = _hanging_compiler(tmp_path, "ahead", seconds=60)
    site = tmp_path / "site"
    site.mkdir()
    (site / "m.py").write_text("x = 1\n")
    stopped: list[BaseException] = []
    ended = threading.Event()

    def prepare(drv, store, fetchers=()):
        try:
            compiling = python_bytecode.start_compile(site, tmp_path, {"PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}"})
            compiling.wait(io.StringIO())
        except python_bytecode.ByteCompileError as error:
            stopped.append(error)
            raise
        finally:
            ended.set()

    monkeypatch.setattr(install_ahead, "eligible", lambda drv: drv.name == "ahead")
    monkeypatch.setattr(install_ahead, "prepare", prepare)
    real_pool = concurrent.futures.ThreadPoolExecutor

    def interrupted_pool(*args, **kwargs):
        if kwargs.get("thread_name_prefix") == "cudapkgs-build":
            for _ in range(6000):  # the compilation ahead is under way
                if pid_file.is_file() and pid_file.read_text().strip():
                    break
                time.sleep(0.01)
            raise KeyboardInterrupt
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", interrupted_pool)
    first, ahead = mk(store.store_dir, "first"), mk(store.store_dir, "ahead")
    with pytest.raises(KeyboardInterrupt):
        run(store, plan(store, [first, ahead]), jobs=1)
    assert ended.wait(30), "the compilation ahead ran on after the run was interrupted"
    assert stopped and "interrupted" in str(stopped[0])
