"""Generating specs on fake machines, compared with NVIDIA's golden spec field by field."""

from __future__ import annotations

import json
import os

import cdi_fakes as fakes
import pytest
from cdi_fakes import REFERENCE

from cudapkgs.containers import validate
from cudapkgs.containers.errors import CdiError, NoGpuError
from cudapkgs.containers.generate import generate


@pytest.fixture
def golden_machine(tmp_path) -> fakes.FakeMachine:
    return fakes.golden_machine(tmp_path)


@pytest.fixture
def rich_machine(tmp_path) -> fakes.FakeMachine:
    return fakes.rich_machine(tmp_path)


def _golden(machine: fakes.FakeMachine) -> dict:
    text = (REFERENCE / "nvidia-cdi-example-golden-1gpu.json").read_text()
    doc = json.loads(text.replace("/driver-root", str(machine.root)))
    doc["kind"] = "example.com/device"
    return doc


def _doc(machine, nvml=None, **options) -> dict:
    doc = json.loads(generate(machine.options(**options), nvml=nvml).text("json"))
    assert validate.validate(doc) == [], "every generated spec must validate"
    return doc


GOLDEN_OPTIONS = {"vendor": "example.com", "klass": "device", "strategies": ("index",)}


@pytest.mark.parametrize("source", ["nvml", "proc"])
@pytest.mark.parametrize(
    "field",
    ["cdiVersion", "kind", "devices", "containerEdits.env", "containerEdits.deviceNodes", "containerEdits.hooks", "containerEdits.mounts", "keys"],
)
def test_one_gpu_matches_nvidias_golden_spec(golden_machine, source, field):
    nvml = fakes.one_gpu_nvml() if source == "nvml" else None
    doc = _doc(golden_machine, nvml, discovery=source, **GOLDEN_OPTIONS)
    expected = _golden(golden_machine)
    if field == "keys":
        assert list(doc) == list(expected) and list(doc["containerEdits"]) == list(expected["containerEdits"])
        return
    get = lambda d: d[field] if "." not in field else d["containerEdits"][field.split(".")[1]]  # noqa: E731
    assert get(doc) == get(expected)


def test_one_gpu_golden_bytes_order(golden_machine):
    """The JSON text itself matches (Go's compact encoding of the same struct order)."""
    text = generate(golden_machine.options(**GOLDEN_OPTIONS), nvml=fakes.one_gpu_nvml()).text("json")
    assert text == json.dumps(_golden(golden_machine), separators=(",", ":"))


@pytest.mark.parametrize(
    ("disabled", "hook_names"),
    [
        ({"enable-cuda-compat"}, ["create-symlinks", "update-ldcache", "disable-device-node-modification", "update-application-profile"]),
        ({"update-ldcache", "enable-cuda-compat"}, ["create-symlinks", "disable-device-node-modification", "update-application-profile"]),
        ({"all"}, None),
    ],
)
def test_disabled_hooks(golden_machine, disabled, hook_names):
    doc = _doc(golden_machine, fakes.one_gpu_nvml(), disabled_hooks=frozenset(disabled), **GOLDEN_OPTIONS)
    if hook_names is None:
        assert "hooks" not in doc["containerEdits"]
    else:
        assert [h["args"][1] for h in doc["containerEdits"]["hooks"]] == hook_names


def test_unknown_hook_is_refused(golden_machine):
    with pytest.raises(CdiError, match="unknown hook 'update-ldcach'"):
        generate(golden_machine.options(disabled_hooks=frozenset({"update-ldcach"})), nvml=fakes.one_gpu_nvml())


def test_default_names_are_index_and_uuid(golden_machine):
    doc = _doc(golden_machine, fakes.one_gpu_nvml())
    assert [d["name"] for d in doc["devices"]] == ["0", fakes.GPU0_UUID, "all"]
    assert doc["kind"] == "nvidia.com/gpu"


# -- two GPUs, one in MIG mode ------------------------------------------------------------------


@pytest.fixture
def mig_doc(rich_machine) -> dict:
    return _doc(rich_machine, fakes.two_gpu_nvml())


def _device(doc: dict, name: str) -> dict:
    return next(d for d in doc["devices"] if d["name"] == name)


def _paths(edits: dict) -> list[str]:
    return [n["path"] for n in edits.get("deviceNodes", [])]


def test_mig_gpu_has_only_mig_devices(mig_doc):
    names = [d["name"] for d in mig_doc["devices"]]
    assert names == ["0", "1:0", "1:2", fakes.GPU0_UUID, *sorted(fakes.MIG_UUIDS), "all"]
    assert "1" not in names and fakes.GPU1_UUID not in names


