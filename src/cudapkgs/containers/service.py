"""Boot-time generation: a systemd oneshot unit and a udev rule, like NixOS's
`nvidia-container-toolkit-cdi-generator.service`."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from .fsutil import atomic_write

UNIT_NAME = "cudapkgs-cdi-generator.service"
UDEV_RULE_NAME = "71-cudapkgs-cdi.rules"
DEFAULT_OUTPUT = "/run/cdi/nvidia-container-toolkit.json"
UNIT_DIR = "/etc/systemd/system"
UDEV_DIR = "/etc/udev/rules.d"


def cudapkgs_command() -> list[str]:
    """How to start cudapkgs from a unit: the installed script, or this Python with -m."""
    exe = shutil.which("cudapkgs")
    return [os.path.abspath(exe)] if exe else [sys.executable, "-m", "cudapkgs"]


def systemd_quote(arg: str) -> str:
    """Quote one ExecStart argument (systemd expands % and $, and splits on spaces)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class ServiceFiles:
    """The unit and rule texts and where they go."""

    unit_path: Path
    unit: str
    rule_path: Path
    rule: str


def render(generate_args: list[str], output: str = DEFAULT_OUTPUT, unit_dir: str = UNIT_DIR, udev_dir: str = UDEV_DIR) -> ServiceFiles:
    """The unit that runs `cudapkgs cdi generate --output OUTPUT <generate_args>` and its udev rule."""
    command = [*cudapkgs_command(), "cdi", "generate", "--format", "json", "--output", output, *generate_args]
    udevadm = shutil.which("udevadm") or "/usr/bin/udevadm"
    systemctl = shutil.which("systemctl") or "/usr/bin/systemctl"
    runtime_dir = os.path.dirname(output)
    lines = [
        "# Written by `cudapkgs cdi install-service`; regenerate it rather than editing it.",
        "[Unit]",
        "Description=Container Device Interface (CDI) spec for NVIDIA GPUs (cudapkgs)",
        "Before=docker.service podman.service containerd.service",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=true",
    ]
    if runtime_dir.startswith("/run/") and runtime_dir.count("/") == 2:
        # Keep the directory across restarts so runtimes never see the spec vanish.
        lines += [f"RuntimeDirectory={runtime_dir[len('/run/'):]}", "RuntimeDirectoryPreserve=yes"]
    lines += [
        f"ExecStartPre=-{udevadm} settle --timeout=180",
        "ExecStart=" + " ".join(systemd_quote(a) for a in command),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    rule = (
        "# Written by `cudapkgs cdi install-service`: regenerate the CDI spec when the NVIDIA driver appears.\n"
        f'KERNEL=="nvidia", RUN+="{systemctl} --no-block restart {UNIT_NAME}"\n'
    )
    return ServiceFiles(Path(unit_dir) / UNIT_NAME, "\n".join(lines), Path(udev_dir) / UDEV_RULE_NAME, rule)


def install(files: ServiceFiles) -> list[Path]:
    """Write the unit and the rule atomically; returns their paths."""
    return [atomic_write(files.unit_path, files.unit), atomic_write(files.rule_path, files.rule)]


def conflicting_specs(output: str) -> list[str]:
    """Other NVIDIA specs in the output's directory: same names in one directory make them unusable."""
    directory = Path(output).parent
    others = []
    for name in ("nvidia.yaml", "nvidia.json", "nvidia-container-toolkit.json", "nvidia-container-toolkit.yaml"):
        candidate = directory / name
        if candidate != Path(output) and candidate.exists():
            others.append(str(candidate))
    return others
