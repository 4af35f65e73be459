"""Validating CDI specs: the published JSON schema plus the checks of the CDI Go loader.

The schema alone is loose (unknown keys pass, env entries are unchecked, no
device is fine); the loader that Docker, Podman and containerd use is not.
Every problem names the field it is about, as a JSONPath like
`$.devices[1].containerEdits.env[0]`.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import did_you_mean
from . import names
from .spec import KNOWN_VERSIONS, minimum_version_and_reason, version_key

SCHEMA_DIR = Path(__file__).parent / "schema"

SPEC_KEYS = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
DEVICE_KEYS = ("name", "annotations", "containerEdits")
EDITS_KEYS = ("env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids")
NODE_KEYS = ("path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid")
MOUNT_KEYS = ("hostPath", "containerPath", "options", "type")
HOOK_KEYS = ("hookName", "path", "args", "env", "timeout")
RDT_KEYS = ("closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring")
NETDEV_KEYS = ("hostInterfaceName", "name")
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
NODE_TYPES = ("", "b", "c", "u", "p")
MAX_ANNOTATIONS_SIZE = 256 * 1024
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec, and where."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# -- loading ------------------------------------------------------------------------------------


MAX_SPEC_BYTES = 16 * 1024 * 1024  # nvidia-ctk's specs are ~30 KiB
MAX_DEPTH = 32  # a CDI spec is at most 6 levels deep; refuse before any recursive code sees it


def read_spec_text(path: str | Path) -> str:
    """The text of a spec file: a regular file (a FIFO or device is refused at once), UTF-8, bounded.

    Raises OSError or UnicodeDecodeError, or ValueError for a non-regular or oversized file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = handle.read(MAX_SPEC_BYTES + 1)
    if len(data) > MAX_SPEC_BYTES:
        raise ValueError(f"larger than {MAX_SPEC_BYTES} bytes")
    return data.decode("utf-8")


