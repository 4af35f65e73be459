"""The CDI spec data model, nvidia-ctk's ordering rules and the spec encodings.

Objects turn into plain dicts whose keys follow the Go structs of
`specs-go` (the order `json.Marshal` writes them in), leaving out empty
optional fields as Go's `omitempty` does.
"""

from __future__ import annotations


from ..lib.records import FrozenRecord, Record

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

#: Every released CDI version, oldest first.
KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
#: The oldest version a computed minimum ever returns (as in specs-go).
EARLIEST_VERSION = "0.3.0"

MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_MOUNT_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")


class DeviceNode(FrozenRecord):
    """A device node to create in the container (`path`) from `host_path`."""

    __slots__ = ("path", "host_path", "type", "major", "minor", "file_mode", "permissions", "uid", "gid")
    path: str
    host_path: str
    type: str
    major: int | None
    minor: int | None
    file_mode: int | None
    permissions: str
    uid: int | None
    gid: int | None

    def __init__(
        self,
        path: str,
        host_path: str = "",
        type: str = "",  # noqa: A002 - the CDI field's name
        major: int | None = None,
        minor: int | None = None,
        file_mode: int | None = None,
        permissions: str = "",
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        self._init(path, host_path, type, major, minor, file_mode, permissions, uid, gid)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.host_path:
            out["hostPath"] = self.host_path
        if self.type:
            out["type"] = self.type
        for key, value in (("major", self.major), ("minor", self.minor), ("fileMode", self.file_mode)):
            if value:
                out[key] = value
        if self.permissions:
            out["permissions"] = self.permissions
        if self.uid is not None:
            out["uid"] = self.uid
        if self.gid is not None:
            out["gid"] = self.gid
        return out


class Mount(FrozenRecord):
    """A bind mount of `host_path` at `container_path`."""

    __slots__ = ("host_path", "container_path", "options", "type")
    host_path: str
    container_path: str
    options: tuple[str, ...]
    type: str

    def __init__(self, host_path: str, container_path: str, options: tuple[str, ...] = MOUNT_OPTIONS, type: str = "") -> None:  # noqa: A002
        self._init(host_path, container_path, options, type)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        if self.type:
            out["type"] = self.type
        return out


class Hook(FrozenRecord):
    """An OCI hook (always `createContainer` for NVIDIA specs)."""

    __slots__ = ("hook_name", "path", "args", "env", "timeout")
    hook_name: str
    path: str
    args: tuple[str, ...]
    env: tuple[str, ...]
    timeout: int | None

    def __init__(self, hook_name: str, path: str, args: tuple[str, ...] = (), env: tuple[str, ...] = (), timeout: int | None = None) -> None:
        self._init(hook_name, path, args, env, timeout)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out


class ContainerEdits(Record):
    """What requesting a device (or any device of a spec) changes in a container.

    Each field defaults to a new empty list.
    """

    __slots__ = ("env", "device_nodes", "hooks", "mounts", "additional_gids")

    def __init__(
        self,
        env: list[str] | None = None,
        device_nodes: list[DeviceNode] | None = None,
        hooks: list[Hook] | None = None,
        mounts: list[Mount] | None = None,
        additional_gids: list[int] | None = None,
    ) -> None:
        self.env: list[str] = [] if env is None else env
        self.device_nodes: list[DeviceNode] = [] if device_nodes is None else device_nodes
        self.hooks: list[Hook] = [] if hooks is None else hooks
        self.mounts: list[Mount] = [] if mounts is None else mounts
        self.additional_gids: list[int] = [] if additional_gids is None else additional_gids

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.hooks or self.mounts or self.additional_gids)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [n.to_dict() for n in self.device_nodes]
        if self.hooks:
            out["hooks"] = [h.to_dict() for h in self.hooks]
        if self.mounts:
            out["mounts"] = [m.to_dict() for m in self.mounts]
        if self.additional_gids:
            out["additionalGids"] = list(self.additional_gids)
        return out

    def copy(self) -> ContainerEdits:
        """A copy with its own lists (the items are immutable and shared)."""
        return ContainerEdits(
            env=list(self.env),
            device_nodes=list(self.device_nodes),
            hooks=list(self.hooks),
            mounts=list(self.mounts),
            additional_gids=list(self.additional_gids),
        )


