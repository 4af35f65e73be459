"""Tests of cudapkgs.manifests: parsing, validation, release selection, lookup, and `manifests update`."""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import MANIFESTS
from cudapkgs import manifests as m
from cudapkgs.manifests import locate, model, update
from cudapkgs.errors import CudapkgsError, ManifestError

RELEASE_FIELDS = {"release_date", "release_label", "release_product"}
ALL_FILES = sorted(MANIFESTS.glob("*/redistrib_*.json"))
ALL_IDS = [f"{p.parent.name}/{p.name}" for p in ALL_FILES]


def product_version(path: Path) -> tuple[str, str]:
    return path.parent.name, path.name[len("redistrib_") : -len(".json")]


@pytest.fixture
def fresh_memo(monkeypatch):
    """An empty parse memo, so that a test sees files parsed afresh."""
    monkeypatch.setattr(locate, "_PARSED", {})


def write_manifest(root: Path, product: str, version: str, text: str | bytes) -> Path:
    path = root / product / f"redistrib_{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def artifact_json(name: str = "x", **overrides) -> dict:
    entry = {
        "relative_path": f"{name}/linux-x86_64/{name}-archive.tar.xz",
        "sha256": "a" * 64,
        "md5": "b" * 32,
        "size": "123",
    }
    entry.update(overrides)
    return {k: v for k, v in entry.items() if v is not None}


# ---------------------------------------------------------------------------------------------
# Every shared manifest parses, and agrees with an independent reading of the raw JSON


def test_shared_manifests_are_present():
    assert len(ALL_FILES) >= 18
    assert {p.parent.name for p in ALL_FILES} >= {"cuda", "cudnn", "tensorrt", "cusparselt", "cutensor", "cudss"}


@pytest.mark.parametrize("path", ALL_FILES, ids=ALL_IDS)
def test_every_manifest_parses_and_matches_raw_json(path, manifests_dir):
    product, version = product_version(path)
    raw = json.loads(path.read_text())
    manifest = m.load_manifest(product, version)

    expected_pnames = [k for k, v in raw.items() if k not in RELEASE_FIELDS and isinstance(v, dict)]
    assert list(manifest.releases) == expected_pnames  # file order kept
    assert len(manifest.releases) == len(expected_pnames)
    assert manifest.product == product and manifest.version == version
    assert manifest.release_label == raw.get("release_label", version)
    assert manifest.release_date == raw.get("release_date")
    assert manifest.release_product == raw.get("release_product")
    assert manifest.source == str(MANIFESTS / product / path.name)

    for pname in expected_pnames:
        rel_raw = raw[pname]
        release = manifest.releases[pname]
        assert release.pname == pname
        assert release.version == rel_raw["version"]
        assert release.name == rel_raw["name"]
        assert release.license == rel_raw.get("license")
        assert release.license_path == rel_raw.get("license_path")
        variants = rel_raw.get("cuda_variant")
        assert release.cuda_variants == (tuple(variants) if variants is not None else None)
        raw_systems = {k for k, v in rel_raw.items() if isinstance(v, dict)}
        assert set(release.systems) == raw_systems
        for system, value in release.systems.items():
            raw_value = rel_raw[system]
            if isinstance(value, m.Artifact):
                leaves = {None: (value, raw_value)}
            else:
                leaves = {key: (art, raw_value[key]) for key, art in value.items()}
                assert set(value) == {k for k, v in raw_value.items() if isinstance(v, dict)}
            for artifact, raw_art in leaves.values():
                assert artifact.relative_path == raw_art["relative_path"]
                assert artifact.sha256 == raw_art["sha256"]
                assert artifact.md5 == raw_art.get("md5")
                assert artifact.size == int(raw_art["size"])


