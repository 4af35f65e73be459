"""Builds on Dask distributed: a real scheduler and worker processes on 127.0.0.1, each worker
with a store of its own (mapped on the client's store directory in a private mount namespace),
one file:// binary cache between them."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cudapkgs.config import load_config
from cudapkgs.realise.dask_local import LocalBuildCluster
from cudapkgs.realise.dask_executor import (
    DaskBuilders,
    SchedulerUnreachable,
    check_features,
    parse_builders_url,
    resources_string,
    run_on_dask,
)
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import realise
from cudapkgs.realise.errors import BuildFailed
from cudapkgs.realise.scheduler import plan
from cudapkgs.stdenv import mk_derivation
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.store import Store

distributed = pytest.importorskip("distributed", reason="the Dask executor needs `distributed` (the test extra has it)")


def _can_map_stores() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", *([] if os.geteuid() == 0 else ["--map-root-user"]),
         "sh", "-c", "mount --bind / /mnt 2>/dev/null || mount -t tmpfs none /mnt"],
        capture_output=True,
    )
    return probe.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not _can_map_stores(),
    reason="several workers on one host need private mount namespaces (unshare --mount) to map their stores",
)


# -- pure parts --------------------------------------------------------------------------------


def test_builders_url_forms():
    assert parse_builders_url("dask://login1:8786") == "tcp://login1:8786"
    assert parse_builders_url("tcp://10.0.0.5:8786/") == "tcp://10.0.0.5:8786"
    assert parse_builders_url("tls://h:1") == "tls://h:1"
    for bad in ("login1:8786", "dask://login1", "dask://h:0", "dask://h:99999", "ssh://h:22", "dask://a b:1"):
        with pytest.raises(BuildError, match="dask://HOST:PORT"):
            parse_builders_url(bad)


def test_resources_string_is_sorted_units():
    assert resources_string({"cuda-sm-90", "cuda"}) == "cuda=1,cuda-sm-90=1"
    assert resources_string(()) == ""


def _pkg(config, name, script="", deps=(), features=None):
    attrs = {
        "pname": name, "version": "1",
        "stdenvCc": None,  # these steps compile nothing: no implicit stdenv.cc build in the DAG
        "nativeBuildInputs": list(deps),
        "buildPhase": script or f'echo {name} > result',
        # Each input's path is written into the output, so the output refers to it.
        "installPhase": 'mkdir -p "$out" && cp result "$out/" && for v in "${!DEP@}"; do echo "${!v}" >> "$out/deps"; done',
        "env": {f"DEP{i}": dep for i, dep in enumerate(deps)},
    }
    if features:
        attrs["requiredSystemFeatures"] = features
    pkg = mk_derivation(config, attrs)
    return pkg


def test_features_no_worker_offers_fail_at_plan_time(tmp_path):
    config = load_config(overrides={"storeDir": str(tmp_path / "store")})
    gpu = _pkg(config, "gpu-test", features=["cuda", "cuda-sm-90"]).derivation
    cpu = _pkg(config, "cpu").derivation
    check_features([cpu, gpu], {"tcp://a:1": {"cuda": 1, "cuda-sm-90": 1}})
    with pytest.raises(BuildError, match=r"gpu-test-1 needs the system feature\(s\) cuda-sm-90.*--resources \"cuda=1,cuda-sm-90=1\""):
        check_features([cpu, gpu], {"tcp://a:1": {"cuda": 1}, "tcp://b:1": {}})
    with pytest.raises(BuildError, match="cuda cuda-sm-90"):
        check_features([gpu], {})


def test_unreachable_scheduler_is_one_clear_error(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    builders = DaskBuilders(address=f"tcp://127.0.0.1:{port}", cache=f"file://{tmp_path}/cache", timeout=2)
    config = load_config(overrides={"storeDir": str(tmp_path / "store")})
    with Store.open(tmp_path / "store") as store, pytest.raises(SchedulerUnreachable, match=f"127.0.0.1:{port} did not answer"):
        run_on_dask(store, [_pkg(config, "a").derivation], builders, stream=io.StringIO())


# -- a cluster on 127.0.0.1 ------------------------------------------------------------------------


@pytest.fixture
def setup(tmp_path):
    store_dir = tmp_path / "client-store"
    key = generate("test-cache-1")
    key_file = tmp_path / "secret.key"
    key_file.write_text(str(key))
    cluster = LocalBuildCluster(tmp_path)
    config = load_config(overrides={"storeDir": str(store_dir)})
    builders = DaskBuilders(address=cluster.address, cache=f"file://{tmp_path}/cache", sign_key_file=str(key_file),
                            trusted_keys=[str(key.public)], timeout=20)
    yield cluster, config, builders
    cluster.close()


def _dag(config):
    """a, b <- a, c <- a, d <- b c: with the inputs' paths written into each output (references)."""
    a = _pkg(config, "dag-a")
    b = _pkg(config, "dag-b", deps=[a])
    c = _pkg(config, "dag-c", deps=[a])
    d = _pkg(config, "dag-d", deps=[b, c], script='cat "$DEP0/result" "$DEP1/result" > result')
    return [a, b, c, d]


