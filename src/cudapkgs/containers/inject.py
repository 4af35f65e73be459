"""`cudapkgs cdi inject`: apply CDI devices to an OCI bundle's config.json, as a runtime does.

The semantics are those of the CDI reference library
(cncf-tags/container-device-interface @05ae4b5b, `pkg/cdi/cache.go` InjectDevices,
`pkg/cdi/container-edits.go` Apply, `container-edits_unix.go` fillMissingInfo,
`internal/ociedit/spec_editor.go`):

* devices are resolved by fully qualified name; the edits of a device's spec are
  applied once, before the first device of that spec, then the device's own edits,
  all in request order;
* env: `NAME=value` replaces an existing `NAME`, else is appended;
* device nodes: type, major and minor (and the file mode, when not given) come from
  an lstat of the host path (`hostPath`, else `path`), which must be a device node
  of the declared type; uid/gid default to the process user's when that is not root;
  an existing device with the same path is replaced; block and character devices
  get an allow rule in `linux.resources.devices` (access from `permissions`,
  default `rwm`, `none` -> no access);
* mounts: an existing mount on the same destination is replaced; mounts are then
  stably sorted by the number of `/` in the cleaned destination;
* in a container with a user namespace, bind mounts get `idmap` (`ridmap` for rbind);
* hooks are appended to their OCI hook list; `intelRdt` is set; additional GIDs
  other than 0 are added once.

Where this is stricter than the library (documented in docs/cdi.md):

* two injected edits that disagree (one device path with other numbers, one mount
  destination with another source, one variable with another value) are an error
  instead of "the last one wins";
* a name that two specs of one directory define is an error naming both files
  (the library leaves it unresolvable);
* a mount or device destination is resolved inside the bundle's root file system
  (rootfs.Root: symlinks followed as if the root were `/`) and written resolved, so
  no runtime follows an image's symlink out of the root; a destination that only
  reaches /proc or /sys through a symlink is refused;
* missing host paths of bind mounts are refused with the path named.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CdiError
from .names import qualify
from .registry import spec_files
from .rootfs import Root
from .validate import validate_file

OCI_HOOKS = {
    "prestart": "prestart",
    "createRuntime": "createRuntime",
    "createContainer": "createContainer",
    "startContainer": "startContainer",
    "poststart": "poststart",
    "poststop": "poststop",
}
_TYPES = {stat.S_IFCHR: "c", stat.S_IFBLK: "b", stat.S_IFIFO: "p"}
MAX_CONFIG_BYTES = 16 * 1024 * 1024


@dataclass
class Resolved:
    """The devices a request resolved to, and the spec files skipped on the way."""

    edits: list[tuple[str, dict]] = field(default_factory=list)  # (where from, containerEdits), in apply order
    devices: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # spec file -> why


def resolve(source: str, requested: list[str]) -> Resolved:
    """Resolve qualified device names against a spec file or a spec directory.

    `source` is one spec file (it must be valid) or a directory (its `*.json`
    and `*.yaml` specs; invalid ones are skipped and reported in `skipped`).
    Short names (`0`, `all`) take the kind of the only kind in `source`, else
    `nvidia.com/gpu`.  Raises CdiError for an unreadable or invalid spec, a name
    defined twice in the directory (both files named) or an unresolvable name.
    """
    path = Path(source)
    result = Resolved()
    if path.is_dir():
        files = spec_files(path)
    elif path.exists() or path.is_symlink():
        files = [path]
    else:
        raise CdiError(f"{source}: no such spec file or directory")
    loaded: list[tuple[str, dict]] = []
    for file in files:
        doc, problems = validate_file(file)
        if problems:
            if not path.is_dir():
                raise CdiError(f"{file}: not a usable CDI spec: {problems[0]}" + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""))
            result.skipped[str(file)] = str(problems[0])
            continue
        loaded.append((str(file), doc))
    if not loaded:
        raise CdiError(f"{source}: no valid CDI spec" + (f" ({len(result.skipped)} skipped as invalid)" if result.skipped else ""))
    kinds = {doc["kind"] for _, doc in loaded}
    default_kind = next(iter(kinds)) if len(kinds) == 1 else "nvidia.com/gpu"
    table: dict[str, list[tuple[str, dict, dict]]] = {}
    for file, doc in loaded:
        for device in doc["devices"]:
            table.setdefault(f"{doc['kind']}={device['name']}", []).append((file, doc, device))
    unresolved = []
    applied_specs: set[str] = set()
    for name in requested:
        try:
            qualified = qualify(name, default_kind)
        except ValueError as error:
            raise CdiError(f"{name!r}: {error}") from None
        if qualified in result.devices or qualified in unresolved:
            continue  # named twice (e.g. "0" and "nvidia.com/gpu=0"): its edits and hooks once
        found = table.get(qualified)
        if not found:
            unresolved.append(qualified)
            continue
        if len(found) > 1:
            raise CdiError(f"conflicting device {qualified} (specs {' and '.join(f for f, _, _ in found)}): remove one")
        file, doc, device = found[0]
        if file not in applied_specs and doc.get("containerEdits"):
            applied_specs.add(file)
            result.edits.append((f"{file} $.containerEdits", doc["containerEdits"]))
        result.edits.append((f"{file} device {device['name']}", device["containerEdits"]))
        result.devices.append(qualified)
    if unresolved:
        known = ", ".join(sorted(table, key=str.encode)[:8])
        raise CdiError(f"unresolvable CDI devices {', '.join(unresolved)} (known: {known})")
    return result


# -- the OCI config -----------------------------------------------------------------------------


def _device_info(host_path: str) -> tuple[str, int, int, int]:
    """(type, major, minor, permission bits) of a device node, by lstat (a symlink is not one)."""
    try:
        st = os.lstat(host_path)
    except OSError as error:
        raise CdiError(f"failed to stat CDI host device {host_path}: {error.strerror}") from None
    kind = _TYPES.get(stat.S_IFMT(st.st_mode))
    if kind is None:
        raise CdiError(f"CDI host device {host_path} is not a device node")
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)


def oci_device(node: dict, user: dict) -> tuple[dict, dict | None]:
    """One CDI deviceNode as an OCI `linux.devices` entry and its cgroup rule (or None)."""
    path = node["path"]
    host = node.get("hostPath") or path
    dtype, major, minor = node.get("type", ""), node.get("major", 0), node.get("minor", 0)
    file_mode = node.get("fileMode")
    minimal = dtype != "" and (major != 0 or dtype == "p")
    try:
        info = _device_info(host)
    except CdiError:
        if not minimal:
            raise
        info = None
    if info is not None:
        if file_mode is None:
            file_mode = info[3]
        if not minimal:
            if dtype == "":
                dtype = info[0]
            if dtype != info[0] and not (dtype == "u" and info[0] == "c"):
                raise CdiError(f"CDI device {path} ({host}): declared type {dtype!r} but the host node is {info[0]!r}")
            if dtype != "p" and major == 0:
                major, minor = info[1], info[2]
    device: dict[str, Any] = {"path": path, "type": dtype, "major": major, "minor": minor}
    if file_mode is not None:
        device["fileMode"] = file_mode
    for key, user_key in (("uid", "uid"), ("gid", "gid")):
        if node.get(key) is not None:
            device[key] = node[key]
        elif int(user.get(user_key, 0) or 0) > 0:
            device[key] = int(user[user_key])
    rule = None
    if dtype in ("b", "c"):
        access = node.get("permissions", "")
        access = "rwm" if access == "" else ("" if access == "none" else access)
        rule = {"allow": True, "type": dtype, "major": major, "minor": minor}
        if access:
            rule["access"] = access
    return device, rule


def oci_mount(mount: dict) -> dict:
    out: dict[str, Any] = {"destination": mount["containerPath"]}
    if mount.get("type"):
        out["type"] = mount["type"]
    out["source"] = mount["hostPath"]
    if mount.get("options"):
        out["options"] = list(mount["options"])
    return out


def oci_hook(hook: dict) -> dict:
    out: dict[str, Any] = {"path": hook["path"]}
    for key in ("args", "env"):
        if hook.get(key):
            out[key] = list(hook[key])
    if hook.get("timeout") is not None:
        out["timeout"] = hook["timeout"]
    return out


def _with_idmap(mount: dict) -> dict:
    """A bind mount into a container with a user namespace gets `idmap` (`ridmap` for rbind),
    unless it has one: the library's withIDMapForBindMount."""
    option = "idmap" if mount.get("type") == "bind" else ""
    for opt in mount.get("options", []):
        if opt in ("idmap", "ridmap"):
            return mount
        if opt == "bind":
            option = "idmap"
        elif opt == "rbind":
            option = "ridmap"
    if option:
        mount["options"] = [*mount.get("options", []), option]
    return mount