def test_index_package_counts_agree():
    """INDEX.md's 'packages' column is a third, independent count."""
    counts = {}
    for line in (MANIFESTS / "INDEX.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 9 and cells[1].startswith("`") and cells[1].endswith(".json`"):
            counts[cells[1].strip("`")] = int(cells[7])
    assert len(counts) == len(ALL_FILES)
    for rel, count in counts.items():
        product, name = rel.split("/")
        manifest = m.load_manifest(product, name[len("redistrib_") : -len(".json")], directory=MANIFESTS)
        assert len(manifest.releases) == count, rel


# ---------------------------------------------------------------------------------------------
# Spot facts


def test_cuda_12_8_2_nvcc(manifests_dir):
    manifest = m.load_manifest("cuda", "12.8.2")
    nvcc = manifest.releases["cuda_nvcc"]
    assert nvcc.version == "12.8.93"
    assert nvcc.license == "CUDA Toolkit"
    assert nvcc.license_path == "cuda_nvcc/LICENSE.txt"
    assert nvcc.cuda_variants is None
    art = nvcc.systems["linux-x86_64"]
    assert art == m.Artifact(
        relative_path="cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz",
        sha256="9961b3484b6b71314063709a4f9529654f96782ad39e72bf1e00f070db8210d3",
        md5="5d7d11d3c8713fe8f19a2228b2b2b4bf",
        size=79015464,
    )
    assert nvcc.supported_redist_systems("12.8.2") == ["linux-aarch64", "linux-sbsa", "linux-x86_64", "windows-x86_64"]
    assert nvcc.preferred_release("12.8.2", "linux-sbsa") == ("linux-sbsa", nvcc.systems["linux-sbsa"])
    assert nvcc.preferred_release("12.8.2", "unsupported") is None
    assert manifest.release_label == "12.8.2"


def test_cudnn_9_13_0_cuda13_sbsa(manifests_dir):
    raw = json.loads((MANIFESTS / "cudnn/redistrib_9.13.0.json").read_text())["cudnn"]["linux-sbsa"]["cuda13"]
    cudnn = m.load_manifest("cudnn", "9.13.0").releases["cudnn"]
    assert cudnn.cuda_variants == ("12", "13")
    art = cudnn.systems["linux-sbsa"]["cuda13"]
    assert art.relative_path == raw["relative_path"] == "cudnn/linux-sbsa/cudnn-linux-sbsa-9.13.0.50_cuda13-archive.tar.xz"
    assert art.sha256 == raw["sha256"] and art.size == int(raw["size"])
    assert cudnn.preferred_release("13.0.3", "linux-sbsa") == ("linux-sbsa", art)
    assert cudnn.supported_releases("13.0.3")["linux-sbsa"] is art
    cuda12 = cudnn.supported_releases("12.8.2")["linux-sbsa"]
    assert cuda12 == cudnn.systems["linux-sbsa"]["cuda12"] and cuda12 != art
    assert cudnn.supported_redist_systems("13.0.3") == ["linux-aarch64", "linux-sbsa", "linux-x86_64", "windows-x86_64"]
    assert cudnn.supported_releases("11.8.0") == {}


def test_cuda_compat_13_1_variant_selection(manifests_dir):
    compat = m.load_manifest("cuda", "13.1.2").releases["cuda_compat"]
    assert compat.cuda_variants == ("13.1",)
    selected = compat.supported_releases("13.1.2")
    assert set(selected) == {"linux-sbsa", "linux-x86_64"}
    assert selected["linux-x86_64"] is compat.systems["linux-x86_64"]["cuda13.1"]
    assert "_cuda13.1-archive" in selected["linux-x86_64"].relative_path
    assert compat.supported_releases("13.1") == selected
    assert compat.supported_releases("13.0.3") == {}
    assert compat.supported_releases("13") == {}
    assert compat.preferred_release("13.0.3", "linux-x86_64") is None
    reason = compat.unavailable_reason("13.0.3", "linux-x86_64")
    assert reason is not None and "\n" not in reason
    assert "cuda_compat" in reason and "linux-x86_64" in reason and "13.0.3" in reason and "cuda13.1" in reason


def test_variant_key_order_prefers_most_specific():
    a_major, a_minor, a_patch = (m.Artifact(f"p/{i}", str(i) * 64, None, None) for i in range(3))
    release = m.Release(
        pname="p", name="p", license=None, license_path=None, version="1", cuda_variants=("13",),
        systems={"linux-x86_64": {"cuda13": a_major, "cuda13.1": a_minor, "cuda13.1.2": a_patch}},
    )
    assert release.supported_releases("13.1.2")["linux-x86_64"] is a_patch
    assert release.supported_releases("13.1.0")["linux-x86_64"] is a_minor
    assert release.supported_releases("13.2.0")["linux-x86_64"] is a_major
    assert release.supported_releases("12.8.2") == {}


def test_linux_all_is_preferred_and_exclusive(manifests_dir):
    assistant = m.load_manifest("cuda", "12.8.2").releases["driver_assistant"]
    assert list(assistant.systems) == ["linux-all"]
    art = assistant.systems["linux-all"]
    assert assistant.supported_redist_systems("12.8.2") == ["linux-all"]
    for system in ("linux-x86_64", "linux-sbsa", "linux-aarch64", "whatever"):
        assert assistant.preferred_release("12.8.2", system) == ("linux-all", art)
        assert assistant.unavailable_reason("12.8.2", system) is None


def test_source_is_preferred_and_exclusive(manifests_dir):
    samples = m.load_manifest("cudnn", "9.22.0").releases["cudnn_samples"]
    assert samples.supported_redist_systems("12.8.2") == ["source"]
    assert samples.preferred_release("13.0.3", "linux-sbsa") == ("source", samples.systems["source"])


def test_source_beats_linux_all_beats_system():
    arts = {s: m.Artifact(f"p/{s}", "0" * 64, None, 1) for s in ("source", "linux-all", "linux-x86_64")}
    both = m.Release("p", "p", None, None, "1", None, dict(arts))
    assert both.supported_releases("12.8.2") == {"source": arts["source"]}
    assert both.preferred_release("12.8.2", "linux-x86_64") == ("source", arts["source"])
    no_source = m.Release("p", "p", None, None, "1", None, {k: v for k, v in arts.items() if k != "source"})
    assert no_source.supported_releases("12.8.2") == {"linux-all": arts["linux-all"]}
    assert no_source.preferred_release("12.8.2", "linux-x86_64") == ("linux-all", arts["linux-all"])


def test_unavailable_reason_names_system_and_variant(manifests_dir):
    cudnn = m.load_manifest("cudnn", "9.22.0").releases["cudnn"]
    assert cudnn.preferred_release("12.8.2", "linux-aarch64") is None
    reason = cudnn.unavailable_reason("12.8.2", "linux-aarch64")
    assert reason.startswith("cudnn 9.22.0.52 has no build for linux-aarch64 with CUDA 12")
    assert "available: linux-sbsa, linux-x86_64, windows-x86_64" in reason
    assert cudnn.unavailable_reason("12.8.2", "linux-x86_64") is None

    compat = m.load_manifest("cuda", "12.6.3").releases["cuda_compat"]  # flat, aarch64 only
    assert compat.unavailable_reason("12.6.3", "linux-x86_64") == (
        "cuda_compat 12.6.36890662 has no build for linux-x86_64 (available: linux-aarch64)"
    )


def test_partial_variant_coverage(manifests_dir):
    trt = m.load_manifest("tensorrt", "10.16.1").releases["tensorrt"]
    assert trt.license_path is None  # hand-made manifests have none
    assert trt.supported_redist_systems("12.8.2") == ["linux-x86_64"]
    assert trt.supported_redist_systems("13.0.3") == ["linux-sbsa", "linux-x86_64"]
    reason = trt.unavailable_reason("12.9.1", "linux-sbsa")
    assert "linux-sbsa" in reason and "CUDA 12" in reason and "linux-x86_64" in reason

    cudss = m.load_manifest("cudss", "0.8.0").releases["libcudss"]
    assert "linux-aarch64" in cudss.supported_redist_systems("12.6.3")
    assert "linux-aarch64" not in cudss.supported_redist_systems("13.1.2")


def test_mixed_flat_and_variant_platform_object(manifests_dir):
    """cuDNN 9.27.0 windows-arm64 holds a cuda13 object and flat fields; Nixpkgs reads the variant."""
    cudnn = m.load_manifest("cudnn", "9.27.0").releases["cudnn"]
    arm = cudnn.systems["windows-arm64"]
    assert set(arm) == {"cuda13"}
    chosen = cudnn.supported_releases("13.4.2")["windows-arm64"]
    assert chosen.relative_path.endswith("9.27.0.42_cuda13-archive.zip")
    assert "windows-arm64" not in cudnn.supported_redist_systems("12.9.1")


def test_platform_object_shapes_without_cuda_variant():
    mixed = dict(artifact_json("flat"), cuda13=artifact_json("nested"))
    doc = {"p": {"version": "1", "linux-x86_64": mixed, "linux-sbsa": {"cuda12": artifact_json("only12")}}}
    release = m.parse_manifest(json.dumps(doc), product="p", version="1", source="s").releases["p"]
    assert release.cuda_variants is None
    # Flat fields win when the release has no cuda_variant (Nixpkgs takes the object as it is).
    assert release.systems["linux-x86_64"].relative_path.startswith("flat/")
    # A platform split by variant is still resolved by the CUDA version.
    assert release.supported_redist_systems("12.8.2") == ["linux-sbsa", "linux-x86_64"]
    assert release.supported_redist_systems("13.0.3") == ["linux-x86_64"]


def test_flat_platform_is_dropped_when_release_has_cuda_variant():
    doc = {"p": {"version": "1", "cuda_variant": ["12"], "linux-x86_64": artifact_json(), "linux-sbsa": {"cuda12": artifact_json()}}}
    release = m.parse_manifest(json.dumps(doc), product="p", version="1", source="s").releases["p"]
    assert release.supported_redist_systems("12.8.2") == ["linux-sbsa"]


def test_natural_sort_of_systems():
    arts = {s: m.Artifact(f"p/{s}", "0" * 64, None, 1) for s in ("sys10", "sys9", "linux-x86_64", "linux-sbsa")}
    release = m.Release("p", "p", None, None, "1", None, arts)
    assert release.supported_redist_systems("12.8.2") == ["linux-sbsa", "linux-x86_64", "sys9", "sys10"]


def test_parsed_objects_are_read_only(manifests_dir):
    manifest = m.load_manifest("cudnn", "9.13.0")
    with pytest.raises(TypeError):
        manifest.releases["x"] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        manifest.releases["cudnn"].systems["linux-sbsa"]["cuda99"] = None  # type: ignore[index]
    with pytest.raises(AttributeError):
        manifest.version = "1"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# parse_manifest details and validation


def test_release_label_defaults_to_requested_version():
    text = json.dumps({"release_date": "2024-01-01", "pkg": {"name": "P", "version": "1.2", "linux-x86_64": artifact_json()}})
    manifest = m.parse_manifest(text, product="cuda", version="12.6.3", source="mem")
    assert manifest.release_label == "12.6.3"
    assert manifest.release_product is None
    release = manifest.releases["pkg"]
    assert release.license is None and release.license_path is None


def test_optional_md5_size_and_extra_string_fields():
    text = json.dumps({
        "release_label": "1.0",
        "comment": "tolerated",
        "pkg": {
            "name": "P", "version": "1", "note": "tolerated",
            "linux-x86_64": artifact_json(md5=None, size=None, extra="tolerated"),
            "linux-sbsa": artifact_json(size=42),
        },
    })
    release = m.parse_manifest(text.encode(), product="p", version="1.0", source="mem").releases["pkg"]
    assert release.systems["linux-x86_64"].md5 is None
    assert release.systems["linux-x86_64"].size is None
    assert release.systems["linux-sbsa"].size == 42


def base_doc() -> dict:
    return {
        "release_label": "12.8.2",
        "cuda_nvcc": {"name": "nvcc", "license": "CUDA Toolkit", "version": "12.8.93", "linux-x86_64": artifact_json("cuda_nvcc")},
        "cudnn": {"name": "cudnn", "version": "9", "cuda_variant": ["12"], "linux-sbsa": {"cuda12": artifact_json("cudnn")}},
    }


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].update(sha256="abc"),
         'cuda_nvcc.linux-x86_64.sha256: expected 64 hexadecimal digits, got "abc"'),
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].update(sha256="g" * 64), "cuda_nvcc.linux-x86_64.sha256: expected 64 hexadecimal digits"),
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].pop("sha256"), "cuda_nvcc.linux-x86_64.sha256: missing"),
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].update(md5="xyz"), 'cuda_nvcc.linux-x86_64.md5: expected 32 hexadecimal digits, got "xyz"'),
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].update(size="abc"), 'cuda_nvcc.linux-x86_64.size: expected a non-negative integer string, got "abc"'),
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].update(size="-1"), "cuda_nvcc.linux-x86_64.size"),
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].update(size=True), "cuda_nvcc.linux-x86_64.size"),
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].pop("relative_path"), "cuda_nvcc.linux-x86_64.relative_path: missing"),
        (lambda d: d["cuda_nvcc"]["linux-x86_64"].update(relative_path="../../etc/passwd"), "cuda_nvcc.linux-x86_64.relative_path"),
        (lambda d: d["cuda_nvcc"].pop("version"), "cuda_nvcc.version: missing"),
        (lambda d: d["cuda_nvcc"].update(version=12), "cuda_nvcc.version: expected a non-empty string, got 12"),
        (lambda d: d["cuda_nvcc"].update(license=["x"]), "cuda_nvcc.license: expected a string"),
        (lambda d: d["cudnn"].update(cuda_variant="12"), "cudnn.cuda_variant: expected a list of strings"),
        (lambda d: d["cudnn"]["linux-sbsa"]["cuda12"].update(sha256="00"), 'cudnn.linux-sbsa.cuda12.sha256: expected 64 hexadecimal digits, got "00"'),
        (lambda d: d["cudnn"]["linux-sbsa"]["cuda12"].pop("relative_path"), "cudnn.linux-sbsa.cuda12.relative_path: missing"),
        (lambda d: d.update(cuda_nvcc=[1, 2]), "cuda_nvcc: expected an object (a release), got a list"),
        (lambda d: d.update(release_label=3), "release_label: expected a string, got 3"),
    ],
)
def test_invalid_fields_name_file_and_field_path(tmp_path, fresh_memo, mutate, expected):
    doc = base_doc()
    mutate(doc)
    path = write_manifest(tmp_path, "cuda", "12.8.2", json.dumps(doc))
    with pytest.raises(ManifestError) as info:
        m.load_manifest("cuda", "12.8.2", directory=tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message
    assert "\n" not in message
    assert isinstance(info.value, CudapkgsError)


def test_real_manifest_with_bad_sha256_gives_exact_message(tmp_path, fresh_memo):
    raw = json.loads((MANIFESTS / "cuda/redistrib_12.8.2.json").read_text())
    raw["cuda_nvcc"]["linux-x86_64"]["sha256"] = "abc"
    path = write_manifest(tmp_path, "cuda", "12.8.2", json.dumps(raw, indent=4))
    with pytest.raises(ManifestError) as info:
        m.load_manifest("cuda", "12.8.2", directory=tmp_path)
    assert str(info.value) == f'{path}: cuda_nvcc.linux-x86_64.sha256: expected 64 hexadecimal digits, got "abc"'


@pytest.mark.parametrize("top", ["[]", "[1, 2]", '"text"', "42", "null"])
def test_top_level_must_be_an_object(tmp_path, fresh_memo, top):
    path = write_manifest(tmp_path, "cudnn", "9.13.0", top)
    with pytest.raises(ManifestError) as info:
        m.load_manifest("cudnn", "9.13.0", directory=tmp_path)
    assert str(info.value).startswith(f"{path}: expected a JSON object at the top level")


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.1, 0.37, 0.5, 0.9, 0.999])
def test_truncated_real_manifest(tmp_path, fresh_memo, fraction):
    data = (MANIFESTS / "cuda/redistrib_12.8.2.json").read_bytes().rstrip()
    cut = data[: int(len(data) * fraction)]
    path = write_manifest(tmp_path, "cuda", "12.8.2", cut)
    with pytest.raises(ManifestError) as info:
        m.load_manifest("cuda", "12.8.2", directory=tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path}: not valid JSON (truncated?): ")
    assert "line" in message and "column" in message  # the JSON error position
    assert "\n" not in message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_truncation_is_a_manifest_error(data):
    raw = (MANIFESTS / "cudnn/redistrib_9.13.0.json").read_bytes().rstrip()
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    with pytest.raises(ManifestError, match=r"^somewhere/cudnn\.json: not valid JSON \(truncated\?\): "):
        m.parse_manifest(raw[:cut], product="cudnn", version="9.13.0", source="somewhere/cudnn.json")


