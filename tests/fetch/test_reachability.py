"""Reachability decided once, before a plan builds (issue 31, deliverable 3).

Every server here is on 127.0.0.1: one that answers (any status), one whose port refuses, one
that accepts and never says a word. The plan skips a fetcher whose host does not answer for all
its sources, a dry run says so, and a fixed-output source no mirror holds fails at planning,
naming the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fetch_server import server  # noqa: F401 - a fixture
from local_servers import free_port
from slow_server import raw_server

from cudapkgs.fetch import reachability
from cudapkgs.fetch.fixed_output import SHIPPED_SOURCES
from cudapkgs.fetch.planning import SourcePlanError
from cudapkgs.realise.scheduler import plan
from cudapkgs.store.store import Store
from cudapkgs.top_level import clear_cache, import_pkgs


@pytest.fixture(autouse=True)
def _fresh_answers(monkeypatch):
    monkeypatch.delenv("CUDAPKGS_PROBE_HOSTS", raising=False)  # conftest turns probing off for every other test
    reachability.forget()
    clear_cache()
    yield
    reachability.forget()


def silent(conn, server):
    """Accept, read nothing, answer nothing, until the test ends."""
    server.stopping.wait(server.cap_s)


def test_probe_tells_answering_refusing_and_silent_hosts_apart(server):  # noqa: F811
    refused = f"http://127.0.0.1:{free_port()}"
    with raw_server(silent, cap_s=10) as quiet:
        started = time.monotonic()
        answers = reachability.probe([server.url + "/some/archive.tar.xz", refused + "/x", quiet.url + "/y"],
                                     timeout_s=1.0)
        took = time.monotonic() - started
    assert answers[server.url] is None  # the loopback server answers HEAD with 501: it is there
    assert answers[refused] is not None and "refused" in answers[refused]
    assert answers[quiet.url] is not None
    assert took < 8  # in parallel, each bounded by its deadline (a generous bound: the machine is shared)


def test_a_host_is_probed_once_per_process(server):  # noqa: F811
    reachability.probe([server.url + "/a"])
    reachability.probe([server.url + "/b", server.url + "/c"])
    assert server.connections == 1  # HEAD is not counted in hits (GET only): one connection, one probe


def redist_pkgs(store_dir: Path, fetchers):
    return import_pkgs({"storeDir": str(store_dir), "allowUnfree": True, "fetchers": fetchers})


def test_a_dead_mirror_is_skipped_for_the_whole_plan(tmp_path, manifests_dir):
    dead = f"mirror:http://127.0.0.1:{free_port()}"
    pkgs = redist_pkgs(tmp_path / "store", [dead, "wheels"])
    drvs = [pkgs.cudaPackages_13_0.cuda_nvcc.derivation, pkgs.cudaPackages_13_0.libcublas.derivation]
    asked = []

    def probe(urls):
        asked.append(list(urls))
        return reachability.probe(urls, timeout_s=1.0)

    with Store.open(tmp_path / "store") as store:
        the_plan = plan(store, drvs, probe=probe)
    assert len(asked) == 1  # one round: every source's host at once
    assert [(f, why is not None) for f, _host, why in the_plan.skipped] == [(dead, True)]
    redist = [f for f in the_plan.to_fetch if f.choice is not None]
    assert len(redist) >= 2 and {f.choice.fetcher for f in redist} == {"wheels"}
    assert the_plan.skipped_fetchers == {dead}
    # A build of this plan does not try the dead mirror either.
    from cudapkgs.realise.realise import fetchers_for

    assert fetchers_for(redist[0].drv, None, the_plan.skipped_fetchers) == ("wheels",)


def test_an_answering_mirror_is_kept_and_not_marked_untried(tmp_path, manifests_dir, server):  # noqa: F811
    live = f"mirror:{server.url}"
    pkgs = redist_pkgs(tmp_path / "store", [live, "wheels"])
    with Store.open(tmp_path / "store") as store:
        the_plan = plan(store, [pkgs.cudaPackages_13_0.cuda_cudart.derivation],
                        probe=lambda urls: reachability.probe(urls, timeout_s=1.0))
    assert the_plan.skipped == ()
    chosen = [f.choice for f in the_plan.to_fetch if f.choice is not None]
    assert chosen and all(c.fetcher == live and c.untried is None for c in chosen)


def test_every_fetcher_dead_is_one_plan_error_naming_the_host(tmp_path, manifests_dir):
    port = free_port()
    dead = f"mirror:http://127.0.0.1:{port}"
    pkgs = redist_pkgs(tmp_path / "store", [dead])
    with Store.open(tmp_path / "store") as store, pytest.raises(SourcePlanError) as raised:
        plan(store, [pkgs.cudaPackages_13_0.cuda_cudart.derivation],
             probe=lambda urls: reachability.probe(urls, timeout_s=1.0))
    text = str(raised.value)
    assert f"skipped for this plan, no answer: {dead} at http://127.0.0.1:{port}" in text
    assert "refused" in text


def test_a_fixed_output_source_whose_host_is_dead_fails_at_planning(tmp_path):
    port = free_port()
    pkgs = import_pkgs({"storeDir": str(tmp_path / "store")})
    src = pkgs.fetchurl(url=f"http://127.0.0.1:{port}/dl/thing-1.0.tar.gz", hash="sha256-" + "A" * 43 + "=")
    with Store.open(tmp_path / "store") as store, pytest.raises(SourcePlanError) as raised:
        plan(store, [src.derivation], probe=lambda urls: reachability.probe(urls, timeout_s=1.0))
    text = str(raised.value)
    assert f"cannot fetch its source: no location answers (http://127.0.0.1:{port}: " in text
    assert "thing-1.0.tar.gz" in text and "sourceMirrors" in text


def test_zlib_needs_no_host_its_archive_ships_with_cudapkgs(tmp_path):
    """GitHub is not asked for zlib's source: the shipped mirror holds it (the plan probes nothing),
    and the fetch takes it from there, checked against Nixpkgs' NAR hash."""
    assert (Path(SHIPPED_SOURCES) / "zlib-1.3.1.tar.gz").is_file()
    pkgs = import_pkgs({"storeDir": str(tmp_path / "store")})
    source = pkgs.zlib.src
    asked = []

    def dead(urls):
        asked.extend(urls)
        return {reachability.base_url(u): "no network in this test" for u in urls}

    with Store.open(tmp_path / "store") as store:
        the_plan = plan(store, [source.derivation], probe=dead)
        assert asked == [] and [d.name for d in the_plan.to_build] == ["source"]
        from cudapkgs.realise.realise import log_path, realise

        path = realise(store, [source.derivation])[0]
        log = log_path(store, source.derivation).read_text()
    assert (Path(path) / "zlib.h").is_file()
    assert f"from {SHIPPED_SOURCES}/zlib-1.3.1.tar.gz" in log


