from __future__ import annotations

import os

import pytest
from fetch_server import server, sha  # noqa: F401 - server is a fixture

from cudapkgs.errors import FetchError, HashMismatchError
from cudapkgs.fetch import FetchedArtifact, MirrorSource, RedistSource, WheelSource, fetch_artifact, redist_path
from cudapkgs.manifests import Artifact

DATA = b"not really an xz archive\n" * 1000
REL = "cuda_cudart/linux-x86_64/cuda_cudart-linux-x86_64-13.0.96-archive.tar.xz"
ARTIFACT = Artifact(relative_path=REL, sha256=sha(DATA), md5=None, size=len(DATA))
FAST = {"attempts": 2, "backoff": 0.0, "timeout": 10}


def fetch(sources, dest, artifact=ARTIFACT, product="cuda"):
    return fetch_artifact(sources, product, "cuda_cudart", "13.0.96", artifact, dest, cuda_major=13)


def test_redist_path():
    assert redist_path("cuda", REL) == f"cuda/redist/{REL}"
    assert redist_path("tensorrt", "tensorrt/10.9/x.tar.gz") == "machine-learning/tensorrt/10.9/x.tar.gz"
    for bad in ("../etc/passwd", "/abs", "a//b", "a/./b"):
        with pytest.raises(FetchError, match="refusing"):
            redist_path("cuda", bad)


def test_redist_source_url(server, tmp_path):
    server.files[f"/compute/cuda/redist/{REL}"] = DATA
    got = fetch([RedistSource(f"{server.url}/compute", **FAST)], tmp_path)
    assert got == FetchedArtifact("tarball", tmp_path / os.path.basename(REL), f"redist {server.url}/compute")
    assert got.path.read_bytes() == DATA
    assert RedistSource().location("cuda", REL) == f"https://developer.download.nvidia.com/compute/cuda/redist/{REL}"
    assert RedistSource().name == "redist"


def test_mirror_directory(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "cuda/redist" / REL).parent.mkdir(parents=True)
    (mirror / "cuda/redist" / REL).write_bytes(DATA)
    got = fetch([MirrorSource(mirror)], tmp_path / "out")
    assert got.kind == "tarball" and got.source_name == f"mirror {mirror}"
    assert got.path.read_bytes() == DATA


def test_mirror_url_prefix(server, tmp_path):
    server.files[f"/nv/cuda/redist/{REL}"] = DATA
    got = fetch([MirrorSource(f"{server.url}/nv/", **FAST)], tmp_path)
    assert got.path.read_bytes() == DATA
    assert server.requests[0][0] == f"/nv/cuda/redist/{REL}"


def test_mirror_file_url(tmp_path):
    mirror = tmp_path / "m"
    (mirror / "machine-learning/tensorrt").mkdir(parents=True)
    (mirror / "machine-learning/tensorrt/t.tar.gz").write_bytes(DATA)
    artifact = Artifact("tensorrt/t.tar.gz", sha(DATA), None, None)
    got = fetch([MirrorSource(mirror.as_uri())], tmp_path / "out", artifact, product="tensorrt")
    assert got.path.name == "t.tar.gz"


def test_sources_in_order_first_success_wins(server, tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "cuda/redist" / REL).parent.mkdir(parents=True)
    (mirror / "cuda/redist" / REL).write_bytes(DATA)
    server.files[f"/cuda/redist/{REL}"] = DATA
    server.script = ["500", "500"]
    got = fetch([RedistSource(server.url, **FAST), MirrorSource(mirror), MirrorSource(server.url)], tmp_path / "out")
    assert got.source_name == f"mirror {mirror}"
    assert server.hits(f"/cuda/redist/{REL}") == 2  # the redist source's two attempts; the last was never tried


def test_hash_mismatch_falls_through_to_next_source(server, tmp_path):
    server.files[f"/bad/cuda/redist/{REL}"] = b"tampered"
    server.files[f"/good/cuda/redist/{REL}"] = DATA
    got = fetch([MirrorSource(f"{server.url}/bad", **FAST), MirrorSource(f"{server.url}/good", **FAST)], tmp_path)
    assert got.source_name == f"mirror {server.url}/good"
    assert os.listdir(tmp_path) == [os.path.basename(REL)]


def test_all_sources_fail(server, tmp_path):
    server.files[f"/bad/cuda/redist/{REL}"] = DATA[:-1]
    sources = [
        RedistSource(server.url, **FAST),
        MirrorSource(tmp_path / "empty"),
        MirrorSource(f"{server.url}/bad", **FAST),
        WheelSource(pip=["false"]),
    ]
    artifact = Artifact(REL, ARTIFACT.sha256, None, None)
    fallbacks = []
    with pytest.raises(FetchError) as caught:
        fetch_artifact(sources, "cuda", "cuda_foo", "13.0.96", artifact, tmp_path / "out", cuda_major=13,
                       on_fallback=lambda *a: fallbacks.append(a))
    # one report per fallback (it used to be silent): the failed source, its reason, the next one
    assert [(failed, nxt) for failed, _, nxt in fallbacks] == [(s.name, n.name) for s, n in zip(sources, sources[1:])]
    assert "HTTP 404" in fallbacks[0][1]
    message = str(caught.value)
    assert not isinstance(caught.value, HashMismatchError)
    assert message.startswith(f"cannot fetch cuda_foo 13.0.96 ({REL}) from any source: ")
    assert f"redist {server.url}: cannot download" in message and "HTTP 404" in message
    assert f"mirror {tmp_path / 'empty'}: cannot read" in message
    assert f"mirror {server.url}/bad: {os.path.basename(REL)}: expected sha256 {ARTIFACT.sha256}" in message
    assert "pypi wheels: NVIDIA publishes no PyPI wheel of cuda_foo for CUDA 13" in message
    assert "\n" not in message
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_no_sources(tmp_path):
    with pytest.raises(FetchError, match="no sources configured"):
        fetch([], tmp_path)