@needs_namespaces
def test_dag_builds_remotely_with_nar_hashes_of_a_local_build(setup, tmp_path):
    cluster, config, builders = setup
    cluster.start_worker("w1")
    cluster.start_worker("w2")
    cluster.wait_for(2)
    pkgs = _dag(config)
    drvs = [p.derivation for p in pkgs]
    out = io.StringIO()
    with Store.open(config.storeDir) as store:
        the_plan = plan(store, [drvs[-1]])
        assert [d.name for d in the_plan.to_build] == ["dag-a-1", "dag-b-1", "dag-c-1", "dag-d-1"]
        results = run_on_dask(store, the_plan.to_build, builders, stream=out)
        assert set(results) == {d.drv_path for d in drvs}
        assert {r["worker"].partition("@")[0] for r in results.values()} <= {"w1", "w2"}
        remote = {p: (store.query(p).nar_hash, sorted(store.references(p))) for d in drvs for p in d.outputs.values()}
    assert "built dag-d-1 on" in out.getvalue()
    # Nothing was built in the client's store: its outputs came from the cache, and no worker wrote there.
    assert not any((Path(config.storeDir) / ".logs").glob("*.log"))
    # The same derivations built locally, in a fresh store at the same directory, give the same NARs.
    shutil.rmtree(config.storeDir)
    with Store.open(config.storeDir) as store:
        realise(store, [drvs[-1]])
        local = {p: (store.query(p).nar_hash, sorted(store.references(p))) for d in drvs for p in d.outputs.values()}
    assert remote == local
    d_out = drvs[-1].outputs["out"]
    assert set(remote[d_out][1]) >= {drvs[1].outputs["out"], drvs[2].outputs["out"]}


@needs_namespaces
def test_a_feature_tagged_build_lands_only_on_the_worker_offering_it(setup):
    cluster, config, builders = setup
    cluster.start_worker("cpu-only")
    cluster.start_worker("gpu", resources="cuda=1,cuda-sm-90=1", features="cuda cuda-sm-90")
    cluster.wait_for(2)
    tests = [_pkg(config, f"gpu-test-{i}", script='echo ran > result',
                  features=["cuda"]).derivation for i in range(3)]
    with Store.open(config.storeDir) as store:
        run_on_dask(store, tests, builders, stream=io.StringIO())
        for drv in tests:
            assert store.is_valid(drv.outputs["out"])
    # Each ran in the gpu worker's real store: the build log sits there, not in the other worker's.
    for drv in tests:
        log = drv.drv_path.rsplit("/", 1)[-1].removesuffix(".drv") + ".log"
        assert (cluster.stores_dir / "store-gpu" / ".logs" / log).exists()
        assert not (cluster.stores_dir / "store-cpu-only" / ".logs" / log).exists()


