"""A build honours its plan's verdict on a silent host: the fetcher is not tried again (issue 31, deliverable 3).

Before, every archive tried NVIDIA's server at build time and fell over to the next fetcher late, one
after another (30 of 43 builds done, then cuda_nvcc failed). Here the first configured mirror is a
127.0.0.1 server that accepts connections and never answers: the plan's probe is its only
connection, and the builds fetch from the second mirror.
"""

from __future__ import annotations

import os

import pytest
import redist_fixtures as rf
from elf_builders import GCC
from slow_server import raw_server

import cudapkgs
from cudapkgs.fetch import reachability
from cudapkgs.realise.scheduler import plan, run
from cudapkgs.store.store import Store

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc")


def silent(conn, server):
    server.stopping.wait(server.cap_s)


def test_builds_never_ask_the_host_the_plan_found_silent(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAPKGS_PROBE_HOSTS", raising=False)
    reachability.forget()
    release = rf.make_release(tmp_path / "release")
    manifests = release.write_manifests(tmp_path / "manifests")
    driver = rf.make_driver_dir(tmp_path / "driver")
    with raw_server(silent, cap_s=30) as quiet:
        for live in rf.serve():
            live.files.update(release.archives)
            dead = f"mirror:{quiet.url}"
            config = {"allowUnfree": True, "manifestsDir": os.fspath(manifests), "storeDir": os.fspath(tmp_path / "store"),
                      "fetchers": [dead, f"mirror:{live.url}"], "driverLibDir": os.fspath(driver)}
            cuda = cudapkgs.import_pkgs(config=config, system="x86_64-linux")[rf.SET]
            drvs = [cuda.cuda_cudart.derivation, cuda.libcublas.derivation]
            with Store.open(tmp_path / "store") as store:
                the_plan = plan(store, drvs, probe=lambda urls: reachability.probe(urls, timeout_s=1.0))
                assert the_plan.skipped_fetchers == {dead}
                assert {f.choice.fetcher for f in the_plan.to_fetch if f.choice is not None} == {f"mirror:{live.url}"}
                built = run(store, the_plan, jobs=2)
            assert any(p.endswith("-cuda13.0-libcublas-13.1.1.3-lib") for p in built)
            assert quiet.connections == 1  # the plan's probe; no build asked it again
            assert live.hits("/cuda/redist/" + release.entries["libcublas"][1]) == 1
    reachability.forget()
