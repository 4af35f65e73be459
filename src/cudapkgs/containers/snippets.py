"""Ready-to-paste ways of asking Docker, Podman and docker-compose for CDI devices."""

from __future__ import annotations

from .errors import CdiError
from .names import qualify

ENGINES = ("docker", "podman", "compose", "docker-daemon")
DOCKER_NOTE = 'Docker 25-27 needs "features": {"cdi": true} in /etc/docker/daemon.json (on by default since Docker 28); `cudapkgs cdi snippet docker-daemon` prints it.'


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


def snippet(engine: str, devices: list[str] | None, service: str | None = None) -> str:
    """The snippet for `engine` (docker, podman, compose or docker-daemon)."""
    if engine == "docker-daemon":
        return docker_daemon()
    if engine == "compose":
        return compose(devices, service)
    if engine in ("docker", "podman"):
        return run_flags(devices) + "\n"
    raise CdiError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