def test_mig_devices_carry_parent_and_capability_nodes(mig_doc):
    assert _paths(_device(mig_doc, "1:0")["containerEdits"]) == ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"]
    assert _device(mig_doc, fakes.MIG_UUIDS[1])["containerEdits"] == _device(mig_doc, "1:2")["containerEdits"]
    assert _paths(_device(mig_doc, "1:2")["containerEdits"])[1:] == ["/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"]


def test_full_gpu_has_its_drm_nodes_and_by_path_links(mig_doc):
    edits = _device(mig_doc, "0")["containerEdits"]
    assert _paths(edits) == ["/dev/nvidia0", "/dev/dri/card1", "/dev/dri/renderD128"]
    assert edits["hooks"][0]["args"][1:] == [
        "create-symlinks",
        "--link",
        "../card1::/dev/dri/by-path/pci-0000:41:00.0-card",
        "--link",
        "../renderD128::/dev/dri/by-path/pci-0000:41:00.0-render",
    ]


def test_all_is_the_union(mig_doc):
    everything = _paths(_device(mig_doc, "all")["containerEdits"])
    for device in mig_doc["devices"]:
        assert set(_paths(device["containerEdits"])) <= set(everything)
    assert everything == sorted(everything, key=lambda p: (p.count("/"), p))


def test_type_index_names(rich_machine):
    doc = _doc(rich_machine, fakes.two_gpu_nvml(), strategies=("type-index",))
    assert [d["name"] for d in doc["devices"]] == ["all", "gpu0", "mig1:0", "mig1:2"]


def test_no_all_device(rich_machine):
    doc = _doc(rich_machine, fakes.two_gpu_nvml(), all_device=False)
    assert "all" not in [d["name"] for d in doc["devices"]]


# -- the driver's files -------------------------------------------------------------------------


def test_common_edits_of_a_fuller_host(mig_doc, rich_machine):
    root = str(rich_machine.root)
    common = mig_doc["containerEdits"]
    assert common["env"] == ["NVIDIA_CTK_LIBCUDA_DIR=/opt/nvidia/lib64", "NVIDIA_VISIBLE_DEVICES=void"]
    assert _paths(common) == ["/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"]
    mounts = {m["containerPath"]: m for m in common["mounts"]}
    v = rich_machine.version
    # Found through the ld cache only, version-matched: no older driver's or unrelated files.
    libs = sorted(p for p in mounts if p.startswith("/opt/nvidia/lib64/"))
    assert libs == sorted([f"/opt/nvidia/lib64/{n}.{v}" for n in fakes.RICH_LIBS] + [f"/opt/nvidia/lib64/vdpau/libvdpau_nvidia.so.{v}"])
    assert mounts[f"/opt/nvidia/lib64/libcuda.so.{v}"] == {
        "hostPath": f"{root}/opt/nvidia/lib64/libcuda.so.{v}",
        "containerPath": f"/opt/nvidia/lib64/libcuda.so.{v}",
        "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
    }
    # Executables only: the non-executable nvidia-imex is not mounted.
    assert sorted(p for p in mounts if p.startswith("/usr/bin/")) == [
        f"/usr/bin/{n}" for n in sorted(["nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-debugdump", "nvidia-persistenced", "nvidia-smi"])
    ]
    assert f"/lib/firmware/nvidia/{v}/gsp_ga10x.bin" in mounts and f"/lib/firmware/nvidia/{v}/gsp_tu10x.bin" in mounts
    for ipc in ("/run/nvidia-persistenced/socket", "/tmp/nvidia-mps"):
        assert mounts[ipc]["options"] == ["nosuid", "nodev", "rbind", "rprivate", "noexec"]
    depths = [m["containerPath"].count("/") for m in common["mounts"]]
    assert depths == sorted(depths)


def test_library_hooks(mig_doc, rich_machine):
    hooks = {h["args"][1]: h["args"][2:] for h in mig_doc["containerEdits"]["hooks"]}
    v = rich_machine.version
    links = hooks["create-symlinks"][1::2]
    assert links[0] == "libcuda.so.1::/opt/nvidia/lib64/libcuda.so"
    assert f"libGLX_nvidia.so.{v}::/opt/nvidia/lib64/libGLX_indirect.so.0" in links
    assert f"libnvidia-ml.so.{v}::/opt/nvidia/lib64/libnvidia-ml.so.1" in links
    assert len(links) == len(set(links))
    assert hooks["enable-cuda-compat"] == [f"--host-driver-version={v}"]
    assert hooks["update-ldcache"] == ["--folder", "/opt/nvidia/lib64", "--folder", "/opt/nvidia/lib64/vdpau"]