def test_invalid_utf8(tmp_path):
    with pytest.raises(ManifestError, match="^src: not valid"):
        m.parse_manifest(b'{"a": "\xff\xfe\xfa"}', product="p", version="1", source="src")


@settings(max_examples=50, deadline=None)
@given(value=st.one_of(st.text(max_size=70), st.integers(), st.none(), st.booleans()))
def test_sha256_validation_property(value):
    doc = base_doc()
    doc["cuda_nvcc"]["linux-x86_64"]["sha256"] = value
    text = json.dumps(doc)
    valid = isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdefABCDEF" for c in value)
    if valid:
        assert m.parse_manifest(text, product="cuda", version="1", source="s").releases["cuda_nvcc"].systems["linux-x86_64"].sha256 == value
    else:
        with pytest.raises(ManifestError, match=r"^s: cuda_nvcc\.linux-x86_64\.sha256: "):
            m.parse_manifest(text, product="cuda", version="1", source="s")


# ---------------------------------------------------------------------------------------------
# Directories, URLs, versions


def test_lookup_order(monkeypatch, tmp_path):
    """Override (explicit, else $CUDAPKGS_MANIFESTS) alone; else the user directory, then the vendored one."""
    monkeypatch.delenv("CUDAPKGS_MANIFESTS", raising=False)
    assert m.override_directory() is None
    assert m.search_directories() == [("user", m.user_directory()), ("vendored", MANIFESTS)]
    assert m.manifests_directory() == MANIFESTS
    monkeypatch.setenv("CUDAPKGS_MANIFESTS", str(tmp_path / "env"))
    assert m.search_directories() == [("override", tmp_path / "env")]
    assert m.manifests_directory() == tmp_path / "env"
    assert m.search_directories(tmp_path / "explicit") == [("override", tmp_path / "explicit")]
    assert m.override_directory(str(tmp_path / "explicit")) == tmp_path / "explicit"
    monkeypatch.setenv("CUDAPKGS_MANIFESTS", "")
    assert m.override_directory() is None