def _mount_depth(mount: dict) -> int:
    return os.path.normpath(mount.get("destination", "")).count("/")


@dataclass
class Report:
    """What an injection changed (counts and rewritten destinations)."""

    devices: list[str]
    env: int = 0
    device_nodes: int = 0
    mounts: int = 0
    hooks: int = 0
    additional_gids: int = 0
    rewritten: list[tuple[str, str]] = field(default_factory=list)
    skipped_specs: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "devices": self.devices,
            "env": self.env,
            "deviceNodes": self.device_nodes,
            "mounts": self.mounts,
            "hooks": self.hooks,
            "additionalGids": self.additional_gids,
            "rewrittenDestinations": [{"from": a, "to": b} for a, b in self.rewritten],
            "skippedSpecs": [{"spec": s, "error": e} for s, e in sorted(self.skipped_specs.items())],
        }


#: The fields of an OCI config.json that `apply` reads or edits, with the JSON types the OCI
#: runtime spec gives them (opencontainers/runtime-spec config.md, config-linux.md):
#: (path, type, type of each element or None).
_CONFIG_SHAPE: tuple[tuple[tuple[str, ...], type, type | None], ...] = (
    (("process",), dict, None),
    (("process", "env"), list, str),
    (("process", "user"), dict, None),
    (("process", "user", "uid"), int, None),
    (("process", "user", "gid"), int, None),
    (("process", "user", "additionalGids"), list, int),
    (("linux",), dict, None),
    (("linux", "devices"), list, dict),
    (("linux", "resources"), dict, None),
    (("linux", "resources", "devices"), list, dict),
    (("linux", "netDevices"), dict, None),
    (("linux", "namespaces"), list, None),
    (("mounts",), list, dict),
    (("hooks",), dict, list),
    *((("hooks", name), list, dict) for name in ("prestart", "createRuntime", "createContainer", "startContainer",
                                                 "poststart", "poststop")),
)


