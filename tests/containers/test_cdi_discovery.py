"""Finding GPUs and the driver: NVML (faked), /proc, nvidia-smi."""

from __future__ import annotations

import cdi_fakes as fakes
import pytest

from cudapkgs.containers import discovery
from cudapkgs.containers.discovery import Gpu, MigDevice


@pytest.mark.parametrize(
    ("nvml", "sysfs"),
    [("00000000:41:00.0", "0000:41:00.0"), ("00000000:0A:00.0", "0000:0a:00.0"), ("0000:81:00.1", "0000:81:00.1")],
)
def test_bus_ids_take_the_sysfs_form(nvml, sysfs):
    assert discovery.normalize_bus_id(nvml) == sysfs


def test_nvml_two_gpus_one_in_mig_mode():
    nvml = fakes.two_gpu_nvml()
    found = discovery.discover("nvml", nvml=nvml)
    assert found.source == "nvml" and found.driver_version == "570.153.02"
    plain, mig = found.gpus
    assert plain == Gpu(0, fakes.GPU0_UUID, 0, "0000:41:00.0", "NVIDIA A100-SXM4-40GB")
    assert mig.mig_enabled and mig.minor == 1 and mig.bus_id == "0000:81:00.0"
    # Empty MIG slots are skipped, the slot number is the MIG index.
    assert mig.migs == (MigDevice(0, fakes.MIG_UUIDS[0], 1, 0), MigDevice(2, fakes.MIG_UUIDS[1], 2, 0))
    assert nvml.calls == ["init", "shutdown"]


def test_auto_falls_back_to_procfs_when_nvml_cannot_start(golden_machine_factory):
    machine = golden_machine_factory()
    found = discovery.discover("auto", nvml=fakes.FakeNvml([], fail_init=True), procfs=machine.procfs, nvidia_smi="/nonexistent")
    assert found.source == "procfs"
    assert found.driver_version == fakes.GOLDEN_VERSION
    assert found.gpus == (Gpu(0, fakes.GPU0_UUID, 0, "0000:41:00.0", "NVIDIA A100-SXM4-40GB"),)


def test_nvml_mode_does_not_fall_back(golden_machine_factory):
    machine = golden_machine_factory()
    assert discovery.discover("nvml", nvml=fakes.FakeNvml([], fail_init=True), procfs=machine.procfs) is None


def test_nothing_found_is_none(tmp_path):
    assert discovery.discover("proc", procfs=tmp_path, nvidia_smi="/nonexistent") is None


@pytest.mark.parametrize(
    "line",
    [
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.153.02  Tue May 13 16:34:37 UTC 2025",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)",
    ],
)
def test_driver_version_from_proc(tmp_path, line):
    (tmp_path / "driver/nvidia").mkdir(parents=True)
    (tmp_path / "driver/nvidia/version").write_text(line + "\nGCC version: 12\n")
    assert discovery.driver_version_from_procfs(tmp_path) in ("570.153.02", "580.159.04")


def test_procfs_gpus_are_indexed_in_bus_order(tmp_path):
    machine = fakes.rich_machine(tmp_path)
    gpus = discovery.gpus_from_procfs(machine.procfs)
    assert [(g.index, g.bus_id, g.minor) for g in gpus] == [(0, "0000:41:00.0", 0), (1, "0000:81:00.0", 1)]


NVIDIA_SMI_Q = """
==============NVSMI LOG==============

Timestamp                                              : Sun Nov 29 15:30:58 2026
Driver Version                                         : 580.159.04
CUDA Version                                           : 13.0

Attached GPUs                                          : 2
GPU 00000000:06:00.0
    Product Name                                       : NVIDIA H200
    MIG Mode
        Current                                        : Disabled
    GPU UUID                                           : GPU-11111111-2222-3333-4444-555555555555
    Minor Number                                       : 3
GPU 00000000:07:00.0
    Product Name                                       : NVIDIA H200
    GPU UUID                                           : GPU-66666666-2222-3333-4444-555555555555
    Minor Number                                       : 1
"""


def test_nvidia_smi_query_output():
    version, gpus = discovery.parse_nvidia_smi_query(NVIDIA_SMI_Q)
    assert version == "580.159.04"
    assert [(g.index, g.bus_id, g.minor, g.uuid[:12]) for g in gpus] == [(0, "0000:06:00.0", 3, "GPU-11111111"), (1, "0000:07:00.0", 1, "GPU-66666666")]


def test_nvidia_smi_is_the_last_resort(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'X'\n" + NVIDIA_SMI_Q + "X\n")
    smi.chmod(0o755)
    found = discovery.discover("proc", procfs=tmp_path / "no-proc", nvidia_smi=str(smi))
    assert found.source == "nvidia-smi" and len(found.gpus) == 2


@pytest.fixture
def golden_machine_factory(tmp_path):
    return lambda: fakes.golden_machine(tmp_path)
