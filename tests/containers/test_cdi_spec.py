"""The spec model: nvidia-ctk's ordering, the minimum cdiVersion, the encodings."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs.containers.spec import (
    ContainerEdits,
    Device,
    DeviceNode,
    Mount,
    assemble,
    minimum_version,
    sort_edits,
    to_json,
    to_yaml,
)


def _nodes(*paths: str) -> list[DeviceNode]:
    return [DeviceNode(p) for p in paths]


def test_device_nodes_sort_by_depth_then_path():
    edits = sort_edits(ContainerEdits(device_nodes=_nodes("/dev/dri/renderD128", "/dev/nvidiactl", "/dev/dri/card1", "/dev/nvidia-uvm", "/dev/nvidia-modeset")))
    assert [n.path for n in edits.device_nodes] == ["/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidiactl", "/dev/dri/card1", "/dev/dri/renderD128"]


def test_mounts_sort_by_container_path_depth_and_dedupe():
    a = Mount("/h/usr/lib/x/libcuda.so.1", "/usr/lib/x/libcuda.so.1")
    b = Mount("/h/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi")
    c = Mount("/h/usr/lib/x/vdpau/libvdpau_nvidia.so.1", "/usr/lib/x/vdpau/libvdpau_nvidia.so.1")
    edits = sort_edits(ContainerEdits(mounts=[c, a, b, a]))
    assert edits.mounts == [b, a, c]


def test_env_and_hooks_keep_discovery_order():
    edits = sort_edits(ContainerEdits(env=["B=1", "A=1", "B=1"]))
    assert edits.env == ["B=1", "A=1"]


def test_devices_sort_bytewise_and_all_is_the_union():
    devices = [Device(name, ContainerEdits(device_nodes=_nodes(f"/dev/nvidia{i}"))) for i, name in enumerate(["2", "10", "GPU-b", "gpu0"])]
    spec = assemble("nvidia.com/gpu", devices, ContainerEdits(env=["X=1"]))
    assert [d.name for d in spec.devices] == ["10", "2", "GPU-b", "all", "gpu0"]
    everything = next(d for d in spec.devices if d.name == "all")
    assert [n.path for n in everything.edits.device_nodes] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]


def test_common_entities_are_removed_from_devices_unless_that_empties_them():
    shared = DeviceNode("/dev/nvidiactl")
    devices = [Device("0", ContainerEdits(device_nodes=[DeviceNode("/dev/nvidia0"), shared])), Device("1", ContainerEdits(device_nodes=[shared]))]
    spec = assemble("nvidia.com/gpu", devices, ContainerEdits(device_nodes=[shared]), all_device=False)
    assert spec.devices[0].edits.device_nodes == [DeviceNode("/dev/nvidia0")]
    assert spec.devices[1].edits.device_nodes == [shared]


def test_no_all_device_and_an_existing_all_is_kept():
    devices = [Device("all", ContainerEdits(device_nodes=_nodes("/dev/x")))]
    assert [d.name for d in assemble("a.com/b", devices, ContainerEdits()).devices] == ["all"]
    devices = [Device("0", ContainerEdits(device_nodes=_nodes("/dev/x")))]
    assert [d.name for d in assemble("a.com/b", devices, ContainerEdits(), all_device=False).devices] == ["0"]


def _doc(**extra) -> dict:
    doc = {"kind": "vendor.com/device", "devices": [{"name": "dev", "containerEdits": {"env": ["A=1"]}}], "containerEdits": {}}
    doc.update(extra)
    return doc


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: None, "0.3.0"),
        (lambda d: d["containerEdits"].update(mounts=[{"hostPath": "/a", "containerPath": "/a", "type": "bind"}]), "0.4.0"),
        (lambda d: d["devices"][0].update(name="0"), "0.5.0"),
        (lambda d: d["containerEdits"].update(deviceNodes=[{"path": "/dev/x", "hostPath": "/h/dev/x"}]), "0.5.0"),
        (lambda d: d.update(annotations={"a": "b"}), "0.6.0"),
        (lambda d: d["devices"][0].update(annotations={"a": "b"}), "0.6.0"),
        (lambda d: d.update(kind="vendor.com/dev.ice"), "0.6.0"),
        (lambda d: d["containerEdits"].update(additionalGids=[44]), "0.7.0"),
        (lambda d: d["containerEdits"].update(intelRdt={"closID": "x"}), "0.7.0"),
        (lambda d: d["containerEdits"].update(netDevices=[{"hostInterfaceName": "eth0", "name": "eth1"}]), "1.1.0"),
        (lambda d: d["devices"][0]["containerEdits"].update(intelRdt={"enableMonitoring": True}), "1.1.0"),
    ],
)
def test_minimum_version(change, expected):
    doc = _doc()
    change(doc)
    assert minimum_version(doc) == expected


def test_json_is_compact_go_style():
    text = to_json({"cdiVersion": "0.3.0", "kind": "a.com/b", "x": "<&>"})
    assert text == '{"cdiVersion":"0.3.0","kind":"a.com/b","x":"\\u003c\\u0026\\u003e"}'
    assert json.loads(text)["x"] == "<&>"


def test_yaml_starts_with_document_marker_and_keeps_key_order():
    doc = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": {"env": ["A=1"]}}]}
    text = to_yaml(doc)
    assert text.startswith("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    assert yaml.safe_load(text) == doc  # "0" stays a string


@given(st.lists(st.text(alphabet="abc/.-_0123456789", min_size=1, max_size=12), max_size=12))
def test_sorting_is_idempotent_and_keeps_every_distinct_node(paths):
    once = sort_edits(ContainerEdits(device_nodes=_nodes(*paths)))
    assert sort_edits(once) == once
    assert {n.path for n in once.device_nodes} == set(paths)
    depths = [n.path.count("/") for n in once.device_nodes]
    assert depths == sorted(depths)