def test_user_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert m.user_directory() == tmp_path / "xdg" / "cudapkgs" / "manifests"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the XDG spec: relative values are invalid
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert m.user_directory() == tmp_path / "home" / ".local" / "share" / "cudapkgs" / "manifests"


def test_user_copy_wins_over_vendored(monkeypatch, fresh_memo):
    monkeypatch.delenv("CUDAPKGS_MANIFESTS", raising=False)
    raw = json.loads((MANIFESTS / "cuda/redistrib_12.8.2.json").read_text())
    raw["cuda_nvcc"]["version"] = "12.8.99"
    path = write_manifest(m.user_directory(), "cuda", "12.8.2", json.dumps(raw))
    manifest = m.load_manifest("cuda", "12.8.2")
    assert manifest.source == str(path)
    assert manifest.releases["cuda_nvcc"].version == "12.8.99"
    assert m.locate_manifest("cuda", "12.8.2") == ("user", path)
    assert m.locate_manifest("cuda", "12.9.1") == ("vendored", MANIFESTS / "cuda" / "redistrib_12.9.1.json")
    # An override hides both.
    assert m.load_manifest("cuda", "12.8.2", directory=MANIFESTS).releases["cuda_nvcc"].version == "12.8.93"


def test_evaluation_never_downloads(monkeypatch, fresh_memo):
    monkeypatch.delenv("CUDAPKGS_MANIFESTS", raising=False)

    def no_network(*args, **kwargs):
        raise AssertionError("evaluation tried to download")

    monkeypatch.setattr(update, "_download", no_network)
    import cudapkgs

    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True}, system="x86_64-linux")
    assert pkgs.cudaPackages_12_8.libcusparse_lt.version == "0.7.1.0"
    with pytest.raises(ManifestError) as info:
        m.load_manifest("cuda", "12.7.0")
    message = str(info.value)
    assert "cudapkgs manifests update cuda 12.7.0" in message
    assert str(m.user_directory()) in message and str(MANIFESTS) in message
    assert "\n" not in message