_ABSENT = object()


def check_config_shape(config: dict) -> None:
    """CdiError (one line, naming the field) when a field `apply` edits has the wrong JSON type.

    config.json comes from the bundle, which is hostile input; the types are
    those of the OCI runtime spec (config.md, config-linux.md).
    """
    names = {dict: "an object", list: "an array", str: "a string", int: "an integer"}
    for path, kind, item in _CONFIG_SHAPE:
        value: Any = config
        for key in path:
            value = value.get(key, _ABSENT) if isinstance(value, dict) else _ABSENT
        if value is _ABSENT:
            continue
        where = ".".join(path)
        if not isinstance(value, kind):
            raise CdiError(f"config.json: {where} is not {names[kind]}")
        items = value.values() if isinstance(value, dict) else value
        if item is not None and any(not isinstance(v, item) or isinstance(v, bool) for v in items):
            raise CdiError(f"config.json: {where} holds an entry that is not {names[item]}")


def apply(config: dict, resolved: Resolved, root: Root | None = None, check_mount_sources: bool = True) -> Report:
    """Apply resolved edits to an OCI config (a dict, edited in place); returns what changed.

    `root`, when given, is the container's root file system: destinations are
    resolved inside it.  Raises CdiError on conflicting edits, a host device that
    is missing or of another type, a missing bind-mount source, or a destination
    that a symlink leads into /proc or /sys.
    """
    report = Report(devices=list(resolved.devices), skipped_specs=dict(resolved.skipped))
    check_config_shape(config)
    process = config.setdefault("process", {})
    user = process.get("user") or {}
    linux = config.setdefault("linux", {})

    namespaces = linux.get("namespaces") if isinstance(linux.get("namespaces"), list) else []
    user_namespace = any(isinstance(n, dict) and n.get("type") == "user" for n in namespaces)
    seen_env: dict[str, tuple[str, str]] = {}
    seen_nodes: dict[str, tuple[tuple, str]] = {}
    seen_mounts: dict[str, tuple[tuple, str]] = {}

    def destination(path: str, what: str) -> str:
        if root is None:
            return path
        resolved_path = root.resolve(path)
        if resolved_path != os.path.normpath("/" + path.lstrip("/")):
            for special in ("/proc", "/sys"):
                if (resolved_path == special or resolved_path.startswith(special + "/")) and not path.startswith(special):
                    raise CdiError(f"{what} {path}: a symlink in the container's root file system leads it to {resolved_path}; refused")
            report.rewritten.append((path, resolved_path))
        return resolved_path

    for origin, edits in resolved.edits:
        for entry in edits.get("env") or []:
            name, _, value = entry.partition("=")
            # Within one edits list a repeated name takes the last value (the library's test
            # "duplicate env vars use last value"); between two specs or devices it is a conflict.
            if name in seen_env and seen_env[name][0] != entry and seen_env[name][1] != origin:
                raise CdiError(f"conflicting CDI edits: {name} is {seen_env[name][0]!r} in {seen_env[name][1]} and {entry!r} in {origin}")
            seen_env[name] = (entry, origin)
            env = process.setdefault("env", [])
            for i, existing in enumerate(env):
                if existing.partition("=")[0] == name:
                    env[i] = entry
                    break
            else:
                env.append(entry)
            report.env += 1
        for node in edits.get("deviceNodes") or []:
            device, rule = oci_device(node, user)
            device["path"] = destination(device["path"], "device node")
            key = (device["type"], device["major"], device["minor"])
            if device["path"] in seen_nodes and seen_nodes[device["path"]][0] != key:
                raise CdiError(f"conflicting CDI edits: device {device['path']} is {seen_nodes[device['path']][0]} in {seen_nodes[device['path']][1]} and {key} in {origin}")
            seen_nodes[device["path"]] = (key, origin)
            devices = linux.setdefault("devices", [])
            linux["devices"] = devices = [d for d in devices if d.get("path") != device["path"]]
            devices.append(device)
            if rule is not None:
                linux.setdefault("resources", {}).setdefault("devices", []).append(rule)
            report.device_nodes += 1
        for net in edits.get("netDevices") or []:
            linux.setdefault("netDevices", {})[net["hostInterfaceName"]] = {"name": net["name"]}
        mounts_in = edits.get("mounts") or []
        if mounts_in:
            mounts = config.setdefault("mounts", [])
            for mount in mounts_in:
                oci = oci_mount(mount)
                if user_namespace:
                    oci = _with_idmap(oci)
                is_bind = mount.get("type", "") in ("", "bind", "rbind") and any(o in ("bind", "rbind") for o in mount.get("options") or ["bind"])
                if check_mount_sources and is_bind and not os.path.lexists(oci["source"]):
                    raise CdiError(f"CDI mount source {oci['source']} (for {oci['destination']}, from {origin}) does not exist on this host")
                oci["destination"] = destination(oci["destination"], "mount")
                key = (oci["source"], oci.get("type", ""))
                if oci["destination"] in seen_mounts and seen_mounts[oci["destination"]][0] != key:
                    raise CdiError(
                        f"conflicting CDI edits: {oci['destination']} is mounted from {seen_mounts[oci['destination']][0][0]} in "
                        f"{seen_mounts[oci['destination']][1]} and from {oci['source']} in {origin}"
                    )
                seen_mounts[oci["destination"]] = (key, origin)
                for i, existing in enumerate(mounts):
                    if isinstance(existing, dict) and existing.get("destination") == oci["destination"]:
                        del mounts[i]
                        break
                mounts.append(oci)
                report.mounts += 1
            mounts.sort(key=_mount_depth)  # list.sort is stable, as sort.Stable
        for hook in edits.get("hooks") or []:
            config.setdefault("hooks", {}).setdefault(OCI_HOOKS[hook["hookName"]], []).append(oci_hook(hook))
            report.hooks += 1
        if edits.get("intelRdt") is not None:
            linux["intelRdt"] = dict(edits["intelRdt"])
        for gid in edits.get("additionalGids") or []:
            if gid == 0:
                continue
            users = process.setdefault("user", {"uid": 0, "gid": 0})
            gids = users.setdefault("additionalGids", [])
            if gid not in gids:
                gids.append(gid)
                report.additional_gids += 1
    return report


