"""A project's ``cudapkgs.lock``: what `cudapkgs lock` writes, reads back and compares.

``cudapkgs lock`` writes ``cudapkgs.lock`` beside the project's ``cudapkgs.toml`` (JSON, stable key order): what a team
shares, and nothing of one machine or one working tree.  It pins the cudapkgs version,
system, set, the configuration in effect (without this machine's own settings,
`LOCAL_KEYS`), the digest of every NVIDIA manifest the set reads, and every derivation
the packages need that is not the project's own, by a store-free identity (`lock_ids`:
the derivation's hash with its inputs named by their identities and the store
directory left out, so the lock holds on any storeDir) with its hashed fields (small
values as they are, large ones as digests): nvcc's recorded host compiler, a
fetcher's hash, a local source's NAR hash.

The project's **own** derivations (`own_derivations`) are not pinned: those of the
packages its files define, those built from a source inside the project directory,
and whatever depends on one of them.  Editing the project's package files or its
sources rebuilds them; it does not make the lock differ.  What they are built with is
pinned all the same: every derivation they depend on that is not the project's own.

`check_lock` compares a lock with what this machine evaluates and says exactly what
differs: a configuration key, a manifest, the first derivations whose own fields
differ (e.g. cuda_nvcc's recorded host compiler), and which packages changed as a
result.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ConfigError

__all__ = ["LOCAL_KEYS", "LOCK_VERSION", "lock_ids", "own_derivations", "lock_data", "write_lock", "read_lock",
           "check_lock"]

LOCK_VERSION = 2  # 1 pinned derivation paths (one storeDir) and the project's own files and sources
_SMALL = 160  # a field whose JSON is longer is recorded as its digest
#: Settings of this machine, not of the environment: where things are fetched from, kept and
#: trusted. They are not in the lock (the manifests' digests and the derivations say whether
#: the environment is the same).
LOCAL_KEYS = ("storeDir", "manifestsDir", "fetchers", "sourceMirrors", "substituters", "trustedPublicKeys",
              "requireSigs", "overlays", "safeDirectories",
              "python3Executable")  # the interpreter's version is in the derivations (`_host_interpreters`)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _field(value: Any) -> Any:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return value if len(text) <= _SMALL else _digest(text.encode())


def _fields(data: Mapping[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in data.items():
        if key == "attrs":
            for name, attr in value.items():
                fields[f"attrs.{name}"] = _field(attr)
        elif key != "inputs":  # inputs follow from the input derivations, compared on their own
            fields[key] = _field(value)
    return fields


def _store_free(drv: Any, ids: Mapping[str, str]) -> dict[str, Any]:
    """`drv`'s hashed data with every input's output path written as ``<store>/<its id>!<output>``
    and the store directory as ``<store>``: the same on any storeDir."""
    from .derivation import canonical_json

    text = canonical_json(drv.data)
    for dep in drv.deps:
        for output, path in dep.outputs.items():
            text = text.replace(path, f"<store>/{ids[dep.drv_path]}!{output}")
    # An input's base name alone (a store source's "name": "<hash>-source") holds the store's hash too.
    for dep in drv.deps:
        for output, path in dep.outputs.items():
            text = text.replace(f'"{os.path.basename(path)}"', f'"{ids[dep.drv_path]}!{output}"')
    # The host interpreter by its version, not its path: a CPython 3.12 at another path (another
    # pyenv root, a teammate's /usr/bin) gives the same lock.
    for path, placeholder in sorted(_host_interpreters(drv).items(), key=lambda item: -len(item[0])):
        text = text.replace(json.dumps(path)[1:-1], placeholder)
    return json.loads(text.replace(drv.store_dir.rstrip("/") + "/", "<store>/"))


def _host_interpreters(drv: Any) -> dict[str, str]:
    """Host path -> ``<python3 X.Y.Z>`` of the host Python (`cudapkgs.pkgs.host_tools`) that `drv` is
    or takes as a direct input, and of a ``withPackages`` environment's ``interpreter``."""
    found: dict[str, str] = {}
    for node in (drv, *drv.deps):
        attrs = node.data.get("attrs") or {}
        paths = attrs.get("hostPaths")
        if attrs.get("pname") == "python3" and isinstance(paths, dict):
            for path in paths.values():
                if isinstance(path, str) and os.path.isabs(path):
                    found[path] = f"<python3 {attrs.get('version')}>"
    attrs = drv.data.get("attrs") or {}
    interpreter = attrs.get("interpreter")  # builders/python.with_packages: the env's version is the interpreter's
    if attrs.get("pname") == "python3-env" and isinstance(interpreter, str) and os.path.isabs(interpreter):
        found[interpreter] = f"<python3 {attrs.get('version')}>"
    return found


