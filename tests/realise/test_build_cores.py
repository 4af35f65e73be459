"""`cudapkgs build --cores N`: NIX_BUILD_CORES of each build, as Nix's `cores` setting (0: every CPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from cudapkgs.errors import ConfigError
from cudapkgs.realise.build_cores import CORES_VARIABLE, build_cores


def test_build_cores_follows_the_setting_and_zero_means_every_cpu():
    every = os.cpu_count() or 1
    assert build_cores({}) == every
    assert build_cores({CORES_VARIABLE: "0"}) == every
    assert build_cores({CORES_VARIABLE: "1"}) == 1
    assert build_cores({CORES_VARIABLE: "16"}) == 16
    for bad in ("-1", "two", "1.5", "9" * 12):
        with pytest.raises(ConfigError, match="whole number"):
            build_cores({CORES_VARIABLE: bad})


PACKAGES = '''
from cudapkgs.api import mk_derivation


def cores_probe(config):
    return mk_derivation(config, {"pname": "cores-probe", "version": "1", "dontUnpack": True, "stdenvCc": None,
                                  "installPhase": 'mkdir -p "$out" && echo "$NIX_BUILD_CORES" > "$out/cores"'})
'''


@pytest.mark.parametrize("cores", ["1", "3"])
def test_cli_cores_reaches_the_build_and_not_the_store_path(tmp_path, cores):
    project = tmp_path / "p"
    project.mkdir()
    (project / "pkgs.py").write_text(PACKAGES)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop(CORES_VARIABLE, None)
    paths = []
    for extra in (["--cores", cores], []):
        store = tmp_path / "store"  # the same store directory, emptied: the same derivation, so the same path
        if store.exists():
            subprocess.run(["chmod", "-R", "u+w", str(store)], check=True)
            shutil.rmtree(store)
        run = subprocess.run([sys.executable, "-m", "cudapkgs", "build", "--set", f"storeDir={store}", "--no-link",
                              "--no-eval-cache", *extra, "-f", "pkgs.py", "cores_probe"],
                             cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        out = next(p for p in store.iterdir() if p.name.endswith("-cores-probe-1"))
        paths.append((out.name, (out / "cores").read_text().strip()))
    assert paths[0][1] == cores
    assert paths[1][1] == str(os.cpu_count() or 1)
    assert paths[0][0] == paths[1][0]  # the same store path: the environment, not the derivation
