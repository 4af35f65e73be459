"""`cdi generate` on a hostile or broken driver host (issue 23, class 9).

Before: a FIFO planted as a GPU's /proc `information` hung `cdi generate`, a link to
/dev/zero filled memory; a UUID such as "GPU-a/b" became a device name that `cdi
validate` (and so every runtime) refuses, taking the whole spec with it; a MIG device
whose capability nodes were missing from the dev root was emitted with only its parent's
node, which a container cannot use (kubernetes-sigs/dra-driver-nvidia-gpu#787); a
mig-minors line "gpu1/gi1/access ²" was an internal error.
"""

from __future__ import annotations

import json
import os
import threading

import cdi_fakes as fakes
import pytest

from cudapkgs.containers import discovery, validate
from cudapkgs.containers.generate import generate


@pytest.fixture
def rich_machine(tmp_path) -> fakes.FakeMachine:
    return fakes.rich_machine(tmp_path)


def _generate(machine, nvml=None, **options):
    """(the spec as a dict, its warnings); the spec validates, whatever the host said."""
    result = generate(machine.options(**options), nvml=nvml)
    doc = json.loads(result.text("json"))
    assert validate.validate(doc) == [], "every generated spec must validate"
    return doc, result.warnings


def _in_thread(fn, timeout: float = 20.0):
    """Run `fn` in a thread; fail (not hang the suite) if it does not return."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as error:  # noqa: BLE001
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "it hung"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _information(machine, bus="0000:41:00.0"):
    return machine.procfs / "driver/nvidia/gpus" / bus / "information"


def test_a_fifo_as_a_gpus_information_is_skipped_not_waited_on(rich_machine):
    info = _information(rich_machine)
    info.unlink()
    os.mkfifo(info)
    gpus = _in_thread(lambda: discovery.gpus_from_procfs(rich_machine.procfs))
    assert [g.bus_id for g in gpus] == ["0000:81:00.0"]  # the other GPU is still found
    doc, _ = _in_thread(lambda: _generate(rich_machine, discovery="proc"))
    assert [d["name"] for d in doc["devices"]] == ["0", fakes.GPU1_UUID, "all"]


def test_a_link_to_dev_zero_or_a_huge_file_is_refused_by_size_or_kind(rich_machine):
    info = _information(rich_machine)
    info.unlink()
    os.symlink("/dev/zero", info)
    assert [g.bus_id for g in _in_thread(lambda: discovery.gpus_from_procfs(rich_machine.procfs))] == ["0000:81:00.0"]
    os.unlink(info)
    info.write_text("Device Minor: 0\nGPU UUID: GPU-x\n" + "x" * (1 << 20))
    assert [g.bus_id for g in discovery.gpus_from_procfs(rich_machine.procfs)] == ["0000:81:00.0"]
    version = rich_machine.procfs / "driver/nvidia/version"
    version.unlink()
    os.mkfifo(version)
    assert _in_thread(lambda: discovery.driver_version_from_procfs(rich_machine.procfs)) is None


@pytest.mark.parametrize("uuid", ["GPU-a/b", "../x", "GPU-\x00-1", "GPU- space", "-GPU", "GPU-é"])
def test_a_hostile_uuid_is_no_device_name(rich_machine, uuid):
    text = _information(rich_machine).read_text().replace(fakes.GPU0_UUID, uuid)
    _information(rich_machine).write_text(text)
    doc, warnings = _generate(rich_machine, discovery="proc")
    names = [d["name"] for d in doc["devices"]]
    assert uuid not in names and "0" in names  # still there by its index
    assert any(w.startswith("GPU 0: not named by its uuid (invalid device name") for w in warnings), warnings


def test_a_hostile_mig_uuid_keeps_the_mig_devices_index_name(rich_machine):
    nvml = fakes.two_gpu_nvml()
    nvml.gpus[1].migs[0].uuid = "MIG-../../etc"
    doc, warnings = _generate(rich_machine, nvml)
    names = [d["name"] for d in doc["devices"]]
    assert "MIG-../../etc" not in names and "1:0" in names and fakes.MIG_UUIDS[1] in names
    assert any(w.startswith("MIG device 1:0: not named by its uuid") for w in warnings)
    # Only the uuid strategy and every name invalid: the device is left out, saying so.
    doc, warnings = _generate(rich_machine, nvml, strategies=("uuid",))
    assert [d["name"] for d in doc["devices"]] == [fakes.GPU0_UUID, fakes.MIG_UUIDS[1], "all"]
    assert "MIG device 1:0 has no valid device name; left out" in warnings


def test_a_mig_device_whose_capability_nodes_are_missing_is_left_out_with_a_warning(rich_machine):
    # As in dra-driver-nvidia-gpu#787: the MIG device was created, its nvidia-cap nodes are not in
    # the dev root (yet). Emitted with only /dev/nvidia1 it would give a container an unusable GPU.
    (rich_machine.root / "dev/nvidia-caps/nvidia-cap22").unlink()
    doc, warnings = _generate(rich_machine, fakes.two_gpu_nvml())
    names = [d["name"] for d in doc["devices"]]
    assert "1:0" not in names and fakes.MIG_UUIDS[0] not in names
    assert "1:2" in names and fakes.MIG_UUIDS[1] in names  # its sibling is whole
    missing = [w for w in warnings if w.startswith("Could not locate")]
    assert len(missing) == 1 and f"{rich_machine.root}/dev/nvidia-caps/nvidia-cap22" in missing[0]
    assert "MIG device 1:0" in missing[0] and "left out" in missing[0]
    # A capability mig-minors does not list: the same.
    minors = rich_machine.procfs / "driver/nvidia-caps/mig-minors"
    minors.write_text(minors.read_text().replace("gpu1/gi2/ci0/access 31\n", ""))
    doc, warnings = _generate(rich_machine, fakes.two_gpu_nvml())
    assert [d["name"] for d in doc["devices"]] == ["0", fakes.GPU0_UUID, "all"]
    assert any("gpu1/gi2/ci0/access in /proc/driver/nvidia-caps/mig-minors" in w for w in warnings)


def test_malformed_mig_minors_and_bus_ids_are_ignored(rich_machine):
    minors = rich_machine.procfs / "driver/nvidia-caps/mig-minors"
    minors.write_text("gpu1/gi1/access ²\ngpu1/gi1/ci0/access ٢٢\n" + minors.read_text())  # int() refused '²'
    doc, _ = _generate(rich_machine, fakes.two_gpu_nvml())
    assert "1:0" in [d["name"] for d in doc["devices"]]
    # A bus location that is not a PCI address is never joined into a sysfs path.
    text = _information(rich_machine).read_text().replace("Bus Location: \t 0000:41:00.0", "Bus Location: \t ../../..")
    _information(rich_machine).write_text(text)
    doc, _ = _generate(rich_machine, discovery="proc")
    device = next(d for d in doc["devices"] if d["name"] == "0")
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == ["/dev/nvidia0"]


def test_nvml_bytes_that_are_not_utf8_and_a_missing_gpu_node(rich_machine):
    nvml = fakes.two_gpu_nvml()
    nvml.gpus[0].uuid = b"GPU-\xff\xfe"  # older pynvml hands out bytes: this was a UnicodeDecodeError
    doc, warnings = _generate(rich_machine, nvml)
    assert "0" in [d["name"] for d in doc["devices"]]
    assert any(w.startswith("GPU 0: not named by its uuid") for w in warnings)
    nvml = fakes.two_gpu_nvml()
    nvml.gpus[0].minor = 10**12  # no such node: left out, saying so (it was left out silently)
    doc, warnings = _generate(rich_machine, nvml)
    assert "0" not in [d["name"] for d in doc["devices"]]
    assert f"Could not locate {rich_machine.root}/dev/nvidia{10**12}: GPU 0 " in warnings[0]


def test_a_uuid_listed_twice_names_one_device_only(rich_machine):
    """A third /proc entry repeating GPU 0's information: both GPUs were named by the one UUID and
    the spec failed `cdi validate` ("defined twice"), so every runtime refused all of it."""
    again = rich_machine.procfs / "driver/nvidia/gpus/0000:42:00.0"
    again.mkdir()
    (again / "information").write_text(_information(rich_machine).read_text())
    doc, warnings = _generate(rich_machine, discovery="proc")
    names = [d["name"] for d in doc["devices"]]
    assert names.count(fakes.GPU0_UUID) == 1 and "1" in names  # the repeat keeps its index name
    assert f"GPU 1: not named {fakes.GPU0_UUID!r}, which an earlier device has (the host lists it twice)" in warnings


def test_a_uuid_that_reads_all_does_not_replace_the_all_device(rich_machine):
    """A GPU whose UUID is "all" was the spec's only "all" device: a container asking for every
    GPU got that one."""
    _information(rich_machine).write_text(_information(rich_machine).read_text().replace(fakes.GPU0_UUID, "all"))
    doc, warnings = _generate(rich_machine, discovery="proc")
    everything = [d for d in doc["devices"] if d["name"] == "all"]
    assert len(everything) == 1
    assert {n["path"] for n in everything[0]["containerEdits"]["deviceNodes"]} >= {"/dev/nvidia0", "/dev/nvidia1"}
    assert any(w.startswith("GPU 0: not named 'all'") for w in warnings), warnings
