"""Ready-to-paste ways of asking Docker, Podman and docker-compose for CDI devices."""

from __future__ import annotations

from .errors import CdiError
from .names import qualify

ENGINES = ("docker", "podman", "compose")
DOCKER_NOTE = 'Docker 25-27 needs "features": {"cdi": true} in /etc/docker/daemon.json (on by default since Docker 28).'


def qualified(devices: list[str] | None) -> list[str]:
    """Qualify device names (`0` -> `nvidia.com/gpu=0`); default `nvidia.com/gpu=all`."""
    try:
        return [qualify(d) for d in (devices or ["all"])]
    except ValueError as error:
        raise CdiError(str(error)) from None


def run_flags(devices: list[str] | None) -> str:
    """`--device nvidia.com/gpu=0 --device ...` for `docker run` and `podman run`."""
    return " ".join(f"--device {d}" for d in qualified(devices))


def compose(devices: list[str] | None, service: str | None = None) -> str:
    """The compose `deploy.resources.reservations.devices` block with `driver: cdi`."""
    lines = ["deploy:", "  resources:", "    reservations:", "      devices:", "        - driver: cdi", "          device_ids:"]
    lines += [f"            - {d}" for d in qualified(devices)]
    if service:
        lines = ["services:", f"  {service}:"] + ["    " + line for line in lines]
    return "\n".join(lines) + "\n"


def snippet(engine: str, devices: list[str] | None, service: str | None = None) -> str:
    """The snippet for `engine` (docker, podman or compose)."""
    if engine == "compose":
        return compose(devices, service)
    if engine in ("docker", "podman"):
        return run_flags(devices) + "\n"
    raise CdiError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