def test_manifest_url():
    assert m.manifest_url("cuda", "12.8.2") == "https://developer.download.nvidia.com/compute/cuda/redist/redistrib_12.8.2.json"
    assert m.manifest_url("cudnn", "9.13.0") == "https://developer.download.nvidia.com/compute/cudnn/redist/redistrib_9.13.0.json"
    with pytest.raises(ManifestError, match="tensorrt") as info:
        m.manifest_url("tensorrt", "10.7.0")
    assert "manifest directory" in str(info.value) and "CUDAPKGS_MANIFESTS" in str(info.value)


@pytest.mark.parametrize("bad", ["../cuda", "cuda/x", "", ".."])
def test_bad_names_are_rejected(bad, tmp_path):
    with pytest.raises(ManifestError, match="invalid manifest"):
        m.load_manifest(bad, "12.8.2", directory=tmp_path)
    with pytest.raises(ManifestError, match="invalid manifest"):
        m.load_manifest("cuda", bad, directory=tmp_path)


def test_available_versions_are_version_sorted(manifests_dir):
    assert m.available_versions("cuda") == ["12.6.3", "12.8.2", "12.9.1", "13.0.3", "13.1.2", "13.2.2", "13.3.1", "13.4.2"]
    assert m.available_versions("tensorrt") == ["10.7.0", "10.16.1", "11.3.0"]
    assert m.available_versions("cudnn") == ["8.9.7", "9.13.0", "9.22.0", "9.27.0"]
    assert m.available_versions("nvcomp") == ["5.3.0"]  # vendored since issue 21
    assert m.available_versions("nvpl") == ["26.5"]


