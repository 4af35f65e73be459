"""pkgs.rdma_core: pinned Debian packages through apt-get; libcufile builds with them.

The evaluation test runs everywhere; the build downloads through apt (network), so it runs only
with CUDAPKGS_TEST_APT=1 on a Debian/Ubuntu machine (and libcufile's wheel through pip).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import cudapkgs
from cudapkgs.pkgs.rdma_core.package import DEBS
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store


@pytest.fixture
def pkgs(tmp_path, manifests_dir):
    return cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "allowUnfree": True,
                                        "fetchers": ["wheels"], "cudaSupport": True, "cudaCapabilities": ["9.0"]})


def test_pins_are_in_the_derivation_and_libcufile_takes_it(pkgs):
    rdma = pkgs["rdma-core"]
    assert rdma.drvAttrs["debHashes"] == [d[2] for d in DEBS]
    changed = rdma.override_attrs({"debHashes": ["0" * 64] + [d[2] for d in DEBS[1:]]})
    assert changed.drvPath != rdma.drvPath  # another pin, another store path
    cufile = pkgs.cudaPackages_13_0.libcufile.derivation
    assert cufile.data["inputs"]["rdma-core.out"] == rdma.out


@pytest.mark.wheels
@pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_APT") != "1" or shutil.which("apt-get") is None,
                    reason="downloads through apt-get: set CUDAPKGS_TEST_APT=1 on a Debian/Ubuntu machine")
def test_libcufile_rdma_resolves_rdma_core_from_the_store(pkgs, wheel_cache):
    cufile = pkgs.cudaPackages_13_0.libcufile
    with Store.open(pkgs.config.storeDir) as store:
        realise(store, [cufile.derivation])
    out = subprocess.run(["ldd", f"{cufile.lib}/lib/libcufile_rdma.so.1"], capture_output=True, text=True, env={}).stdout
    for lib in ("libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1"):
        line = next(l for l in out.splitlines() if lib in l)
        assert pkgs["rdma-core"].out in line, line
