"""The "skipped for this plan" note of `build` and `shell` is said when something will be fetched or
built, not on every start with nothing to do.

Before, on a machine reaching only PyPI, every `cudapkgs shell --set allowUnfree=true
cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch` start said "skipped for this plan: fetcher redist
(… does not answer …); its sources come from the next configured fetcher" though nothing was fetched:
the first evaluation (with NVIDIA's server among the fetchers) wanted triton's cuobjdump, the one
without it found everything valid.  Here a package whose inputs depend on the fetchers in the same way.
"""

from __future__ import annotations

import socket

import pytest
from elf_builders import GCC

from cudapkgs.cli import main
from cudapkgs.fetch import reachability

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc")

PACKAGE = '''\
from cudapkgs.api import mk_derivation


def subject(config, cudaPackages_13_0):
    # as triton: an input only where a fetcher that could supply it is configured
    dead_first = any(f.startswith("mirror:http") for f in config.fetchers)
    return mk_derivation(config, {
        "pname": "subject", "version": "1", "dontUnpack": True,
        "nativeBuildInputs": [cudaPackages_13_0.cuda_cudart] if dead_first else [],
        "installPhase": 'mkdir -p "$out"',
    })
'''


def test_the_note_is_said_when_building_not_on_a_start_with_nothing_to_do(manifests_dir, tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.delenv("CUDAPKGS_PROBE_HOSTS", raising=False)
    reachability.forget()
    with socket.socket() as sock:  # a port where nothing listens: connections are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "empty-mirror").mkdir()
    (tmp_path / "pkgs.py").write_text(PACKAGE)
    fetchers = f'fetchers=["mirror:http://127.0.0.1:{port}", "mirror:{tmp_path / "empty-mirror"}"]'
    argv = ["--no-eval-cache", "build", "--no-link", "-f", str(tmp_path / "pkgs.py"), "subject",
            "--set", "allowUnfree=true", "--set", f"storeDir={tmp_path / 'store'}", "--set", fetchers]
    try:
        assert main(argv) == 0
        first = capsys.readouterr().err
        reachability.forget()  # a new command: probed again
        assert main(argv) == 0
        again = capsys.readouterr().err
    finally:
        reachability.forget()
    assert f"skipped for this plan: fetcher mirror:http://127.0.0.1:{port}" in first  # it built subject
    assert "skipped for this plan" not in again