def test_available_versions_join_user_and_vendored(monkeypatch):
    monkeypatch.delenv("CUDAPKGS_MANIFESTS", raising=False)
    for version in ("12.10.0", "12.9.1"):
        write_manifest(m.user_directory(), "cuda", version, "{}")
    (m.user_directory() / "cuda" / ".redistrib_1.json.x.tmp").write_text("")
    assert m.available_versions("cuda") == [
        "12.6.3", "12.8.2", "12.9.1", "12.10.0", "13.0.3", "13.1.2", "13.2.2", "13.3.1", "13.4.2"
    ]
    write_manifest(m.user_directory(), "nvcomp", "5.3.0", "{}")
    assert "nvcomp" in m.available_products() and "cusparselt" in m.available_products()



def test_missing_version_lists_present_ones(manifests_dir):
    with pytest.raises(ManifestError) as info:
        m.load_manifest("cuda", "12.7.0")
    message = str(info.value)
    assert message.startswith(f"no cuda/redistrib_12.7.0.json in {MANIFESTS} ")
    assert "12.6.3, 12.8.2, 12.9.1, 13.0.3, 13.1.2, 13.2.2, 13.3.1, 13.4.2" in message


def test_missing_product_and_directory(tmp_path):
    with pytest.raises(ManifestError, match="does not exist"):
        m.load_manifest("cuda", "12.8.2", directory=tmp_path / "nope")
    write_manifest(tmp_path, "cudnn", "9.13.0", "{}")
    with pytest.raises(ManifestError, match=r"no nvcomp manifests \(products present: cudnn\)"):
        m.load_manifest("nvcomp", "5.3.0", directory=tmp_path)



def test_explicit_directory_beats_environment(monkeypatch, tmp_path, fresh_memo):
    monkeypatch.setenv("CUDAPKGS_MANIFESTS", str(tmp_path / "empty"))
    manifest = m.load_manifest("cudss", "0.8.0", directory=MANIFESTS)
    assert manifest.releases["libcudss"].version == "0.8.0.10"


# ---------------------------------------------------------------------------------------------
# Parse at most once


def test_each_file_is_parsed_at_most_once(monkeypatch, manifests_dir, fresh_memo, tmp_path):
    calls = []
    real_loads = json.loads

    def spy(data, *args, **kwargs):
        calls.append(len(data))
        return real_loads(data, *args, **kwargs)

    monkeypatch.setattr(model.json, "loads", spy)
    first = m.load_manifest("cuda", "12.8.2")
    again = m.load_manifest("cuda", "12.8.2")
    same_file_other_spelling = m.load_manifest("cuda", "12.8.2", directory=MANIFESTS / "cuda" / "..")
    assert first is again is same_file_other_spelling
    assert len(calls) == 1
    link = tmp_path / "linked"
    link.symlink_to(MANIFESTS)
    assert m.load_manifest("cuda", "12.8.2", directory=link) is first
    assert len(calls) == 1
    m.load_manifest("cuda", "13.1.2")
    assert len(calls) == 2


