"""Ready-to-paste ways of asking Docker, Podman and docker-compose for CDI devices."""

from __future__ import annotations

import re

from .errors import CdiError
from .names import DEFAULT_KIND, qualify

ENGINES = ("docker", "podman", "compose", "docker-daemon")
DOCKER_NOTE = 'Docker 25-27 needs "features": {"cdi": true} in /etc/docker/daemon.json (on by default since Docker 28); `cudapkgs cdi snippet docker-daemon` prints it.'


def qualified(devices: list[str] | None) -> list[str]:
    """Qualify device names (`0` -> `nvidia.com/gpu=0`); default `nvidia.com/gpu=all`."""
    try:
        return [qualify(d) for d in (devices or ["all"])]
    except ValueError as error:
        raise CdiError(str(error)) from None


# The names `cdi generate` gives NVIDIA GPUs and MIG devices (nvidia-ctk's naming strategies, pkg/nvcdi):
# all; index "0" / "0:1"; type-index "gpu0" / "mig0:1"; uuid "GPU-<hex and dashes>" / "MIG-<hex and dashes>".
_NVIDIA_GPU_NAME = re.compile(r"all|\d+|\d+:\d+|gpu\d+|mig\d+:\d+|(?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]*")
#: Kinds whose device names have a known syntax -> (pattern, what the names look like, for the message).
_KIND_SYNTAX = {
    DEFAULT_KIND: (_NVIDIA_GPU_NAME, "all, an index (0, 0:1), gpu0/mig0:1 or a UUID (GPU-..., MIG-...)"),
    "management.nvidia.com/gpu": (re.compile("all"), "all"),
}


def check_devices(devices: list[str], defined: list[str] | None) -> None:
    """CdiError unless each qualified name in `devices` is one a runtime can resolve.

    `defined` are the qualified names the spec directories define (`registry.scan`), or None
    when the snippet is for another machine. A kind some spec defines must hold the name; a kind
    no spec defines is checked against the names `cdi generate` gives it (nvidia.com/gpu:
    `_NVIDIA_GPU_NAME`; management.nvidia.com/gpu: all); other kinds are only checked for CDI syntax.
    """
    by_kind: dict[str, list[str]] = {}
    for name in defined or ():
        by_kind.setdefault(name.partition("=")[0], []).append(name)
    for device in devices:
        kind, _, short = device.partition("=")
        if kind in by_kind:
            if device not in by_kind[kind]:
                known = by_kind[kind]
                raise CdiError(
                    f"{device}: no CDI spec here defines it (defined: {', '.join(known[:6])}{', ...' if len(known) > 6 else ''}); "
                    "`cudapkgs cdi list` shows them, --no-check writes a snippet for another machine"
                )
        elif kind in _KIND_SYNTAX and not _KIND_SYNTAX[kind][0].fullmatch(short):
            raise CdiError(f"{device}: not a name `cdi generate` gives {kind} devices ({_KIND_SYNTAX[kind][1]})")


def run_flags(devices: list[str] | None) -> str:
    """`--device nvidia.com/gpu=0 --device ...` for `docker run` and `podman run`."""
    return " ".join(f"--device {d}" for d in qualified(devices))


def compose(devices: list[str] | None, service: str | None = None) -> str:
    """The compose `deploy.resources.reservations.devices` block with `driver: cdi`.

    `capabilities: [gpu]` is there because the Compose Specification's schema requires
    it on every device request (compose-spec schema/compose-spec.json, `devices.items.required`);
    Docker's `cdi` driver ignores it (an explicit driver skips capability matching).
    """
    lines = ["deploy:", "  resources:", "    reservations:", "      devices:", "        - driver: cdi", "          capabilities: [gpu]", "          device_ids:"]
    lines += [f"            - {d}" for d in qualified(devices)]
    if service:
        lines = ["services:", f"  {service}:"] + ["    " + line for line in lines]
    return "\n".join(lines) + "\n"


def docker_daemon(spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")) -> str:
    """The /etc/docker/daemon.json keys for CDI (Docker >= 25): `features.cdi` and `cdi-spec-dirs`."""
    import json

    return json.dumps({"features": {"cdi": True}, "cdi-spec-dirs": list(spec_dirs)}, indent=2) + "\n"


def snippet(engine: str, devices: list[str] | None, service: str | None = None, *,
            defined: list[str] | None = None, check: bool = True) -> str:
    """The snippet for `engine` (docker, podman, compose or docker-daemon).

    Unless `check` is False, the device names are checked by `check_devices` against `defined`
    (CdiError naming the first one that no runtime would resolve).
    """
    if check and engine != "docker-daemon":
        check_devices(qualified(devices), defined)
    if engine == "docker-daemon":
        return docker_daemon()
    if engine == "compose":
        return compose(devices, service)
    if engine in ("docker", "podman"):
        return run_flags(devices) + "\n"
    raise CdiError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
