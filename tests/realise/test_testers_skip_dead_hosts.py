"""`cudapkgs test` on a machine where a configured fetcher's host does not answer (issue 31, deliverable 3).

Before, `cudapkgs test --set allowUnfree=true cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torchvision`
failed on a machine reaching only PyPI: the test was evaluated with the default fetchers, so triton
took cuobjdump and nvdisasm (only NVIDIA's server has 13.0's), and the plan, having skipped the silent
server, found no fetcher for them; `cudapkgs build` and `shell` evaluate again without the skipped
fetchers, and the same test built there.  Here a test whose inputs depend on the configured fetchers
in the same way: with the refusing 127.0.0.1 mirror first it needs cudart, which only that mirror
could serve; without it, nothing to fetch.
"""

from __future__ import annotations

import os
import socket

import pytest
from elf_builders import GCC

import cudapkgs
from cudapkgs import testers
from cudapkgs.api import lazy, mk_derivation
from cudapkgs.fetch import reachability

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc")


def refused_url() -> str:
    """An http:// URL on 127.0.0.1 where nothing listens (a port just closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def overlay(final, prev):
    def subject():
        config = final.config
        # As triton: an input only where a fetcher that could supply it is configured.
        needs_cudart = any(f.startswith("mirror:http") for f in config.fetchers)
        test = mk_derivation(config, {
            "pname": "subject-test", "version": "1", "dontUnpack": True,
            "nativeBuildInputs": [final.cudaPackages_13_0.cuda_cudart] if needs_cudart else [],
            "installPhase": 'mkdir -p "$out" && echo "ran without cudart" > "$out/log"',
        })
        return mk_derivation(config, {"pname": "subject", "version": "1", "dontUnpack": True,
                                      "installPhase": 'mkdir -p "$out"', "passthru": {"tests": {"run": test}}})

    return {"subject": lazy(subject)}


def test_a_test_is_evaluated_again_without_the_fetchers_whose_host_does_not_answer(manifests_dir, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.delenv("CUDAPKGS_PROBE_HOSTS", raising=False)
    reachability.forget()
    (tmp_path / "empty-mirror").mkdir()
    dead = f"mirror:{refused_url()}"
    config = {"allowUnfree": True, "storeDir": os.fspath(tmp_path / "store"),
              "fetchers": [dead, f"mirror:{tmp_path / 'empty-mirror'}"]}
    pkgs = cudapkgs.import_pkgs(config=config, system="x86_64-linux", overlays=(overlay,))
    try:
        [result] = testers.run_tests(pkgs, ["subject"], offered=frozenset())
    finally:
        reachability.forget()
    assert (result.test, result.result, result.detail) == ("subject.tests.run", "passed", "ran without cudart")


def test_a_source_no_answering_fetcher_has_still_fails_naming_it(manifests_dir, tmp_path, monkeypatch):
    """Nothing to evaluate again (the only other fetcher cannot serve cudart either): the test fails
    saying which source and which fetchers could."""
    monkeypatch.delenv("CUDAPKGS_PROBE_HOSTS", raising=False)
    reachability.forget()
    (tmp_path / "empty-mirror").mkdir()
    dead = f"mirror:{refused_url()}"

    def always(final, prev):
        def subject():
            test = mk_derivation(final.config, {"pname": "subject-test", "version": "1", "dontUnpack": True,
                                                "nativeBuildInputs": [final.cudaPackages_13_0.cuda_cudart],
                                                "installPhase": 'mkdir -p "$out"'})
            return mk_derivation(final.config, {"pname": "subject", "version": "1", "dontUnpack": True,
                                                "installPhase": 'mkdir -p "$out"', "passthru": {"tests": {"run": test}}})
        return {"subject": lazy(subject)}

    config = {"allowUnfree": True, "storeDir": os.fspath(tmp_path / "store"),
              "fetchers": [dead, f"mirror:{tmp_path / 'empty-mirror'}"]}
    pkgs = cudapkgs.import_pkgs(config=config, system="x86_64-linux", overlays=(always,))
    try:
        [result] = testers.run_tests(pkgs, ["subject"], offered=frozenset())
    finally:
        reachability.forget()
    assert result.result == "failed"
    assert "no configured fetcher can supply cuda_cudart-linux-x86_64-13.0" in result.detail