# -- the bundle ---------------------------------------------------------------------------------


def _read_config(bundle_fd: int, bundle: str) -> dict:
    try:
        fd = os.open("config.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=bundle_fd)
    except OSError as error:
        raise CdiError(f"cannot open {bundle}/config.json: {error.strerror}" + (" (a symlink is refused)" if error.errno == 40 else "")) from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CdiError(f"{bundle}/config.json is not a regular file")
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise CdiError(f"{bundle}/config.json is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise CdiError(f"{bundle}/config.json is not valid JSON: {str(error)[:200]}") from None
    if not isinstance(config, dict):
        raise CdiError(f"{bundle}/config.json is not a JSON object")
    return config


def _write_config(bundle_fd: int, bundle: str, config: dict) -> None:
    data = (json.dumps(config, indent=2) + "\n").encode()
    tmp = f".config.json.{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=bundle_fd)
    except OSError as error:
        raise CdiError(f"cannot write in {bundle}: {error.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, "config.json", src_dir_fd=bundle_fd, dst_dir_fd=bundle_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=bundle_fd)
        except OSError:
            pass
        raise


def inject(source: str, requested: list[str], bundle: str, dry_run: bool = False) -> tuple[Report, dict]:
    """Inject `requested` CDI devices from `source` into `bundle`/config.json (atomically).

    Returns (what changed, the new config).  With `dry_run`, nothing is written.
    Raises CdiError for every refusal (see `resolve` and `apply`); on error the
    bundle is left as it was.
    """
    if not requested:
        raise CdiError("name at least one device to inject (e.g. nvidia.com/gpu=all)")
    resolved = resolve(source, requested)
    try:
        bundle_fd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise CdiError(f"cannot open the bundle {bundle}: {error.strerror}") from None
    try:
        config = _read_config(bundle_fd, bundle)
        root_path = (config.get("root") or {}).get("path") if isinstance(config.get("root"), dict) else None
        if not isinstance(root_path, str) or not root_path:
            raise CdiError(f"{bundle}/config.json has no root.path")
        host_root = root_path if os.path.isabs(root_path) else os.path.join(bundle, root_path)
        with Root(host_root) as root:
            report = apply(config, resolved, root)
        if not dry_run:
            _write_config(bundle_fd, bundle, config)
    finally:
        os.close(bundle_fd)
    return report, config