def cli(*args, env):
    return subprocess.run([sys.executable, "-m", "cudapkgs", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_dry_run_says_which_fetcher_is_skipped_and_why(tmp_path, manifests_dir):
    port = free_port()
    dead = f"mirror:http://127.0.0.1:{port}"
    env = {"CUDAPKGS_STORE": str(tmp_path / "store")}
    args = ("build", "--dry-run", "--set", "allowUnfree=true", "--set", f'fetchers=["{dead}", "wheels"]',
            "cudaPackages_13_0.cuda_cudart")
    done = cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"skipped for this plan: fetcher {dead} (http://127.0.0.1:{port} does not answer: ")
    assert "refused" in first
    data = json.loads(cli(*args, "--json", env=env).stdout)
    assert [s["fetcher"] for s in data["skippedFetchers"]] == [dead]
    off = cli(*args, env={**env, "CUDAPKGS_PROBE_HOSTS": "0"})
    assert "skipped for this plan" not in off.stdout  # probing off: the mirror is assumed to answer


def test_dry_run_warns_about_nccls_source_build(tmp_path, manifests_dir):
    env = {"CUDAPKGS_STORE": str(tmp_path / "store"), "CUDAPKGS_PROBE_HOSTS": "0"}
    source = cli("build", "--dry-run", "--set", "allowUnfree=true", "--set", 'prebuiltWheels=["libnvshmem"]',
                 "cudaPackages_13_0.nccl", env=env)
    assert source.returncode == 0, source.stderr
    warnings = [line for line in source.stdout.splitlines() if line.startswith("warning: ")]
    assert warnings == [f"warning: cuda13.0-nccl-2.30.7-1 is built from source: about an hour on two cores (nvcc for "
                        f"every capability); NVIDIA's prebuilt wheel of the same version is the default "
                        f"(prebuiltWheels, docs/ml-stack.md)"]
    default = cli("build", "--dry-run", "--set", "allowUnfree=true", "cudaPackages_13_0.nccl", env=env)
    assert default.returncode == 0, default.stderr
    assert "warning:" not in default.stdout  # the default is NVIDIA's wheel: nothing slow


def test_build_evaluates_again_without_a_dead_fetcher(tmp_path, manifests_dir):
    """The first command's case: with NVIDIA's server (here a dead mirror) configured, triton takes
    cuda_nvcc's ptxas, which only that server has on a CUDA 12 set; once the plan finds it silent, the
    installables are evaluated again without it, and triton takes cuda_nvcc_wheel's (what
    fetchers = ["wheels"] gives) instead of failing to fetch cuda_nvcc."""
    port = free_port()
    dead = f"mirror:http://127.0.0.1:{port}"
    env = {"CUDAPKGS_STORE": str(tmp_path / "store"), "CUDAPKGS_PYPI_SIMPLE": f"http://127.0.0.1:{port}/simple"}
    args = ("build", "--dry-run", "--json", "--set", "allowUnfree=true", "--set", f'fetchers=["{dead}", "wheels"]',
            "cudaPackages_12_9.pkgs.pkgsCuda.python3Packages.triton")
    done = cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [s["fetcher"] for s in data["skippedFetchers"]] == [dead]
    built = [p.rsplit("/", 1)[1].split("-", 1)[1] for p in data["build"]]
    assert "cuda12.9-cuda_nvcc_wheel-12.9.86.drv" in built, built  # cuda_nvcc_wheel's ptxas
    # not cuda_nvcc's ptxas (NVIDIA's archive; since a74c656 triton takes it through cuda_nvcc-tools, the
    # same archive's tools without a host compiler)
    assert "cuda12.9-cuda_nvcc-12.9.86.drv" not in built and "cuda12.9-cuda_nvcc-tools-12.9.86.drv" not in built
    # Without the second evaluation (probing off, the mirror assumed to answer) the plan takes cuda_nvcc's.
    off = json.loads(cli(*args, env={**env, "CUDAPKGS_PROBE_HOSTS": "0"}).stdout)
    built_off = [p.rsplit("/", 1)[1].split("-", 1)[1] for p in off["build"]]
    assert "cuda12.9-cuda_nvcc-tools-12.9.86.drv" in built_off and "cuda12.9-cuda_nvcc_wheel-12.9.86.drv" not in built_off


def test_plan_what_if_names_the_skipped_fetcher(tmp_path, manifests_dir):
    port = free_port()
    dead = f"mirror:http://127.0.0.1:{port}"
    done = cli("plan", "--json", "--set", "allowUnfree=true", "--set", f'fetchers=["{dead}", "wheels"]',
               "cudaPackages_13_0.cuda_cudart", env={"CUDAPKGS_STORE": str(tmp_path / "store")})
    assert done.returncode == 0, done.stderr
    current = json.loads(done.stdout)["current"]
    assert [s["fetcher"] for s in current["skippedFetchers"]] == [dead]
    assert {f["fetcher"] for f in current["fetch"]} == {"wheels"}