@needs_namespaces
def test_killed_worker_mid_build_is_retried_elsewhere_and_nothing_partial_is_cached(setup, tmp_path):
    cluster, config, builders = setup
    marker = tmp_path / "started"
    slow = _pkg(config, "slow", script=f'touch {marker}; sleep 4; echo done > result')
    cluster.start_worker("victim")
    cluster.wait_for(1)
    import threading

    errors: list[BaseException] = []
    out = io.StringIO()

    def go():
        try:
            with Store.open(config.storeDir) as store:
                run_on_dask(store, [slow.derivation], builders, stream=out)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread(target=go)
    thread.start()
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("started*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.glob("started*")), "the build never started on the first worker"
    cluster.kill("victim")
    # No narinfo of the half-built output may exist in the cache.
    assert not list((tmp_path / "cache").glob("*.narinfo"))
    cluster.start_worker("rescuer")
    thread.join(120)
    assert not thread.is_alive()
    assert not errors, errors
    with Store.open(config.storeDir) as store:
        path = slow.derivation.outputs["out"]
        assert (Path(path) / "result").read_text() == "done\n"
    assert "built slow-1 on" in out.getvalue()
    # The killed worker's builder did not live on: its store holds no valid output.
    assert not (tmp_path / "store-victim" / Path(path).name).exists()


@needs_namespaces
def test_a_failed_build_shows_the_worker_log(setup):
    cluster, config, builders = setup
    builders.retries = 0
    cluster.start_worker("w1")
    cluster.wait_for(1)
    bad = _pkg(config, "broken", script='echo "compiler says: no such header cuda.h" >&2; exit 3')
    with Store.open(config.storeDir) as store, pytest.raises(BuildFailed) as info:
        run_on_dask(store, [bad.derivation], builders, stream=io.StringIO())
    message = str(info.value)
    assert "broken-1" in message and "failed on worker" in message
    assert "compiler says: no such header cuda.h" in message


# -- the commands ------------------------------------------------------------------------------


@needs_namespaces
def test_gpu_tests_run_in_parallel_only_on_gpu_workers_and_say_where(setup):
    from cudapkgs.lib.fixpoint import AttrSet
    from cudapkgs.testers import run_tests

    cluster, config, builders = setup
    cluster.start_worker("cpu")
    cluster.start_worker("gpu0", resources="cuda=1,cuda-sm-90=1", features="cuda cuda-sm-90")
    cluster.start_worker("gpu1", resources="cuda=1,cuda-sm-90=1", features="cuda cuda-sm-90")
    cluster.wait_for(3)

    def with_tests(name, features):
        test = mk_derivation(config, {"pname": f"{name}-test", "version": "1", "stdenvCc": None,
                                      "buildPhase": "sleep 2; echo ok > log",
                                      "installPhase": 'install -Dm644 log "$out/log"',
                                      **({"requiredSystemFeatures": features} if features else {})})
        return mk_derivation(config, {"pname": name, "version": "1", "stdenvCc": None, "installPhase": 'mkdir -p "$out"',
                                      "passthru": {"tests": {"run": test}}})

    pkgs = AttrSet({"a": with_tests("a", ["cuda"]), "b": with_tests("b", ["cuda", "cuda-sm-90"]),
                    "c": with_tests("c", []), "d": with_tests("d", ["cuda-sm-100"])})
    results = run_tests(pkgs, ["a", "b", "c", "d"], builders=builders)
    by = {r.test: r for r in results}
    assert [r.test for r in results] == ["a.tests.run", "b.tests.run", "c.tests.run", "d.tests.run"]
    assert by["d.tests.run"].result == "skipped" and "cuda-sm-100" in by["d.tests.run"].detail
    for label in ("a.tests.run", "b.tests.run"):
        assert by[label].result == "passed", by[label].detail
        assert "(on gpu" in by[label].detail
    assert by["c.tests.run"].result == "passed"
    # The two GPU tests (2 s each) were spread over the two GPU workers, one GPU test per worker at a time.
    workers = {by[label].detail.rpartition("(on ")[2].partition("@")[0] for label in ("a.tests.run", "b.tests.run")}
    assert workers == {"gpu0", "gpu1"}


@needs_namespaces
def test_cli_build_with_builders(setup, tmp_path, capsys):
    from cudapkgs.cli import main

    cluster, config, builders = setup
    cluster.start_worker("w1")
    cluster.wait_for(1)
    key_file = builders.sign_key_file
    port = cluster.address.rpartition(":")[2]
    status = main(["build", "saxpy", "--set", f"storeDir=\"{config.storeDir}\"", "--no-link",
                   "--builders", f"dask://127.0.0.1:{port}", "--push-to", builders.cache, "--sign-key", key_file])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    out_path = captured.out.strip().splitlines()[-1]
    assert out_path.endswith("-saxpy-1.0") and "built saxpy-1.0 on w1@" in captured.err
    result = subprocess.run([f"{out_path}/bin/saxpy", "1000"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (Path(builders.cache.removeprefix("file://")) / (Path(out_path).name[:32] + ".narinfo")).exists()


def test_cli_builders_needs_a_cache(capsys):
    from cudapkgs.cli import main

    assert main(["build", "saxpy", "--builders", "dask://127.0.0.1:1"]) == 2
    assert "--builders needs --push-to URL" in capsys.readouterr().err


def test_gpu_builds_see_the_gpus_their_worker_was_given(tmp_path, monkeypatch):
    from cudapkgs.realise.generic import build_environment

    config = load_config(overrides={"storeDir": str(tmp_path / "store")})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    gpu = _pkg(config, "gpu", features=["cuda"]).derivation
    cpu = _pkg(config, "cpu").derivation
    assert build_environment(gpu, tmp_path, {"out": tmp_path / "out"})["CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in build_environment(cpu, tmp_path, {"out": tmp_path / "out"})


# -- review r1: hostile and faulty runs ----------------------------------------------------------


def _wait_for_text(stream: io.StringIO, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while text not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert text in stream.getvalue(), stream.getvalue()


@needs_namespaces
def test_an_output_another_client_registered_meanwhile_is_not_lacking(setup, tmp_path, monkeypatch):
    """Two builds sharing one client store: when the other one registers the output between this
    client's validity check and its cache query (which skips valid paths), the build succeeds
    (it said "built remotely but … does not give it": the flaky two-clients test below)."""
    from cudapkgs.store.caches import substitution

    cluster, config, builders = setup
    cluster.start_worker("w1")
    cluster.wait_for(1)
    pkg = _pkg(config, "raced")
    original = substitution.Substituters.query

    def query_after_the_other_client(self, store, paths):
        paths = list(paths)
        found = original(self, store, paths)  # the other client substitutes it first
        self.fetch(store, [found[p] for p in self.closure_of(found, paths)])
        return original(self, store, paths)  # then this client's query finds it valid: nothing to fetch

    monkeypatch.setattr(substitution.Substituters, "query", query_after_the_other_client)
    with Store.open(config.storeDir) as store:
        run_on_dask(store, [pkg.derivation], builders, stream=io.StringIO())
        assert store.is_valid(pkg.out)


@needs_namespaces
def test_two_clients_with_different_caches_each_get_the_output_in_their_cache(setup, tmp_path):
    """Dask merges tasks of one key across clients: a second client building the same derivation
    into another cache must not wait on the first one's upload (it would find nothing in its own)."""
    import threading

    cluster, config, builders = setup
    cluster.start_worker("w1", nthreads=2)
    cluster.wait_for(1)
    gate = tmp_path / "gate"
    shared = _pkg(config, "shared", script=f'until [ -e {gate} ]; do sleep 0.05; done; echo x > result')
    outcome: dict[str, object] = {}
    streams = {tag: io.StringIO() for tag in ("A", "B")}

    def go(tag):
        mine = DaskBuilders(address=builders.address, cache=f"file://{tmp_path}/cache-{tag}",
                            sign_key_file=builders.sign_key_file, trusted_keys=builders.trusted_keys, timeout=20)
        try:
            with Store.open(tmp_path / f"client-{tag}" / "unused") as _unused:
                pass
            with Store.open(config.storeDir) as store:
                run_on_dask(store, [shared.derivation], mine, stream=streams[tag])
            outcome[tag] = "ok"
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome[tag] = error

    threads = {tag: threading.Thread(target=go, args=(tag,)) for tag in ("A", "B")}
    threads["A"].start()
    _wait_for_text(streams["A"], "building 1 derivation")
    threads["B"].start()
    _wait_for_text(streams["B"], "building 1 derivation")
    gate.touch()  # both submitted while the first build still runs
    for thread in threads.values():
        thread.join(120)
    assert outcome == {"A": "ok", "B": "ok"}, outcome
    name = Path(shared.derivation.outputs["out"]).name[:32] + ".narinfo"
    assert (tmp_path / "cache-A" / name).exists() and (tmp_path / "cache-B" / name).exists()


def test_a_scheduler_that_dies_mid_run_is_one_clear_error(tmp_path):
    import signal
    import socket
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--no-dashboard"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = load_config(overrides={"storeDir": str(tmp_path / "store")})
    builders = DaskBuilders(address=address, cache=f"file://{tmp_path}/cache", timeout=60)
    out = io.StringIO()

    def task(drv_path):  # never finishes: the scheduler dies first
        time.sleep(600)

    import threading

    outcome: list[BaseException] = []

    def go():
        try:
            with Store.open(config.storeDir) as store:
                run_on_dask(store, [_pkg(config, "a").derivation], builders, stream=out, task=task)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    thread = threading.Thread(target=go, daemon=True)
    try:
        thread.start()
        _wait_for_text(out, "building 1 derivation")
        os.killpg(scheduler.pid, signal.SIGKILL)
        scheduler.wait()
        thread.join(120)
    finally:
        if scheduler.poll() is None:
            os.killpg(scheduler.pid, signal.SIGKILL)
            scheduler.wait()
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SchedulerUnreachable), outcome
    assert f"scheduler at {address} went away" in str(outcome[0]) and "\n" not in str(outcome[0])


@needs_namespaces
def test_an_input_the_workers_refuse_says_why(setup):
    """Review r1: without --sign-key the client pushes its inputs unsigned; the worker refused them
    (requireSigs) but said only that the input was "neither in this worker's store nor in" the cache."""
    cluster, config, builders = setup
    builders.sign_key_file = None
    builders.retries = 0
    cluster.start_worker("w1")
    cluster.wait_for(1)
    a = _pkg(config, "local-a")
    b = _pkg(config, "remote-b", deps=[a])
    with Store.open(config.storeDir) as store:
        realise(store, [a.derivation])  # valid here: pushed (unsigned) for the worker
        with pytest.raises(BuildFailed) as info:
            run_on_dask(store, [b.derivation], builders, stream=io.StringIO())
    message = str(info.value)
    assert a.derivation.outputs["out"] in message
    assert "no valid signature by a trusted key" in message and "signed by: nobody" in message


def test_local_cluster_leaves_port_8787_alone(tmp_path):
    """The scheduler's HTTP server takes a free loopback port, so a Jupyter dask dashboard (or a second build)
    on 8787 is no 'Port 8787 is already in use' warning; and it serves no dashboard."""
    import socket
    import warnings

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("127.0.0.1", 8787))
        holder.listen()
    except OSError:
        pass  # someone else holds it: the same situation
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cluster = LocalBuildCluster(tmp_path)
        try:
            http = cluster._cluster.scheduler.http_server
            ports = {s.getsockname()[1] for s in http._sockets.values()}
            assert 8787 not in ports and ports, ports
        finally:
            cluster.close()
    finally:
        holder.close()


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["attrs"].__setitem__("buildPhase", "touch /tmp/owned"), "do not match its contents"),
    (lambda d: d.__setitem__("outputs", {}), "payload is not a derivation with outputs"),
    (lambda d: d.pop("outputs"), "payload is not a derivation with outputs"),
    (lambda d: d["outputs"]["out"].__setitem__("path", 5), "payload is not a derivation with outputs"),
])
def test_a_hostile_payload_is_refused_by_the_worker_with_one_error(tmp_path, mutate, message):
    """Review r1: a task payload with no outputs raised a bare StopIteration out of the Dask task."""
    import json

    from cudapkgs.realise.remote_build import RemoteBuildError, build_task

    config = load_config(overrides={"storeDir": str(tmp_path / "store")})
    drv = json.loads(json.dumps(_pkg(config, "t").derivation.to_json()))
    mutate(drv)
    payload = {"drv": drv, "context": None, "cache": f"file://{tmp_path}/cache", "trustedPublicKeys": [],
               "requireSigs": True, "signKeyFile": None}
    with pytest.raises(RemoteBuildError, match=message):
        build_task(payload)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").glob("*-t-1"))


