"""CDI names: kinds (`vendor/class`), device names and fully qualified names."""

from __future__ import annotations

import re

_VENDOR_OR_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")

DEFAULT_KIND = "nvidia.com/gpu"


def vendor_error(vendor: str) -> str | None:
    """Why `vendor` is not a valid CDI vendor, or None."""
    if not vendor:
        return "the vendor is empty"
    if not _VENDOR_OR_CLASS.fullmatch(vendor):
        return f"invalid vendor {vendor!r}: it must start with a letter, end with a letter or digit, and hold only letters, digits, '_', '.' and '-'"
    return None


def class_error(klass: str) -> str | None:
    """Why `klass` is not a valid CDI class, or None."""
    if not klass:
        return "the class is empty"
    if not _VENDOR_OR_CLASS.fullmatch(klass):
        return f"invalid class {klass!r}: it must start with a letter, end with a letter or digit, and hold only letters, digits, '_', '.' and '-'"
    return None


def kind_error(kind: str) -> str | None:
    """Why `kind` is not `vendor/class`, or None."""
    vendor, sep, klass = kind.partition("/")
    if not sep:
        return f"invalid kind {kind!r}: it must be vendor/class, like nvidia.com/gpu"
    return vendor_error(vendor) or class_error(klass)


def device_name_error(name: str) -> str | None:
    """Why `name` is not a valid CDI device name, or None."""
    if not name:
        return "the device name is empty"
    if not _DEVICE.fullmatch(name):
        return f"invalid device name {name!r}: it must start and end with a letter or digit, and hold only letters, digits, '_', '.', ':' and '-'"
    return None


def qualify(name: str, default_kind: str = DEFAULT_KIND) -> str:
    """`0` -> `nvidia.com/gpu=0`; a qualified name is checked and kept."""
    kind, sep, device = name.rpartition("=")
    if not sep:
        kind, device = default_kind, name
    error = kind_error(kind) or device_name_error(device)
    if error:
        raise ValueError(error)
    return f"{kind}={device}"
