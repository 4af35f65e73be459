"""docs/fetchers.md is what `cudapkgs list --fetchers --markdown --system x86_64-linux` prints now."""

from __future__ import annotations

from pathlib import Path

import cudapkgs
from cudapkgs.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "fetchers.md"


def test_the_committed_fetcher_table_is_current(manifests_dir, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("CUDAPKGS_CONFIG", raising=False)  # no user configuration
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert main(["list", "--fetchers", "--markdown", "--system", "x86_64-linux"]) == 0
    printed = capsys.readouterr().out
    assert printed == DOC.read_text(), (
        "docs/fetchers.md is stale: regenerate it with "
        "`cudapkgs list --fetchers --markdown --system x86_64-linux > docs/fetchers.md`")


def test_the_table_says_what_each_fetcher_supplies(manifests_dir, tmp_path):
    from cudapkgs.inventory import fetcher_table

    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")}, system="x86_64-linux")
    rows = {r["component"]: r["sets"] for r in fetcher_table(pkgs, ["cudaPackages_12_8", "cudaPackages_13_4"])}
    nvcc12 = rows["cuda_nvcc"]["cudaPackages_12_8"]
    assert nvcc12["redist"] == nvcc12["mirror"] == "cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz"
    assert "lacks bin/nvcc" in nvcc12["wheels"]["reason"]
    assert rows["cccl"]["cudaPackages_13_4"]["wheels"] == "nvidia-cuda-cccl==13.3.4.3.1"
    assert rows["cccl"]["cudaPackages_12_8"] is None  # cuda_cccl before 13.3
    assert rows["cuda_compat"]["cudaPackages_13_4"] is None  # no x86_64 release in 13.4's manifest