def test_a_local_cluster_worker_that_never_reaches_its_scheduler_exits(tmp_path):
    """Review r1: a LocalBuildCluster worker (a session of its own) whose owner died before it
    connected (a test run killed by a timeout) retried the dead scheduler forever; it now exits
    after `worker_death_timeout` seconds (dask worker --death-timeout)."""
    cluster = LocalBuildCluster(tmp_path, worker_death_timeout=2)
    try:
        cluster._cluster.close()  # the scheduler is gone before the worker connects
        cluster.start_worker("orphan")
        worker = cluster.workers["orphan"]
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker kept retrying a scheduler that is gone")
    finally:
        cluster.close()


@needs_namespaces
def test_a_bad_entry_in_the_cache_is_replaced_by_the_worker_and_said(setup, tmp_path):
    """Issue 23: an unsigned narinfo for an output already in the cache (an earlier push without
    --sign-key) was kept by every worker ("already there"), so every remote build of it failed."""
    from cudapkgs.store.caches import open_cache

    cluster, config, builders = setup
    builders.retries = 0
    cluster.start_worker("w1")
    cluster.wait_for(1)
    b = _pkg(config, "bad-entry-b")
    with Store.open(config.storeDir) as store:  # an earlier run pushed it unsigned
        realise(store, [b.derivation])
        open_cache(builders.cache).upload_closure(store, b.derivation.outputs.values())
    shutil.move(config.storeDir, tmp_path / "earlier")
    out = io.StringIO()
    with Store.open(config.storeDir) as store:
        run_on_dask(store, [b.derivation], builders, stream=out)
        assert store.is_valid(b.derivation.outputs["out"])
    assert (f"replaced the entry of {b.derivation.outputs['out']} in {builders.cache}: "
            "it is not signed by a trusted key (signed by: nobody)") in out.getvalue()