# ---------------------------------------------------------------------------------------------
# Download path (a local http.server on 127.0.0.1 only)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server API)
        server = self.server
        server.hits.append(self.path)
        status, body, *declared = server.responses.pop(0) if server.responses else server.default
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(declared[0] if declared else len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    """A manifest server on 127.0.0.1; REDIST_URL_PREFIX points at it and no env manifest dir is set."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.hits = []
    httpd.responses = []
    httpd.default = (200, (MANIFESTS / "cuda/redistrib_12.8.2.json").read_bytes())
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.delenv("CUDAPKGS_MANIFESTS", raising=False)
    monkeypatch.setattr(update, "REDIST_URL_PREFIX", f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.setattr(update, "_DOWNLOAD_BACKOFF_S", 0.0)
    monkeypatch.setattr(update, "_DOWNLOAD_TIMEOUT_S", 5.0)
    monkeypatch.setattr(locate, "_PARSED", {})
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def user_file(product: str, version: str) -> Path:
    return m.user_directory() / product / f"redistrib_{version}.json"


def test_update_writes_user_directory_with_sha256(server):
    body = server.default[1]
    result = m.update_manifest("cuda", "12.8.2")
    assert server.hits == ["/cuda/redist/redistrib_12.8.2.json"]
    path = user_file("cuda", "12.8.2")
    assert result.path == path and result.status == "written"
    assert path.read_bytes() == body
    digest = hashlib.sha256(body).hexdigest()
    assert result.sha256 == digest and result.size == len(body) and result.releases == 44
    assert (path.parent / "redistrib_12.8.2.json.sha256").read_text() == f"{digest}  redistrib_12.8.2.json\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["redistrib_12.8.2.json", "redistrib_12.8.2.json.sha256"]
    assert result.used_by == (m.SetUse("cudaPackages_12_8", None),)
    assert result.shadows == MANIFESTS / "cuda" / "redistrib_12.8.2.json" and result.same_as_vendored
    assert result.url.endswith("/cuda/redist/redistrib_12.8.2.json")
    # Evaluation now reads the user copy; a second update changes nothing.
    assert m.load_manifest("cuda", "12.8.2").source == str(path)
    assert m.update_manifest("cuda", "12.8.2").status == "unchanged"


def test_update_replaces_a_different_user_copy(server):
    write_manifest(m.user_directory(), "cuda", "12.8.2", "{}")
    assert m.update_manifest("cuda", "12.8.2").status == "replaced"
    assert user_file("cuda", "12.8.2").read_bytes() == server.default[1]


def test_a_modified_user_copy_is_detected(server):
    m.update_manifest("cuda", "12.8.2")
    path = user_file("cuda", "12.8.2")
    path.write_bytes(path.read_bytes().replace(b"12.8.93", b"12.8.94"))
    locate._PARSED.clear()
    with pytest.raises(ManifestError) as info:
        m.load_manifest("cuda", "12.8.2")
    message = str(info.value)
    assert message.startswith(f"{path}: sha256 ") and "modified" in message and "\n" not in message


def test_update_retries_server_errors(server):
    server.responses = [(500, b"oops")]
    assert m.update_manifest("cuda", "12.8.2").releases == 44
    assert len(server.hits) == 2


def test_update_retries_a_cut_off_body(server):
    body = server.default[1]
    server.responses = [(200, body[:1000], len(body))]  # the connection closes early
    m.update_manifest("cuda", "12.8.2")
    assert len(server.hits) == 2
    assert user_file("cuda", "12.8.2").read_bytes() == body


def test_update_gives_up_after_retries(server):
    server.default = (503, b"busy")
    with pytest.raises(ManifestError) as info:
        m.update_manifest("cuda", "12.8.2")
    message = str(info.value)
    assert len(server.hits) == update._DOWNLOAD_ATTEMPTS == 3
    assert "HTTP 503" in message and "after 3 attempts" in message and "nothing was written" in message
    assert f"{update.REDIST_URL_PREFIX}/cuda/redist/redistrib_12.8.2.json" in message
    assert not m.user_directory().exists()


def test_update_from_a_missing_local_file_is_not_retried(tmp_path, monkeypatch):
    # A local file that is not there stays so: no retries (1 s + 2 s of back-off before).
    sleeps = []
    monkeypatch.setattr("time.sleep", sleeps.append)
    with pytest.raises(ManifestError) as info:
        m.update_manifest("cuda", "12.8.2", source=str(tmp_path / "no-mirror"), target=tmp_path / "manifests")
    message = str(info.value)
    assert sleeps == [] and "attempts" not in message and "No such file" in message and "nothing was written" in message
    assert not (tmp_path / "manifests").exists()


def test_update_404_is_not_retried(server):
    server.default = (404, b"not found")
    with pytest.raises(ManifestError) as info:
        m.update_manifest("cuda", "99.0.0")
    message = str(info.value)
    assert len(server.hits) == 1
    assert "HTTP 404" in message and "redistrib_99.0.0.json" in message and "\n" not in message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"cuda_nvcc": {"name": "x", "version": "1", "linux-x86_64": {"relative', r"not valid JSON \(truncated\?\)"),
        (b"<html>mirror error page</html>", r"not valid JSON"),
        (b'{"release_label": "12.8.2"}', r"holds no releases"),
        (b'{"release_label": "12.8.2", "release_product": "cudnn", "x": {"version": "1"}}', r"release_product: 'cudnn' disagrees"),
    ],
)
def test_update_refuses_invalid_content(server, body, expected):
    server.default = (200, body)
    with pytest.raises(ManifestError, match=r"redistrib_12\.8\.2\.json: " + expected):
        m.update_manifest("cuda", "12.8.2")
    assert not m.user_directory().exists()


def test_update_refuses_a_mislabelled_manifest(server):
    """The 12.8.2 file served under the 12.9.1 name: the label names the field, nothing is written."""
    write_manifest(m.user_directory(), "cuda", "12.9.1", b"previous")
    with pytest.raises(ManifestError) as info:
        m.update_manifest("cuda", "12.9.1")
    message = str(info.value)
    assert message.startswith(f"{update.REDIST_URL_PREFIX}/cuda/redist/redistrib_12.9.1.json: release_label: ")
    assert "'12.8.2' disagrees with the requested version '12.9.1'" in message
    assert user_file("cuda", "12.9.1").read_bytes() == b"previous"


def test_update_from_a_mirror_a_url_and_a_local_file(server, tmp_path):
    mirror = f"http://127.0.0.1:{server.server_address[1]}/mirror/"
    server.default = (200, (MANIFESTS / "cusparselt/redistrib_0.8.1.json").read_bytes())
    result = m.update_manifest("cusparselt", "0.8.1", source=mirror)
    assert server.hits == ["/mirror/cusparselt/redist/redistrib_0.8.1.json"]
    assert result.used_by == (m.SetUse("cudaPackages_12_9", None),)
    server.default = (200, (MANIFESTS / "cusparselt/redistrib_0.7.1.json").read_bytes())
    m.update_manifest("cusparselt", "0.7.1", source=mirror + "any/name.json")
    assert server.hits[-1] == "/mirror/any/name.json"

    local = tmp_path / "redistrib_0.6.3.json"
    local.write_bytes((MANIFESTS / "cusparselt/redistrib_0.6.3.json").read_bytes())
    hits = len(server.hits)
    result = m.update_manifest("cusparselt", "0.6.3", source=str(local), target=tmp_path / "out")
    assert len(server.hits) == hits and result.url == local.as_uri()
    assert (tmp_path / "out/cusparselt/redistrib_0.6.3.json").read_bytes() == local.read_bytes()


def test_update_from_a_manifest_directory(tmp_path):
    """--from DIR also takes a manifest directory (<dir>/<product>/redistrib_V.json), e.g. another checkout's."""
    result = m.update_manifest("tensorrt", "10.16.1", source=str(MANIFESTS))
    assert result.url == (MANIFESTS / "tensorrt" / "redistrib_10.16.1.json").as_uri()
    assert result.path.read_bytes() == (MANIFESTS / "tensorrt" / "redistrib_10.16.1.json").read_bytes()
    assert result.used_by and all(u.set_name.startswith("cudaPackages_") for u in result.used_by)


def test_tensorrt_needs_from(server):
    with pytest.raises(ManifestError, match="no NVIDIA-published manifest.*--from URL"):
        m.update_manifest("tensorrt", "10.7.0")
    assert server.hits == []


def test_connection_refused_is_reported(monkeypatch):
    import socket

    with socket.socket() as sock:  # find a port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(update, "REDIST_URL_PREFIX", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(update, "_DOWNLOAD_BACKOFF_S", 0.0)
    with pytest.raises(ManifestError, match=rf"127\.0\.0\.1:{port}/cudnn/redist/redistrib_9\.13\.0\.json.*--from"):
        m.update_manifest("cudnn", "9.13.0")


def test_a_crash_between_file_and_digest_leaves_a_loadable_file(server, monkeypatch):
    write_manifest(m.user_directory(), "cuda", "12.8.2", "{}")
    (m.user_directory() / "cuda" / "redistrib_12.8.2.json.sha256").write_text(hashlib.sha256(b"{}").hexdigest() + "\n")
    real = update._write_atomically

    def fail_on_digest(path, data):
        if path.name.endswith(".sha256"):
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(update, "_write_atomically", fail_on_digest)
    with pytest.raises(ManifestError, match="cannot write .*No space left on device"):
        m.update_manifest("cuda", "12.8.2")
    locate._PARSED.clear()
    assert m.load_manifest("cuda", "12.8.2").releases["cuda_nvcc"].version == "12.8.93"  # no stale digest


def test_cli_update_says_which_sets_select_it(server, capsys):
    from cudapkgs.cli import main

    assert main(["manifests", "update", "cuda", "12.8.2"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {user_file('cuda', '12.8.2')}" in out
    assert "selected by cudaPackages_12_8" in out and "identical to the shipped copy" in out

    server.default = (200, (MANIFESTS / "cudnn/redistrib_9.27.0.json").read_bytes())
    assert main(["manifests", "update", "cudnn", "9.27.0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["selectedBy"] == [] and data["status"] == "written" and data["releases"] == 3
    assert main(["manifests", "update", "cudnn", "9.27.0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("already up to date:")
    assert "no package set selects cudnn 9.27.0 (the sets use cudnn 9.13.0, 9.22.0)" in out

    server.default = (404, b"")
    assert main(["manifests", "update", "cuda", "12.0.0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cudapkgs: error: cannot download the cuda 12.0.0 manifest") and err.count("\n") == 1


def test_cli_list_shows_origin_and_sets(capsys, monkeypatch):
    from cudapkgs.cli import main

    monkeypatch.delenv("CUDAPKGS_MANIFESTS", raising=False)
    write_manifest(m.user_directory(), "cusparselt", "0.9.0", "{}")
    assert main(["manifests", "list", "cusparselt", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["version"]: r for r in data["manifests"]}
    assert list(rows) == ["0.6.3", "0.7.1", "0.8.1", "0.9.0", "0.10.0"]
    assert rows["0.9.0"]["from"] == "user" and rows["0.7.1"]["from"] == "vendored"
    assert rows["0.7.1"]["sets"] == ["cudaPackages_12_8"]
    assert rows["0.10.0"]["sets"] == [f"cudaPackages_13_{i}" for i in range(5)]
    assert main(["manifests", "list"]) == 0
    out = capsys.readouterr().out
    assert "cusparselt  0.10.0   vendored  13.0-13.4" in out
    assert "12.6-12.9 (when jetson); 13.0-13.4 (when preThorJetson)" in out



def test_module_import_is_light():
    code = "import sys, cudapkgs.manifests; print(sorted(n for n in ('urllib.request', 'http.client', 'ssl') if n in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_evaluation_does_not_load_the_update_code(manifests_dir):
    """`cudapkgs.manifests.update` (downloading, writing) is loaded on first use of one of its
    names: an evaluation, which reads manifests, never imports it; the names still work."""
    code = ("import sys; from cudapkgs import cli; cli.main(['eval', 'cudaPackages.cudaMajorMinorVersion']); "
            "print('cudapkgs.manifests.update' in sys.modules); "
            "import cudapkgs.manifests as m; from cudapkgs.manifests import update_manifest; "
            "print('cudapkgs.manifests.update' in sys.modules, update_manifest is m.update.update_manifest, "
            "m.manifest_url('cuda', '12.8.2') == m.REDIST_URL_PREFIX + '/cuda/redist/redistrib_12.8.2.json')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ['"12.9"', "False", "True True True"]
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        m.no_such_name  # noqa: B018


def test_a_manifest_path_is_resolved_once_per_process(monkeypatch):
    """The parse memo's key (the resolved path) is worked out once per path given: a cold `list
    --all` asked it 75 times, each `Path.resolve` an lstat per component (docs/bench-speed.md)."""
    monkeypatch.setattr(locate, "_PARSED", {})
    monkeypatch.setattr(locate, "_RESOLVED", {}, raising=False)
    calls = []
    real = Path.resolve

    def counting(self, *args, **kwargs):
        calls.append(str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "resolve", counting)
    first = m.load_manifest("cuda", "12.8.2")
    for _ in range(3):
        assert m.load_manifest("cuda", "12.8.2") is first
    assert len(calls) == len(set(calls)), calls