def test_library_search_path_replaces_the_default_search(rich_machine, tmp_path):
    other = tmp_path / "nix/store/abc-nvidia-x11/lib"
    fakes.touch(other / f"libcuda.so.{rich_machine.version}")
    doc = _doc(rich_machine, fakes.two_gpu_nvml(), library_search_paths=(str(other),), ldconfig_path="/nix/store/glibc/bin/ldconfig")
    libs = [m["hostPath"] for m in doc["containerEdits"]["mounts"] if "libcuda" in m["hostPath"]]
    assert libs == [str(other / f"libcuda.so.{rich_machine.version}")]
    ldcache_hook = next(h for h in doc["containerEdits"]["hooks"] if h["args"][1] == "update-ldcache")
    assert ldcache_hook["args"][2:4] == ["--ldconfig-path", "/nix/store/glibc/bin/ldconfig"]


def test_cudapkgs_is_the_default_hook_program(golden_machine):
    doc = _doc(golden_machine, fakes.one_gpu_nvml(), hook_path=None)
    hooks = doc["containerEdits"]["hooks"]
    for hook in hooks:
        assert os.path.isabs(hook["path"])
        assert hook["args"][hook["args"].index("cdi") : hook["args"].index("cdi") + 2] == ["cdi", "hook"]
    # cudapkgs implements every hook it emits; NVIDIA's application profile hook is NVIDIA's alone.
    assert [h["args"][h["args"].index("hook") + 1] for h in hooks] == [
        "create-symlinks",
        "enable-cuda-compat",
        "update-ldcache",
        "disable-device-node-modification",
    ]


def test_nvidia_ctk_as_hook_program(golden_machine):
    doc = _doc(golden_machine, fakes.one_gpu_nvml(), hook_path="/usr/bin/nvidia-ctk")
    assert doc["containerEdits"]["hooks"][1]["args"] == ["nvidia-ctk", "hook", "enable-cuda-compat", f"--host-driver-version={fakes.GOLDEN_VERSION}"]


def test_separate_dev_root(golden_machine, tmp_path):
    dev_root = tmp_path / "devroot"
    fakes.touch(dev_root / "dev/nvidia0")
    doc = _doc(golden_machine, fakes.one_gpu_nvml(), dev_root=str(dev_root))
    assert _device(doc, "0")["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0", "hostPath": f"{dev_root}/dev/nvidia0"}]
    assert "deviceNodes" not in doc["containerEdits"]  # /dev/nvidiactl is not under this dev root


def test_gpu_without_device_node_gets_no_entry(golden_machine):
    """A GPU whose /dev/nvidia<minor> is missing (driver root / here) is not offered."""
    from cudapkgs.containers.generate import Options, build_spec
    from cudapkgs.containers.discovery import Inventory, Gpu
    from cudapkgs.containers.driverfiles import DriverFiles

    options = Options(vendor="example.com", klass="device", strategies=("type-index",), hook_path="/usr/bin/nvidia-cdi-hook", sysfs=str(golden_machine.sysfs), procfs=str(golden_machine.procfs))
    inventory = Inventory("1.2.3", (Gpu(0, fakes.GPU0_UUID, 0, "0000:41:00.0"),), "test")
    spec = build_spec(options, inventory, DriverFiles("1.2.3")).to_dict()
    # /dev/nvidia0 does not exist on the test machine: the GPU has no device entry at all.
    assert spec["devices"] == []


def test_no_gpu_is_an_error(tmp_path):
    empty = fakes.FakeMachine(tmp_path, tmp_path / "proc", tmp_path / "sys", "0")
    with pytest.raises(NoGpuError, match="no NVIDIA GPU or driver was found"):
        generate(empty.options(discovery="proc"), nvml=None)


def test_driver_without_gpus_is_an_error(golden_machine):
    with pytest.raises(NoGpuError):
        generate(golden_machine.options(), nvml=fakes.FakeNvml([]))


def test_missing_libraries_give_a_warning(golden_machine):
    result = generate(golden_machine.options(), nvml=fakes.one_gpu_nvml(version="111.22.33"))
    assert any("no driver libraries of version 111.22.33" in w for w in result.warnings)
    assert validate.validate(result.spec.to_dict()) == []


@pytest.mark.parametrize("strategies", [("index",), ("uuid",), ("type-index",), ("index", "uuid", "type-index")])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_every_variant_validates(rich_machine, strategies, fmt):
    text = generate(rich_machine.options(strategies=strategies, hook_path=None), nvml=fakes.two_gpu_nvml()).text(fmt)
    doc, problems = validate.loads(text, yaml_first=fmt == "yaml")
    assert problems == [] and validate.validate(doc) == []