def test_testers_run_here_not_on_workers(setup, monkeypatch):
    # passthru.testers are programs for the machine running `cudapkgs test` (its GPU), not builds for a worker
    from cudapkgs.lib.fixpoint import AttrSet
    from cudapkgs.testers import run_tests

    cluster, config, builders = setup
    cluster.start_worker("gpu0", resources="cuda=1", features="cuda")
    cluster.wait_for(1)
    program = mk_derivation(config, {"pname": "probe", "version": "1", "stdenvCc": None, "dontUnpack": True,
                                     "installPhase": 'mkdir -p "$out/bin"\nprintf "#!/bin/sh\\necho probed\\n" > "$out/bin/probe"\n'
                                                     'chmod +x "$out/bin/probe"\n',
                                     "meta": {"mainProgram": "probe"}})
    pkgs = AttrSet({"a": mk_derivation(config, {"pname": "a", "version": "1", "stdenvCc": None,
                                                "installPhase": 'mkdir -p "$out"', "passthru": {"testers": {"probe": program}}})})
    monkeypatch.setenv("CUDAPKGS_SYSTEM_FEATURES", "")
    (skipped,) = run_tests(pkgs, ["a"], builders=builders)
    assert skipped.result == "skipped" and "a tester: its program runs on a machine offering cuda" in skipped.detail
    monkeypatch.setenv("CUDAPKGS_SYSTEM_FEATURES", "cuda")
    (passed,) = run_tests(pkgs, ["a"], builders=builders)
    assert passed.result == "passed" and passed.detail.startswith("probed") and "(on gpu0" not in passed.detail