class Device(Record):
    """A named device of a spec (`nvidia.com/gpu=<name>`)."""

    __slots__ = ("name", "edits")

    def __init__(self, name: str, edits: ContainerEdits) -> None:
        self.name = name
        self.edits = edits

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "containerEdits": self.edits.to_dict()}


class Spec(Record):
    """A CDI spec: a kind (`vendor/class`), its devices and the shared edits (default: none)."""

    __slots__ = ("kind", "devices", "edits", "cdi_version")

    def __init__(self, kind: str, devices: list[Device], edits: ContainerEdits | None = None, cdi_version: str = "") -> None:
        self.kind = kind
        self.devices = devices
        self.edits = ContainerEdits() if edits is None else edits
        self.cdi_version = cdi_version

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready dict, `cdiVersion` defaulting to the minimum required."""
        out: dict[str, Any] = {
            "cdiVersion": self.cdi_version or minimum_version_of(self),
            "kind": self.kind,
            "devices": [d.to_dict() for d in self.devices],
        }
        # Go never omits a struct; nvidia-ctk specs always have common edits anyway.
        out["containerEdits"] = self.edits.to_dict()
        return out


# -- ordering and simplification (nvidia-ctk's transform package) -----------------------------


def _depth_key(path: str) -> tuple[int, str]:
    return (path.count("/"), path)


def dedupe(items: Iterable[Any]) -> list[Any]:
    """Keep the first of equal items, in order."""
    seen: set[Any] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def sort_edits(edits: ContainerEdits) -> ContainerEdits:
    """Dedupe everything; sort nodes and mounts by path depth, then path (nvidia-ctk's sorter).

    Env entries and hooks keep their discovery order: the hooks' order matters.
    """
    return ContainerEdits(
        env=dedupe(edits.env),
        device_nodes=sorted(dedupe(edits.device_nodes), key=lambda n: _depth_key(n.path)),
        hooks=dedupe(edits.hooks),
        mounts=sorted(dedupe(edits.mounts), key=lambda m: _depth_key(m.container_path)),
        additional_gids=sorted(set(edits.additional_gids)),
    )


def merge_edits(parts: Iterable[ContainerEdits]) -> ContainerEdits:
    """Union of several edits, deduplicated and sorted."""
    merged = ContainerEdits()
    for part in parts:
        merged.env += part.env
        merged.device_nodes += part.device_nodes
        merged.hooks += part.hooks
        merged.mounts += part.mounts
        merged.additional_gids += part.additional_gids
    return sort_edits(merged)


def remove_common(device: ContainerEdits, common: ContainerEdits) -> ContainerEdits:
    """Drop from a device's edits what the common edits already carry, unless that empties it."""
    slimmer = ContainerEdits(
        env=[e for e in device.env if e not in common.env],
        device_nodes=[n for n in device.device_nodes if n not in common.device_nodes],
        hooks=[h for h in device.hooks if h not in common.hooks],
        mounts=[m for m in device.mounts if m not in common.mounts],
        additional_gids=[g for g in device.additional_gids if g not in common.additional_gids],
    )
    return device if slimmer.is_empty() else slimmer


def assemble(kind: str, devices: list[Device], common: ContainerEdits, all_device: bool = True) -> Spec:
    """Build a spec the way nvidia-ctk's builder does: simplify, sort by name, add `all`."""
    common = sort_edits(common)
    simplified = [Device(d.name, remove_common(sort_edits(d.edits), common)) for d in devices]
    if all_device and simplified and not any(d.name == "all" for d in simplified):
        simplified.append(Device("all", merge_edits(d.edits for d in simplified)))
    # Go compares strings byte-wise; so does Python on str for these ASCII names.
    simplified.sort(key=lambda d: d.name.encode())
    return Spec(kind=kind, devices=simplified, edits=common)


# -- minimum cdiVersion (specs-go's requiresV* checks) -----------------------------------------


def version_key(version: str) -> tuple[int, ...]:
    """`"v0.5.0"` -> `(0, 5, 0)`; raises ValueError when it is not a version."""
    return tuple(int(p) for p in version.lstrip("v").split("."))


def minimum_version(doc: dict[str, Any]) -> str:
    """The lowest CDI version whose fields cover what a spec dict uses."""
    return minimum_version_and_reason(doc)[0]


def minimum_version_and_reason(doc: dict[str, Any]) -> tuple[str, str]:
    """`minimum_version` and the feature that forces it ("" for the floor)."""
    devices = [d for d in doc.get("devices") or [] if isinstance(d, dict)] if isinstance(doc.get("devices"), list) else []
    edits = [doc.get("containerEdits")] + [d.get("containerEdits") for d in devices]
    edits = [e for e in edits if isinstance(e, dict)]

    def any_edit(pred) -> bool:
        return any(pred(e) for e in edits)

    def items(e: dict, key: str) -> list:
        value = e.get(key)
        return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []

    def rdt(e: dict) -> dict:
        return e["intelRdt"] if isinstance(e.get("intelRdt"), dict) else {}

    if any_edit(lambda e: e.get("netDevices")):
        return "1.1.0", "netDevices"
    if any_edit(lambda e: rdt(e).get("schemata") is not None or rdt(e).get("enableMonitoring")):
        return "1.1.0", "intelRdt.schemata or intelRdt.enableMonitoring"
    if any_edit(lambda e: e.get("intelRdt") is not None):
        return "0.7.0", "intelRdt"
    if any_edit(lambda e: e.get("additionalGids")):
        return "0.7.0", "additionalGids"
    kind = doc.get("kind")
    klass = kind.split("/", 1)[1] if isinstance(kind, str) and "/" in kind else ""
    if doc.get("annotations") or any(d.get("annotations") for d in devices):
        return "0.6.0", "annotations"
    if "." in klass:
        return "0.6.0", "a '.' in the kind's class"
    if any(isinstance(d.get("name"), str) and d["name"][:1].isdigit() for d in devices):
        return "0.5.0", "a device name starting with a digit"
    if any_edit(lambda e: any(n.get("hostPath") for n in items(e, "deviceNodes"))):
        return "0.5.0", "deviceNodes[].hostPath"
    if any_edit(lambda e: any(m.get("type") for m in items(e, "mounts"))):
        return "0.4.0", "mounts[].type"
    return EARLIEST_VERSION, ""


def minimum_version_of(spec: Spec) -> str:
    """`minimum_version` of a `Spec` object."""
    doc = {
        "kind": spec.kind,
        "devices": [d.to_dict() for d in spec.devices],
        "containerEdits": spec.edits.to_dict(),
    }
    return minimum_version(doc)


# -- encodings ---------------------------------------------------------------------------------


def to_json(doc: dict[str, Any], indent: int | None = None) -> str:
    """Compact JSON as Go's `json.Marshal` writes it (no trailing newline), or indented."""
    from ..errors import json_for_terminal

    # Go escapes U+2028 and U+2029; every other character that is not printable (C1 controls, bidi
    # overrides, DEL) is escaped too, so a spec shown in a terminal cannot act on it: the same JSON.
    if indent is None:
        text = json_for_terminal(doc, separators=(",", ":"))
    else:
        text = json_for_terminal(doc, indent=indent) + "\n"
    # Go escapes these inside strings; they can only occur inside strings here.
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    return text


def to_yaml(doc: dict[str, Any]) -> str:
    """YAML as nvidia-ctk writes it: a `---` line, 4-space indents, key order kept."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False):  # noqa: ARG002
            return super().increase_indent(flow, False)

    return "---\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, indent=4, default_flow_style=False, width=1 << 16)


def encode(doc: dict[str, Any], fmt: str) -> str:
    """Encode a spec dict as `json` or `yaml`."""
    if fmt == "json":
        return to_json(doc)
    if fmt == "yaml":
        return to_yaml(doc)
    raise ValueError(f"unknown format {fmt!r}")
