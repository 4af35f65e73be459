"""`cdi list`: the devices a container runtime would see in its CDI spec directories.

Runtimes read `*.json` and `*.yaml` files (not `.yml`) of each directory; a
later directory overrides an earlier one, while a name that two specs of the
same directory define is a conflict that leaves the device unusable.  Names
sort byte-wise, as Go sorts strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .validate import load, validate

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


@dataclass(frozen=True)
class Entry:
    """A fully qualified device name and the spec file that defines it."""

    name: str
    spec: str


@dataclass
class Listing:
    """Usable devices, unusable (conflicting) ones, and specs that could not be loaded."""

    devices: list[Entry] = field(default_factory=list)
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "devices": [{"name": e.name, "spec": e.spec} for e in self.devices],
            "unusable": [{"name": n, "specs": s} for n, s in sorted(self.conflicts.items())],
            "invalid_specs": [{"spec": s, "error": e} for s, e in sorted(self.invalid.items())],
        }


def spec_files(directory: Path) -> list[Path]:
    """The spec files of one directory that runtimes read, in name order."""
    try:
        return sorted(p for p in directory.iterdir() if p.suffix in (".json", ".yaml") and p.is_file())
    except OSError:
        return []


def scan(spec_dirs: tuple[str, ...] | list[str] = DEFAULT_SPEC_DIRS) -> Listing:
    """Resolve every spec of `spec_dirs` (lowest priority first) into qualified device names."""
    listing = Listing()
    winners: dict[str, str] = {}
    conflicted: dict[str, list[str]] = {}
    for directory in spec_dirs:
        in_dir: dict[str, list[str]] = {}
        for path in spec_files(Path(directory)):
            doc, problems = load(path)
            problems = problems or validate(doc)  # schema and loader: what runtimes refuse
            if problems:
                listing.invalid[str(path)] = str(problems[0])
                continue
            for device in doc["devices"]:
                in_dir.setdefault(f"{doc['kind']}={device['name']}", []).append(str(path))
        for name, specs in in_dir.items():
            if len(specs) > 1:
                conflicted[name] = specs
            else:
                winners[name] = specs[0]
    # As in the CDI Go cache, a conflict anywhere makes the name unusable, even when
    # a higher-priority directory defines it once.
    listing.devices = [Entry(n, winners[n]) for n in sorted(winners, key=str.encode) if n not in conflicted]
    listing.conflicts = conflicted
    return listing