def lock_ids(roots: Sequence[Any]) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """(drv path -> store-free identity, drv path -> store-free data) for the closures of `roots`.

    The identity is ``sha256:`` of the derivation's canonical JSON with its inputs named by their
    identities, not their store paths (as Nix's hashDerivationModulo names inputs by their
    derivations' hashes), and the store directory replaced: two stores give the same identities
    exactly when the derivations are the same but for where they are kept.
    """
    from .derivation import canonical_json

    ids: dict[str, str] = {}
    datas: dict[str, dict[str, Any]] = {}
    for root in roots:
        for node in root.closure():  # dependencies first
            if node.drv_path not in ids:
                data = _store_free(node, ids)
                datas[node.drv_path] = data
                ids[node.drv_path] = _digest(canonical_json(data).encode())
    return ids, datas


def own_derivations(env: Any, roots: Sequence[Any]) -> set[str]:
    """The drv paths of the closures of `roots` that are the project's own (see the module
    docstring): a package its files define (a fixed-output fetch excepted: a fetched source is
    pinned by its hash), one whose source or a patch lies inside the project directory, and
    every derivation depending on one of those."""
    from .errors import CudapkgsError

    root_dir = os.path.realpath(env.project.root) + os.sep
    own: set[str] = set()
    if env.project.files:
        from .user_files import load_module, package_functions

        names: set[str] = set()
        for file in env.project.files:  # already loaded (and allowed) by evaluate_project: read from its cache
            names.update(package_functions(load_module(file), os.fspath(file), required=False))
        for name in sorted(names):
            try:
                drv = env.pkgs[name].derivation if name in env.pkgs else None
            except (CudapkgsError, AttributeError, KeyError, TypeError):
                continue  # not a package (a helper), or one that does not evaluate: nothing to pin
            if drv is not None and hasattr(drv, "drv_path") and not getattr(drv, "is_fixed_output", False):
                own.add(drv.drv_path)

    def inside(path: Any) -> bool:
        return isinstance(path, str) and (os.path.realpath(path) + os.sep).startswith(root_dir)

    for root in roots:
        for node in root.closure():  # dependencies first: an input's verdict is known
            local = [node.context.get("srcPath")] if (node.data.get("src") or {}).get("type") == "path" else []
            local += list(node.context.get("patchPaths") or ())
            if any(inside(p) for p in local) or any(dep.drv_path in own for dep in node.deps):
                own.add(node.drv_path)
    return own


def _manifest_digests(env: Any) -> dict[str, Any]:
    from .manifests import locate_manifest

    result: dict[str, Any] = {}
    scope = env.pkgs.cudaPackages
    for product in scope.manifestVersions:
        version = scope.manifestVersions[product]
        found = locate_manifest(product, version, directory=env.config.manifestsDir)
        if found is None:
            continue
        result[product] = {"version": version, "sha256": _digest(found[1].read_bytes())}
    return result


def lock_data(env: Any) -> dict[str, Any]:
    """What `cudapkgs lock` writes for an evaluated project (see the module docstring)."""
    from . import __version__
    from .derivation import derivation_of

    drvs = {label: derivation_of(package, label) for label, package in env.packages.items()}
    ids, datas = lock_ids(list(drvs.values()))
    own = own_derivations(env, list(drvs.values()))
    packages: dict[str, Any] = {}
    derivations: dict[str, Any] = {}
    for label, drv in drvs.items():
        if drv.drv_path in own:
            packages[label] = {"own": True}
        else:
            packages[label] = {"name": drv.name, "drv": ids[drv.drv_path], "outputs": sorted(drv.outputs)}
        for node in drv.closure():
            if node.drv_path not in own:
                derivations.setdefault(ids[node.drv_path], {
                    "name": node.name, "fields": _fields(datas[node.drv_path]),
                    "inputDrvs": sorted(ids[d.drv_path] for d in node.deps if d.drv_path not in own)})
        # Where an own package's pinned inputs are: checked as the others, reported under its label.
        packages[label]["inputs"] = sorted({ids[n.drv_path] for n in drv.closure() if n.drv_path not in own})
    config = env.config.to_nix()
    return {
        "version": LOCK_VERSION,
        "cudapkgs": __version__,
        "system": env.pkgs.system,
        "set": env.project.set or "cudaPackages",
        "cudaVersion": env.pkgs.cudaPackages.cudaMajorMinorVersion,
        "configuration": {k: v for k, v in config.items() if k not in LOCAL_KEYS},
        "manifests": _manifest_digests(env),
        "packages": packages,
        "derivations": dict(sorted(derivations.items())),
    }


