"""cuDNN for CUDA 13.0 from NVIDIA's wheel: it builds (zlib from the store, built from its pinned source),
and every library loads with nothing unresolved and nothing but glibc/libstdc++ from the host (ldd).

Downloads through pip (marked wheels; cached in ~/.cache or $CUDAPKGS_TEST_CACHE_HOME).
"""

from __future__ import annotations

import fnmatch
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.hooks import HOST_LIBS
from cudapkgs.pkgs.sources import source_dirs
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store

pytestmark = pytest.mark.wheels


def test_cudnn_libraries_resolve_from_the_store(tmp_path, manifests_dir, wheel_cache, require_pypi):
    mirror = next((d for d in source_dirs() if (d / "zlib-1.3.1.tar.gz").is_file()), None)
    if mirror is None:
        pytest.skip("zlib's source is not in the source mirror (set CUDAPKGS_SOURCES, e.g. ../shared/sources)")
    require_pypi("nvidia-cudnn-cu13")
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={
        "storeDir": str(store_dir), "fetchers": ["wheels"], "allowUnfree": True,
        "cudaSupport": True, "cudaCapabilities": ["9.0"], "sourceMirrors": [str(mirror)],
    })
    cudnn = pkgs.cudaPackages_13_0.cudnn
    with Store.open(store_dir) as store:
        realise(store, [cudnn.derivation])
        assert pkgs.zlib.out in store.closure([cudnn.lib])
    libs = [p for p in Path(cudnn.lib, "lib").glob("libcudnn*.so.*") if not p.is_symlink()]
    assert len(libs) >= 8
    for lib in libs:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True, env={}).stdout
        for line in out.splitlines():
            if "=>" not in line:
                continue
            name, target = line.split()[0], line.split("=>")[1].split("(")[0].strip()
            assert target != "not found", f"{lib.name}: {name} not found"
            if not any(fnmatch.fnmatchcase(name, pat) for pat in HOST_LIBS):
                assert target.startswith(str(store_dir) + "/"), f"{lib.name}: {name} from the host ({target})"
            if name == "libz.so.1":
                assert target.startswith(pkgs.zlib.out + "/")