def load(path: str | Path) -> tuple[Any, list[Problem]]:
    """Parse a spec file as JSON or YAML (by extension; JSON first when unsure)."""
    path = Path(path)
    try:
        text = read_spec_text(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, [Problem("$", f"cannot read {path}: {getattr(error, 'strerror', None) or error}")]
    return loads(text, yaml_first=path.suffix in (".yaml", ".yml"))


def nesting_depth(text: str) -> int:
    """An upper bound of the bracket nesting of JSON/flow-YAML text, without parsing it (linear).

    Brackets inside strings count too, so this only ever over-estimates.
    """
    depth = best = 0
    for char in text:
        if char in "[{":
            depth += 1
            best = max(best, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return best


MAX_NODES = 1_000_000  # YAML aliases can make a small file a huge tree ("billion laughs")


def _too_deep(value: Any) -> bool:
    """True when `value` nests deeper than MAX_DEPTH or holds more than MAX_NODES values."""
    stack = [(value, 1)]
    visited = 0
    while stack:
        item, depth = stack.pop()
        visited += 1
        if depth > MAX_DEPTH or visited > MAX_NODES:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def loads(text: str, yaml_first: bool = False) -> tuple[Any, list[Problem]]:
    """Parse spec text; YAML is a superset of JSON, so YAML is tried when JSON fails.

    Documents nested deeper than MAX_DEPTH are refused (before parsing when the
    brackets show it, after parsing for block YAML), never a RecursionError.
    """
    too_deep = [Problem("$", f"nested more than {MAX_DEPTH} levels deep (or more than {MAX_NODES} values): not a CDI spec")]
    if nesting_depth(text) > MAX_DEPTH:
        return None, too_deep
    if not yaml_first:
        try:
            doc = json.loads(text)
            return (None, too_deep) if _too_deep(doc) else (doc, [])
        except json.JSONDecodeError as error:
            json_problem = Problem("$", f"not valid JSON: line {error.lineno} column {error.colno}: {error.msg}")
            if text.lstrip().startswith(("{", "[")):
                return None, [json_problem]
        except RecursionError:
            return None, too_deep
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        return None, [Problem("$", f"not valid YAML: {where}{getattr(error, 'problem', None) or error}")]
    except RecursionError:
        return None, too_deep
    return (None, too_deep) if _too_deep(doc) else (doc, [])


# -- the JSON schema ----------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _schema_validator():
    from jsonschema import Draft7Validator
    from referencing import Registry
    from referencing.jsonschema import DRAFT7

    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    base = "https://cudapkgs.invalid/cdi/"  # never fetched: both documents are in the registry
    schema["$id"] = base + "schema.json"
    registry = Registry().with_resources(
        [(base + "schema.json", DRAFT7.create_resource(schema)), (base + "defs.json", DRAFT7.create_resource(defs))]
    )
    return Draft7Validator(schema, registry=registry)


def json_path(parts) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def schema_problems(doc: Any) -> list[Problem]:
    """Violations of the published CDI JSON schema."""
    errors = sorted(_schema_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    return [Problem(json_path(e.absolute_path), e.message) for e in errors]


# -- the loader's checks ------------------------------------------------------------------------


class _Checker:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def keys(self, obj: dict, allowed: tuple[str, ...], path: str) -> None:
        for key in obj:
            if key not in allowed:
                hint = did_you_mean(str(key), allowed)
                self.add(f"{path}.{key}", f"unknown field {key!r}{hint}; the CDI loader rejects unknown fields")

    def absolute(self, value: Any, path: str) -> None:
        if isinstance(value, str) and value and not value.startswith("/"):
            self.add(path, f"{value!r} is not an absolute path")

    def env(self, value: Any, path: str) -> None:
        if not isinstance(value, list):
            return
        for i, entry in enumerate(value):
            if not isinstance(entry, str):
                self.add(f"{path}[{i}]", f"an environment entry must be a string, not {json.dumps(entry)}")
            elif entry.find("=") < 1:
                self.add(f"{path}[{i}]", f"invalid environment entry {entry!r}: it must be NAME=value")

    def annotations(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            return
        size = 0
        for key, val in value.items():
            size += len(str(key)) + (len(val) if isinstance(val, str) else 0)
            prefix, sep, name = str(key).rpartition("/")
            if not (_QUALIFIED_NAME.fullmatch(name) and len(name) <= 63) or (sep and not (_DNS_SUBDOMAIN.fullmatch(prefix) and len(prefix) <= 253)):
                self.add(f"{path}.{key}", f"invalid annotation key {key!r}: it must be a qualified name like example.com/my-key")
        if size > MAX_ANNOTATIONS_SIZE:
            self.add(path, f"annotations are {size} bytes, more than the {MAX_ANNOTATIONS_SIZE} allowed")

    def edits(self, edits: Any, path: str) -> None:
        if not isinstance(edits, dict):
            return
        self.keys(edits, EDITS_KEYS, path)
        self.env(edits.get("env"), f"{path}.env")
        for i, node in enumerate(_dicts(edits.get("deviceNodes"))):
            self.node(node, f"{path}.deviceNodes[{i}]")
        for i, hook in enumerate(_dicts(edits.get("hooks"))):
            self.hook(hook, f"{path}.hooks[{i}]")
        for i, mount in enumerate(_dicts(edits.get("mounts"))):
            self.mount(mount, f"{path}.mounts[{i}]")
        if isinstance(edits.get("intelRdt"), dict):
            self.intel_rdt(edits["intelRdt"], f"{path}.intelRdt")
        seen_host: set[str] = set()
        seen_name: set[str] = set()
        for i, dev in enumerate(_dicts(edits.get("netDevices"))):
            p = f"{path}.netDevices[{i}]"
            self.keys(dev, NETDEV_KEYS, p)
            host, name = dev.get("hostInterfaceName"), dev.get("name")
            if not host:
                self.add(f"{p}.hostInterfaceName", "the host interface name is empty")
            elif host in seen_host:
                self.add(f"{p}.hostInterfaceName", f"host interface {host!r} is given twice")
            if not name:
                self.add(f"{p}.name", "the interface name is empty")
            elif name in seen_name:
                self.add(f"{p}.name", f"interface name {name!r} is given twice")
            seen_host.add(str(host))
            seen_name.add(str(name))

    def node(self, node: dict, path: str) -> None:
        self.keys(node, NODE_KEYS, path)
        if not node.get("path"):
            self.add(f"{path}.path", "a device node needs a path")
        self.absolute(node.get("path"), f"{path}.path")
        self.absolute(node.get("hostPath"), f"{path}.hostPath")
        if isinstance(node.get("type"), str) and node["type"] not in NODE_TYPES:
            self.add(f"{path}.type", f"invalid device type {node['type']!r}: use b, c, u or p")
        perms = node.get("permissions")
        if isinstance(perms, str) and perms not in ("", "none") and set(perms) - set("rwm"):
            self.add(f"{path}.permissions", f"invalid permissions {perms!r}: use letters of rwm")
        mode = node.get("fileMode")
        if mode is not None and not (isinstance(mode, int) and not isinstance(mode, bool) and 0 <= mode <= 0xFFFFFFFF):
            self.add(f"{path}.fileMode", f"fileMode must be a non-negative 32-bit integer, not {json.dumps(mode)}")

    def hook(self, hook: dict, path: str) -> None:
        self.keys(hook, HOOK_KEYS, path)
        name = hook.get("hookName")
        if isinstance(name, str) and name not in HOOK_NAMES:
            self.add(f"{path}.hookName", f"invalid hook name {name!r}{did_you_mean(name, HOOK_NAMES)}: use one of {', '.join(HOOK_NAMES)}")
        if not hook.get("path"):
            self.add(f"{path}.path", "a hook needs the path of its program")
        self.absolute(hook.get("path"), f"{path}.path")
        self.env(hook.get("env"), f"{path}.env")

    def mount(self, mount: dict, path: str) -> None:
        self.keys(mount, MOUNT_KEYS, path)
        for key in ("hostPath", "containerPath"):
            if not mount.get(key):
                self.add(f"{path}.{key}", f"a mount needs a {key}")
        self.absolute(mount.get("containerPath"), f"{path}.containerPath")
        # Non-bind mounts (tmpfs, proc...) name a source, not a path.
        if mount.get("type") in (None, "", "bind", "rbind"):
            self.absolute(mount.get("hostPath"), f"{path}.hostPath")

    def intel_rdt(self, rdt: dict, path: str) -> None:
        self.keys(rdt, RDT_KEYS, path)
        clos = rdt.get("closID")
        if isinstance(clos, str) and clos != "/" and (clos in (".", "..") or "/" in clos or "\n" in clos or len(clos) >= 4096):
            self.add(f"{path}.closID", f"invalid closID {clos!r}")


def _dicts(value: Any) -> list[dict]:
    return [v if isinstance(v, dict) else {} for v in value] if isinstance(value, list) else []


def _nul_strings(value: Any, path: str) -> list[str]:
    """JSON paths of the strings (keys too) under `value` that contain a NUL byte."""
    if isinstance(value, str):
        return [path] if "\0" in value else []
    if isinstance(value, dict):
        return [hit for k, v in value.items()
                for hit in ([f"{path}.{k!r}"] if isinstance(k, str) and "\0" in k else []) + _nul_strings(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in _nul_strings(v, f"{path}[{i}]")]
    return []


def loader_problems(doc: Any) -> list[Problem]:
    """What the CDI Go loader rejects beyond the schema: unknown keys, names, versions, paths."""
    check = _Checker()
    if not isinstance(doc, dict):
        check.add("$", "a CDI spec must be a mapping")
        return check.problems
    check.keys(doc, SPEC_KEYS, "$")
    kind = doc.get("kind")
    if isinstance(kind, str):
        error = names.kind_error(kind)
        if error:
            check.add("$.kind", error)
    check.annotations(doc.get("annotations"), "$.annotations")
    devices = doc.get("devices")
    if isinstance(devices, list):
        if not devices:
            check.add("$.devices", "a spec needs at least one device")
        seen: dict[str, int] = {}
        for i, device in enumerate(devices):
            path = f"$.devices[{i}]"
            if not isinstance(device, dict):
                continue
            check.keys(device, DEVICE_KEYS, path)
            name = device.get("name")
            if isinstance(name, str):
                error = names.device_name_error(name)
                if error:
                    check.add(f"{path}.name", error)
                elif name in seen:
                    check.add(f"{path}.name", f"device {name!r} is defined twice (also at $.devices[{seen[name]}])")
                else:
                    seen[name] = i
            check.annotations(device.get("annotations"), f"{path}.annotations")
            edits = device.get("containerEdits")
            if isinstance(edits, dict) and not any(edits.get(k) for k in EDITS_KEYS):
                check.add(f"{path}.containerEdits", "a device's containerEdits must not be empty")
            check.edits(edits, f"{path}.containerEdits")
    check.edits(doc.get("containerEdits"), "$.containerEdits")
    for where in _nul_strings(doc, "$"):
        check.add(where, "holds a NUL byte, which no path, environment entry or argument can carry")
    version = doc.get("cdiVersion")
    if isinstance(version, str):
        bare = version[1:] if version.startswith("v") else version
        if bare not in KNOWN_VERSIONS:
            check.add("$.cdiVersion", f"unknown CDI version {version!r} (known: {', '.join(KNOWN_VERSIONS)})")
        else:
            minimum, reason = minimum_version_and_reason(doc)
            if version_key(bare) < version_key(minimum):
                check.add("$.cdiVersion", f"the spec version must be at least v{minimum} for the fields it uses ({reason}), not {version}")
    return check.problems


def validate(doc: Any) -> list[Problem]:
    """Schema and loader problems of a parsed spec; [] when Docker and Podman would load it."""
    problems = schema_problems(doc) if isinstance(doc, dict) else []
    seen = {(p.path, p.message) for p in problems}
    return problems + [p for p in loader_problems(doc) if (p.path, p.message) not in seen]


def validate_file(path: str | Path) -> tuple[Any, list[Problem]]:
    """Load and validate a spec file."""
    doc, problems = load(path)
    if problems:
        return None, problems
    if Path(path).suffix not in (".json", ".yaml"):
        problems.append(Problem("$", f"runtimes only load specs named *.json or *.yaml, not {Path(path).name!r}"))
    return doc, problems + validate(doc)


# -- host checks --------------------------------------------------------------------------------


def host_problems(doc: Any) -> list[Problem]:
    """Host paths of a (valid) spec that are missing on this machine, and hooks that cannot run."""
    problems = []
    if not isinstance(doc, dict):
        return problems
    scopes = [("$.containerEdits", doc.get("containerEdits"))]
    scopes += [(f"$.devices[{i}].containerEdits", d.get("containerEdits")) for i, d in enumerate(_dicts(doc.get("devices")))]
    for base, edits in scopes:
        if not isinstance(edits, dict):
            continue
        for i, node in enumerate(_dicts(edits.get("deviceNodes"))):
            key = "hostPath" if node.get("hostPath") else "path"
            if not isinstance(node.get(key), str):
                continue
            problem = _device_node_problem(node[key], node.get("type", ""))
            if problem:
                problems.append(Problem(f"{base}.deviceNodes[{i}].{key}", problem))
        for i, mount in enumerate(_dicts(edits.get("mounts"))):
            if mount.get("type") in (None, "", "bind", "rbind") and isinstance(mount.get("hostPath"), str) and not os.path.exists(mount["hostPath"]):
                problems.append(Problem(f"{base}.mounts[{i}].hostPath", f"{mount['hostPath']} does not exist on this host"))
        for i, hook in enumerate(_dicts(edits.get("hooks"))):
            if isinstance(hook.get("path"), str) and not os.access(hook["path"], os.X_OK):
                problems.append(Problem(f"{base}.hooks[{i}].path", f"{hook['path']} is not an executable on this host"))
    return problems


_NODE_TYPES = {stat.S_IFCHR: "c", stat.S_IFBLK: "b", stat.S_IFIFO: "p"}


def _device_node_problem(host_path: str, declared: str) -> str | None:
    """Why `host_path` cannot back a CDI device node of type `declared`, or None.

    As the CDI library's fillMissingInfo: an lstat (a symlink is not a device
    node), the type must match the declared one ("u" is a character device).
    """
    try:
        st = os.lstat(host_path)
    except OSError:
        return f"{host_path} does not exist on this host"
    actual = _NODE_TYPES.get(stat.S_IFMT(st.st_mode))
    if actual is None:
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "a regular file" if stat.S_ISREG(st.st_mode) else "not a device"
        return f"{host_path} is {what}, not a device node"
    if declared and declared != actual and not (declared == "u" and actual == "c"):
        return f"{host_path} is a {'character' if actual == 'c' else 'block' if actual == 'b' else 'fifo'} device, but the spec says type {declared!r}"
    return None


def duplicate_problems(docs: dict[str, Any]) -> dict[str, list[Problem]]:
    """Devices that two of the given spec files (of one directory) both define.

    Runtimes make such a name unusable (CDI cache: "conflicting device").
    Returns file -> problems, naming the other file.
    """
    owners: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for file, doc in docs.items():
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
            continue
        for i, device in enumerate(_dicts(doc.get("devices"))):
            if isinstance(device.get("name"), str):
                owners.setdefault((os.path.dirname(os.path.abspath(file)), f"{doc['kind']}={device['name']}"), []).append((file, i))
    out: dict[str, list[Problem]] = {}
    for (_, name), where in owners.items():
        files = sorted({f for f, _ in where})
        if len(files) < 2:
            continue
        for file, i in where:
            others = " and ".join(f for f in files if f != file)
            out.setdefault(file, []).append(Problem(f"$.devices[{i}].name", f"{name} is also defined by {others} in the same directory: runtimes refuse both"))
    return out
