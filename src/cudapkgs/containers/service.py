"""Keeping the spec current: a systemd oneshot unit, a path unit and a udev rule.

The service regenerates the spec at boot, like NixOS's
`nvidia-container-toolkit-cdi-generator.service`; like nvidia-ctk >= 1.18's
`nvidia-cdi-refresh.path` (which watches `/lib/modules/%v/modules.dep`), the path
unit reruns it when the driver's kernel modules or user-space libraries change, and
the udev rule when the `nvidia` module appears.  The spec is written atomically;
when no driver is left, the stale spec is removed (`--if-no-gpu remove`) so no
spec ever names a removed driver's files.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import CdiError
from .fsutil import atomic_write
from .. import programs

UNIT_NAME = "cudapkgs-cdi-generator.service"
# The name NixOS gives the same service (nixos/modules/services/hardware/nvidia-container-toolkit,
# and the seed guide's `systemctl status nvidia-container-toolkit-cdi-generator.service`): an Alias=,
# so that `systemctl enable` links it and that command finds this unit.
ALIAS_NAME = "nvidia-container-toolkit-cdi-generator.service"
PATH_UNIT_NAME = "cudapkgs-cdi-generator.path"
UDEV_RULE_NAME = "71-cudapkgs-cdi.rules"
DEFAULT_OUTPUT = "/run/cdi/nvidia-container-toolkit.json"
UNIT_DIR = "/etc/systemd/system"
UDEV_DIR = "/etc/udev/rules.d"


def cudapkgs_command() -> list[str]:
    """How to start cudapkgs from a unit: the installed script, or this Python with ``-I -m`` (isolated:
    ``-m`` alone puts the unit's working directory first on sys.path)."""
    exe = programs.which("cudapkgs")
    return [os.path.abspath(exe)] if exe else [sys.executable, "-I", "-m", "cudapkgs"]


def systemd_quote(arg: str) -> str:
    """Quote one ExecStart argument (systemd expands % and $, and splits on spaces)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class ServiceFiles:
    """The unit, path unit and rule texts and where they go."""

    unit_path: Path
    unit: str
    rule_path: Path
    rule: str
    path_unit_path: Path | None = None
    path_unit: str = ""

    def items(self) -> list[tuple[Path, str]]:
        out = [(self.unit_path, self.unit)]
        if self.path_unit_path is not None:
            out.append((self.path_unit_path, self.path_unit))
        return out + [(self.rule_path, self.rule)]


def watched_paths(library_dirs: list[str]) -> list[str]:
    """What the path unit watches: the kernel's module index (a driver install or update
    rewrites it, as nvidia-ctk's refresh unit watches) and the driver's library directories."""
    return ["/lib/modules/%v/modules.dep", "/lib/modules/%v/modules.dep.bin", *library_dirs]


def render(
    generate_args: list[str],
    output: str = DEFAULT_OUTPUT,
    unit_dir: str = UNIT_DIR,
    udev_dir: str = UDEV_DIR,
    library_dirs: list[str] | None = None,
) -> ServiceFiles:
    """The unit that runs `cudapkgs cdi generate --output OUTPUT <generate_args>`, its path unit and udev rule.

    The service is a oneshot without RemainAfterExit, so that every trigger (boot,
    path unit, udev) runs it again.  `library_dirs` are watched by the path unit too.
    """
    command = [*cudapkgs_command(), "cdi", "generate", "--format", "json", "--output", output, "--if-no-gpu", "remove", *generate_args]
    for value in [*command, *(library_dirs or [])]:
        # A line break would end the directive and start another one in the unit (or the rule).
        if re.search(r"[\x00-\x1f\x7f]", value):
            raise CdiError(f"{value!r} holds a control character (a line break?), which a systemd unit cannot carry")
    udevadm = programs.which("udevadm") or "/usr/bin/udevadm"
    systemctl = programs.which("systemctl") or "/usr/bin/systemctl"
    runtime_dir = os.path.dirname(output)
    lines = [
        "# Written by `cudapkgs cdi install-service`; regenerate it rather than editing it.",
        "[Unit]",
        "Description=Container Device Interface (CDI) spec for NVIDIA GPUs (cudapkgs)",
        "Before=docker.service podman.service containerd.service",
        "",
        "[Service]",
        "Type=oneshot",
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
        f"Alias={ALIAS_NAME}",
        "",
    ]
    rule = (
        "# Written by `cudapkgs cdi install-service`: regenerate the CDI spec when the NVIDIA driver appears.\n"
        f'KERNEL=="nvidia", RUN+="{systemctl} --no-block restart {UNIT_NAME}"\n'
    )
    path_lines = [
        "# Written by `cudapkgs cdi install-service`: rerun the CDI generator when the NVIDIA driver changes.",
        "[Unit]",
        "Description=Watch the NVIDIA driver for the CDI spec generator (cudapkgs)",
        "",
        "[Path]",
        # PathChanged= takes the rest of the line as the path, unquoted (systemd.path(5)); only
        # specifiers are expanded, so a % of the user's path is written %%.
        *[f"PathChanged={p}" for p in watched_paths([d.replace("%", "%%") for d in library_dirs or []])],
        f"Unit={UNIT_NAME}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return ServiceFiles(
        Path(unit_dir) / UNIT_NAME, "\n".join(lines), Path(udev_dir) / UDEV_RULE_NAME, rule, Path(unit_dir) / PATH_UNIT_NAME, "\n".join(path_lines)
    )


def install(files: ServiceFiles) -> list[str]:
    """Write the units and the rule atomically; returns their paths."""
    return [atomic_write(path, text) for path, text in files.items()]


def conflicting_specs(output: str) -> list[str]:
    """Other NVIDIA specs in the output's directory: same names in one directory make them unusable."""
    directory = Path(output).parent
    others = []
    for name in ("nvidia.yaml", "nvidia.json", "nvidia-container-toolkit.json", "nvidia-container-toolkit.yaml"):
        candidate = directory / name
        if candidate != Path(output) and candidate.exists():
            others.append(str(candidate))
    return others