def write_lock(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a crash leaves the old lock or the new one), through a
    temporary file of a random name that no link planted in the project can redirect
    (`atomic_files.write_atomically`).  Raises OSError; the lock is then unchanged."""
    from .atomic_files import write_atomically

    write_atomically(path, json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def read_lock(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a lock file; raises `ConfigError` when it is not one this cudapkgs can read."""
    from .inputs import InputFileError, read_input_file

    try:
        data = json.loads(read_input_file(path, what="lock"))  # a FIFO there hung it; /dev/zero filled memory
    except InputFileError as error:
        raise ConfigError(f"{path}: cannot read the lock: {error.reason}") from None
    except (ValueError, RecursionError) as error:
        raise ConfigError(f"{path}: not a cudapkgs lock (invalid JSON: {error})") from None
    if not isinstance(data, dict) or data.get("version") != LOCK_VERSION:
        raise ConfigError(f"{path}: not a cudapkgs lock of version {LOCK_VERSION}; run `cudapkgs lock` again")
    problem = _malformed(data)
    if problem:
        raise ConfigError(f"{path}: not a cudapkgs lock ({problem}); run `cudapkgs lock` again")
    return data


def _malformed(data: Mapping[str, Any]) -> str | None:
    """What is wrong with the shape of a lock read from disk (hand-edited or hostile), or None."""
    for key in ("configuration", "manifests", "packages", "derivations"):
        if not isinstance(data.get(key, {}), dict):
            return f"{key} is not a table"
    for label, entry in data.get("packages", {}).items():
        if not isinstance(entry, dict) or not (entry.get("own") is True or isinstance(entry.get("drv"), str)):
            return f"packages.{label} has neither drv nor own"
        if not isinstance(entry.get("inputs", []), list):
            return f"packages.{label}.inputs is not a list"
    for drv_id, entry in data.get("derivations", {}).items():
        if (not isinstance(entry, dict) or not isinstance(entry.get("fields", {}), dict)
                or not isinstance(entry.get("inputDrvs", []), list)):
            return f"derivations.{drv_id} is malformed"
    return None


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def check_lock(locked: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Every difference between a lock and this machine's evaluation, one line each; [] when they agree.

    Derivation differences are reported at their source: the derivations whose own
    fields differ (not those that differ only because an input did), then the packages
    that changed as a result.  The project's own derivations are never a difference.
    """
    lines: list[str] = []
    for key, label in (("system", "system"), ("set", "package set"), ("cudaVersion", "CUDA version")):
        if locked.get(key) != current.get(key):
            lines.append(f"{label}: locked {_show(locked.get(key))}, here {_show(current.get(key))}")
    lines += _dict_diff("configuration", locked.get("configuration") or {}, current.get("configuration") or {})
    lines += _dict_diff("manifest", locked.get("manifests") or {}, current.get("manifests") or {})
    old_pkgs, new_pkgs = locked.get("packages") or {}, current.get("packages") or {}
    for label in sorted(set(old_pkgs) | set(new_pkgs)):
        if label not in new_pkgs:
            lines.append(f"package {label}: locked, but no longer in the project")
        elif label not in old_pkgs:
            lines.append(f"package {label}: in the project, not in the lock (run cudapkgs lock)")
    pinned = set(locked.get("derivations") or {})
    changed = []
    for label, entry in new_pkgs.items():
        if label not in old_pkgs:
            continue
        before = old_pkgs[label]
        if bool(before.get("own")) != bool(entry.get("own")) or before.get("drv") != entry.get("drv") \
                or not set(entry.get("inputs") or ()) <= pinned:
            changed.append(label)
    if changed:
        lines += _root_causes(locked.get("derivations") or {}, current.get("derivations") or {})
        lines.append("packages whose derivation differs as a result: " + ", ".join(changed))
    return lines


def _dict_diff(what: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    lines = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            lines.append(f"{what} {key}: locked {_show(old.get(key))}, here {_show(new.get(key))}")
    return lines


def _root_causes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Derivations new here whose input derivations are all locked ones: where the difference starts."""
    old_by_name: dict[str, list[Mapping[str, Any]]] = {}
    for entry in old.values():
        old_by_name.setdefault(entry.get("name", ""), []).append(entry)
    lines = []
    for drv_path, entry in sorted(new.items(), key=lambda kv: kv[1].get("name", "")):
        if drv_path in old or not all(d in old for d in entry.get("inputDrvs", ())):
            continue
        name = entry.get("name", "?")
        candidates = [c for c in old_by_name.get(name, []) if c.get("fields") != entry.get("fields")]
        pname = (entry.get("fields") or {}).get("attrs.pname")
        if not candidates and pname:  # renamed (a new version): the locked one of the same pname
            gone = {e.get("name") for e in new.values()}
            candidates = [c for c in old.values()
                          if (c.get("fields") or {}).get("attrs.pname") == pname and c.get("name") not in gone]
        if not candidates:
            lines.append(f"derivation {name}: not in the lock ({drv_path})")
            continue
        before = candidates[0]["fields"]
        after = entry.get("fields") or {}
        diffs = [f"{key}: locked {_show(before.get(key))}, here {_show(after.get(key))}"
                 for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]
        if diffs:
            lines.append(f"derivation {name}: " + "; ".join(diffs))
        else:  # the same fields: its input derivations differ in number
            lines.append(f"derivation {name}: its inputs differ")
    return lines
