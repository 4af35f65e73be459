"""Derivations: the pure, canonical description of how a package's outputs are made.

A derivation is JSON data: name, system, outputs, the source (a fixed-output
fetch, named by its sha256), input derivations' output paths, the builder and
its structured attributes. Its sha256 names the output paths, Nix-style:
`<store>/<32-char base-32 hash>-<name>[-<output>]`. Any change to an input
changes the hash; the same inputs in the same store directory give the same
paths on any machine.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .errors import EvalError
from .lib.patterns import LazyPattern

DRV_FORMAT = 1


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8: the text that is hashed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _check_json(value: Any, where: str, strings: list[tuple[str, str]] | None = None, prefix: str = "") -> Any:
    """`value` as plain JSON data; raises `EvalError` naming `where` for anything else. With `strings`,
    every string (and key) holding `prefix` (``<storeDir>/``) is appended to it as ``(where, text)``."""
    if isinstance(value, str):
        if strings is not None and prefix in value:
            strings.append((where, value))
        return value
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            k = str(k)
            if strings is not None and prefix in k:
                strings.append((f"{where}.{k!r}", k))
            out[k] = _check_json(v, f"{where}.{k}", strings, prefix)
        return out
    if isinstance(value, (list, tuple)):
        return [_check_json(v, f"{where}[{i}]", strings, prefix) for i, v in enumerate(value)]
    raise EvalError(f"{where}: a derivation attribute must be JSON data, got {type(value).__name__}")


def _check_runpaths(name: str, entries: Any) -> None:
    """Raise `EvalError` naming the entry unless `entries` (``appendRunpaths``) is None or a list of RUNPATH
    entries the loader reads as meant: absolute directories, or ones starting with ``$ORIGIN`` (``${ORIGIN}``).
    The loader takes any other entry relative to the working directory of the process (ld.so(8), "Dynamic
    string tokens" and the search order): ``f"{pkg.get('lib')}/lib"`` gave ``None/lib``, a directory of
    whatever directory the program is run in."""
    if entries is None:
        return
    if not isinstance(entries, list):
        raise EvalError(f"{name}.appendRunpaths: expected a list of directories, got {type(entries).__name__}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, str) or not (entry.startswith("/") or entry.startswith(("$ORIGIN", "${ORIGIN}"))):
            raise EvalError(
                f"{name}.appendRunpaths[{i}]: {entry!r} is not an absolute directory or $ORIGIN (the loader would "
                "search it from the working directory of the program; a package in a string is its outPath: "
                "f\"{pkg}/lib\")")


# String context (Nix's: a string made from a package carries the derivations it names). Python's
# strings carry nothing, so every derivation made in this process is recorded by its output paths'
# "<storeDir>/<hash>" prefixes, and a new derivation takes as inputs the outputs its string attributes
# name (`_string_context`). Weak references, with the last `_RECENT_KEPT` derivations held strongly,
# so that a path formatted from a package that was dropped since (``f"{pkg.override_attrs(…)}/lib"``)
# still finds its derivation; a path found in neither is an error, never silently no input.
_KNOWN_OUTPUTS: dict[str, Any] = {}  # "<storeDir>/<32-char hash>" -> weak reference to its Derivation
_RECENT_KEPT = 4096
_RECENT: list[Any] = []
_STORE_PATH_PATTERNS: dict[str, Any] = {}
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-._?=")


def _remember_outputs(drv: "Derivation") -> None:
    from _weakref import ref  # the C module: `weakref`'s import is not paid by an evaluation

    cut = len(drv.store_dir) + 1 + 32
    for path in drv.outputs.values():
        key = path[:cut]

        def forget(dead: Any, key: str = key) -> None:
            if _KNOWN_OUTPUTS.get(key) is dead:
                del _KNOWN_OUTPUTS[key]

        _KNOWN_OUTPUTS[key] = ref(drv, forget)
    _RECENT.append(drv)
    if len(_RECENT) > 2 * _RECENT_KEPT:
        del _RECENT[:_RECENT_KEPT]


def known_output(path: str, store_dir: str) -> "tuple[Derivation, str] | None":
    """The derivation made in this process and its output name whose output is the store path `path`
    (``<store_dir>/<hash>-<name>``, nothing after it), else None. The string context of a path: what
    `Derivation` adds as an input for a string attribute naming it."""
    cut = len(store_dir) + 1 + 32
    found = _KNOWN_OUTPUTS.get(path[:cut])
    drv = found() if found is not None else None
    if drv is None:
        return None
    for output, out_path in drv.outputs.items():
        if out_path == path:
            return drv, output
    return None


def _string_context(
    name: str, store_dir: str, strings: list[tuple[str, str]], input_paths: dict[str, str], deps: list["Derivation"],
) -> None:
    """Add to `input_paths` and `deps` every output of a derivation that a string attribute names (its
    `strings`, ``(where, text)``), as Nix's string context makes ``"${torch}/lib"`` an input of the
    derivation using it (Nix manual, "String interpolation"; src/libexpr/primops.cc ``derivationStrict``
    takes the context of every attribute as inputs). Raises `EvalError` naming the attribute for a path
    of `store_dir` that no derivation of this process makes (no input could be given for it)."""
    import re as _re

    pattern = _STORE_PATH_PATTERNS.get(store_dir)
    if pattern is None:
        from .store.paths import BASE32_CHARS

        pattern = _STORE_PATH_PATTERNS[store_dir] = _re.compile(
            _re.escape(store_dir + "/") + f"[{BASE32_CHARS}]{{32}}-[A-Za-z0-9+._?=-]+")
    cut = len(store_dir) + 1 + 32
    have = {p[:cut]: p for p in input_paths.values() if isinstance(p, str)}
    have_drvs = {d.drv_path for d in deps}
    for where, text in strings:
        for match in pattern.finditer(text):
            key = match.group(0)[:cut]
            if key in have:
                continue
            ref = _KNOWN_OUTPUTS.get(key)
            drv = ref() if ref is not None else None
            output = None
            if drv is not None:
                for out, path in drv.outputs.items():
                    end = match.start() + len(path)
                    if text.startswith(path, match.start()) and (end == len(text) or text[end] not in _NAME_CHARS):
                        output = out
                        break
            if drv is None or output is None:
                shown = match.group(0)[:200]
                raise EvalError(
                    f"{where}: {shown!r} is a path of the store that no package of this evaluation makes, "
                    "so it cannot be made an input of the derivation (a package in a string is its outPath: "
                    "write f\"{pkg}/lib\" with the package itself, not a path copied from an earlier evaluation)")
            path = drv.outputs[output]
            label = f"{drv.name}.{output}"
            if input_paths.get(label, path) != path:
                label = f"{drv.drv_path}!{output}"
            input_paths[label] = path
            have[key] = path
            if drv.drv_path not in have_drvs:
                have_drvs.add(drv.drv_path)
                deps.append(drv)


def fixed_output_path(store_dir: str, name: str, *, algo: str, mode: str, hash: str) -> str:
    """The output path of a fixed-output derivation, as Nix's ``makeFixedOutputPath`` computes it.

    ``mode`` "recursive" with sha256 (``hash`` in hex, the NAR hash) gives
    ``makeStorePath("source", narHash, name)``, the path `Store.add_path` gives
    the same tree; "flat" (the file's own hash) gives
    ``makeStorePath("output:out", sha256("fixed:out:<algo>:<hex>:"), name)``.
    So the path depends on the content alone, never on where it is fetched from.
    Source: Nix src/libstore/store-api.cc ``makeFixedOutputPath`` (Nix 2.18).
    """
    from .store.paths import make_store_path, make_store_path_from_digest

    if mode == "recursive" and algo == "sha256":
        return make_store_path_from_digest(store_dir, "source", hash, name)
    prefix = "r:" if mode == "recursive" else ""
    return make_store_path(store_dir, "output:out", f"fixed:out:{prefix}{algo}:{hash}:", name)


def _check_output_hash(output_hash: Mapping[str, str], name: str, outputs: Sequence[str]) -> dict[str, str]:
    try:
        checked = {"algo": str(output_hash["algo"]), "mode": str(output_hash["mode"]), "hash": str(output_hash["hash"])}
    except (KeyError, TypeError):
        raise EvalError(f"{name}: outputHash needs algo, mode and hash") from None
    if checked["mode"] not in ("flat", "recursive") or checked["algo"] not in ("sha256", "sha512", "sha1"):
        raise EvalError(f"{name}: outputHash mode {checked['mode']!r} / algo {checked['algo']!r} is not supported")
    if list(outputs) != ["out"]:
        raise EvalError(f"{name}: a fixed-output derivation has the one output out, not {', '.join(outputs)}")
    return checked


class Derivation:
    """One derivation; `outputs` maps output names to their store paths."""

    __slots__ = ("store_dir", "data", "hash", "outputs", "drv_path", "deps", "context", "__weakref__")

    def __init__(
        self,
        *,
        store_dir: str,
        name: str,
        system: str,
        outputs: Sequence[str],
        builder: str,
        src: Mapping[str, Any] | None,
        input_paths: Mapping[str, str],
        attrs: Mapping[str, Any],
        strict_deps: bool = True,
        structured_attrs: bool = True,
        deps: Sequence["Derivation"] = (),
        context: Mapping[str, Any] | None = None,
        output_hash: Mapping[str, str] | None = None,
        string_context: bool = True,
    ) -> None:
        from .store.paths import make_store_path, make_store_path_from_digest

        if not outputs:
            raise EvalError(f"derivation {name} has no outputs")
        self.store_dir = store_dir
        # Not hashed: the input derivations (their output paths are, in `inputs`) and
        # build-time settings that cannot change the result (where to fetch from).
        deps = list(deps)
        self.context = dict(context or {})
        strings: list[tuple[str, str]] | None = [] if string_context else None
        checked_attrs = _check_json(dict(attrs), f"{name}.attrs", strings, store_dir + "/")
        input_paths = dict(input_paths)
        _check_runpaths(name, checked_attrs.get("appendRunpaths"))
        if strings:
            _string_context(name, store_dir, strings, input_paths, deps)
        self.deps = tuple(deps)
        self.data = {
            "format": DRV_FORMAT,
            "name": name,
            "system": system,
            "outputs": list(outputs),
            "builder": builder,
            "src": _check_json(dict(src), f"{name}.src") if src is not None else None,
            "inputs": dict(sorted(input_paths.items())),
            "attrs": checked_attrs,
            "strictDeps": strict_deps,
            "structuredAttrs": structured_attrs,
        }
        if output_hash is not None:
            self.data["outputHash"] = _check_output_hash(output_hash, name, outputs)
        from .store.paths import sha256  # hashlib's, without OpenSSL's start-up for a small evaluation

        self.hash = sha256(canonical_json(self.data).encode()).hexdigest()
        if output_hash is not None:
            self.outputs = {"out": fixed_output_path(store_dir, name, **self.data["outputHash"])}
        else:
            self.outputs = {
                o: make_store_path_from_digest(store_dir, f"output:{o}", self.hash, name if o == "out" else f"{name}-{o}")
                for o in outputs
            }
        self.drv_path = make_store_path(store_dir, "text", canonical_json(self.to_json(with_drv_path=False)), name + ".drv")
        _remember_outputs(self)

    @property
    def is_fixed_output(self) -> bool:
        """Whether the output is named by its content hash (a fetcher, as Nix's fixed-output derivations)."""
        return "outputHash" in self.data

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def builder(self) -> str:
        return self.data["builder"]

    @property
    def attrs(self) -> dict[str, Any]:
        return self.data["attrs"]

    def closure(self) -> list["Derivation"]:
        """This derivation and every input derivation, dependencies first."""
        order: list[Derivation] = []
        seen: set[str] = set()

        def visit(drv: Derivation) -> None:
            if drv.drv_path in seen:
                return
            seen.add(drv.drv_path)
            for dep in drv.deps:
                visit(dep)
            order.append(drv)

        visit(self)
        return order

    def to_json(self, *, with_drv_path: bool = True) -> dict[str, Any]:
        """The derivation as `cudapkgs show-derivation` prints it."""
        out = dict(self.data)
        out["outputs"] = {o: {"path": p} for o, p in self.outputs.items()}
        if with_drv_path:
            out = {"drvPath": self.drv_path, **out}
        return out

    @classmethod
    def from_json(
        cls, data: Any, *, source: str = "derivation", store_dir: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> "Derivation":
        """A derivation back from `to_json()` (`cudapkgs show-derivation`), checked against its paths.

        It has no input derivations: its inputs must already be valid where it is built
        (e.g. imported with `cudapkgs import`). Without `context` only shell phases can
        run (a Python phase lives in the process that evaluated it); a remote build
        passes the evaluating process's unhashed `context` (its Python steps and local
        source paths) along with the JSON.

        The file is hostile input: every field is type-checked, every hash by its syntax
        (sha256 hex, ``sha256:`` Nix base-32 or SRI), every path it names must be a store
        path of one absolute store directory, which must be `store_dir` when given (the
        configured store: a derivation for another store is refused).  Raises `EvalError`
        (one line).
        """
        try:
            try:
                if not isinstance(data, Mapping):
                    raise _Bad("the file is not a JSON object")
                _check_file_fields(data)
            except _Bad as error:
                raise _Bad(f"not a derivation as show-derivation prints it: {error}") from None
            outputs = {name: entry["path"] for name, entry in data["outputs"].items()}
            dirs = {os.path.dirname(p) for p in outputs.values()}
            drv_dir = dirs.pop()
            if dirs or not os.path.isabs(drv_dir) or os.path.normpath(drv_dir) != drv_dir:
                raise _Bad(f"its output paths are not in one absolute store directory ({sorted(outputs.values())})")
            if store_dir is not None and drv_dir != store_dir:
                raise _Bad(f"it is a derivation for the store {drv_dir}, not the configured store {store_dir}")
            _check_store_paths(data, drv_dir)
            drv = cls(
                store_dir=drv_dir, name=data["name"], system=data["system"], outputs=list(outputs),
                builder=data["builder"], src=data["src"], input_paths=data["inputs"], attrs=data["attrs"],
                strict_deps=data["strictDeps"], structured_attrs=data["structuredAttrs"],
                output_hash=data.get("outputHash"), string_context=False,
            )
        except _Bad as error:
            raise EvalError(f"{source}: {error}") from None
        except RecursionError:
            raise EvalError(f"{source}: the derivation is nested too deeply") from None
        except (KeyError, TypeError, AttributeError, StopIteration, ValueError) as error:
            raise EvalError(f"{source}: not a derivation as show-derivation prints it ({error!r} missing or malformed)") from None
        if data.get("format") != DRV_FORMAT:
            raise EvalError(f"{source}: derivation format {data.get('format')!r}, this cudapkgs writes {DRV_FORMAT}")
        if drv.outputs != outputs or data.get("drvPath", drv.drv_path) != drv.drv_path:
            raise EvalError(f"{source}: its output paths do not match its contents (edited by hand?)")
        if context is not None:
            drv.context = dict(context)
            return drv
        if data["src"] is not None and data["src"].get("type") == "path":
            raise EvalError(f"{source}: its source is a local file of the machine that evaluated it; build it there")
        for phase, value in data["attrs"].items():
            if isinstance(value, Mapping) and "python" in value:
                raise EvalError(f"{source}: {phase} is a Python step, which runs only where it was evaluated")
        return drv

    def __repr__(self) -> str:
        return f"<Derivation {self.drv_path}>"


class _Bad(Exception):
    """A field of a derivation file is malformed (becomes an EvalError naming the file)."""


_HEX64 = LazyPattern(r"[0-9a-f]{64}")
_NIX32_SHA256 = LazyPattern(r"sha256:([0-9abcdfghijklmnpqrsvwxyz]{52}|[0-9a-f]{64})")
_SRI_SHA256 = LazyPattern(r"sha256-[A-Za-z0-9+/]{43}=")
_OUTPUT_NAME = LazyPattern(r"[A-Za-z_][A-Za-z0-9_-]*")


def _check_file_fields(data: Mapping[str, Any]) -> None:
    """Types of a derivation file's fields, and the syntax of every hash in its src."""
    for key, kind in (("name", str), ("system", str), ("builder", str), ("inputs", Mapping), ("attrs", Mapping),
                      ("outputs", Mapping), ("strictDeps", bool), ("structuredAttrs", bool)):
        if not isinstance(data.get(key), kind):
            raise _Bad(f"{key} is missing or not a {'JSON object' if kind is Mapping else kind.__name__}")
    if not data["outputs"]:
        raise _Bad("it has no outputs")
    for name, entry in data["outputs"].items():
        if not _OUTPUT_NAME.fullmatch(name) or not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str):
            raise _Bad(f"outputs.{name} is not {{\"path\": <store path>}}")
    for name, path in data["inputs"].items():
        if not isinstance(path, str):
            raise _Bad(f"inputs.{name} is not a store path")
    src = data.get("src")
    if src is None:
        _check_output_hash_field(data.get("outputHash"))
        return
    if not isinstance(src, Mapping):
        raise _Bad(f"src is a {type(src).__name__}, not an object or null")
    for key, value in src.items():
        if key == "sha256" and not (isinstance(value, str) and _HEX64.fullmatch(value)):
            raise _Bad(f"src.sha256 {value!r} is not a sha256 (64 lower-case hex digits)")
        if key in ("narHash", "hash", "outputHash") and not (
            isinstance(value, str) and (_NIX32_SHA256.fullmatch(value) or _SRI_SHA256.fullmatch(value) or _HEX64.fullmatch(value))
        ):
            raise _Bad(f"src.{key} {value!r} is not a sha256 hash (sha256:<base-32>, sha256-<base64> or hex)")
        if key == "size" and value is not None and not (
            (type(value) is int and value >= 0) or (isinstance(value, str) and value.isascii() and value.isdigit())
        ):
            raise _Bad(f"src.size {value!r} is not a byte count")
    _check_output_hash_field(data.get("outputHash"))
    relative = src.get("relativePath")
    if relative is not None:
        parts = relative.split("/") if isinstance(relative, str) else [".."]
        if not relative or relative.startswith("/") or ".." in parts or "\0" in relative:
            raise _Bad(f"src.relativePath {relative!r} is not a relative path inside the release")
    urls = src.get("urls")
    if urls is not None and not (isinstance(urls, list) and all(isinstance(u, str) for u in urls)):
        raise _Bad("src.urls is not a list of strings")


def _check_output_hash_field(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(isinstance(value.get(k), str) for k in ("algo", "mode", "hash")):
        raise _Bad("outputHash is not {algo, mode, hash} strings")
    if not re.fullmatch(r"(sha256|sha512|sha1)[-:]?[A-Za-z0-9+/=]+", value["hash"]) and not re.fullmatch(
        r"[0-9a-zA-Z+/=]+", value["hash"]
    ):
        raise _Bad(f"outputHash.hash {value['hash']!r} is not a hash")


def _check_store_paths(data: Mapping[str, Any], store_dir: str) -> None:
    """Every output, input and store source path is a store path of `store_dir`."""
    from .errors import StoreError
    from .store.paths import to_store_path

    named = [(f"outputs.{k}", v["path"]) for k, v in data["outputs"].items()]
    named += [(f"inputs.{k}", v) for k, v in data["inputs"].items()]
    src = data.get("src")
    if isinstance(src, Mapping) and src.get("type") == "store":
        named.append(("src.path", src.get("path")))
    for where, path in named:
        try:
            ok = isinstance(path, str) and to_store_path(store_dir, path) == path
        except (StoreError, ValueError):
            ok = False
        if not ok:
            raise _Bad(f"{where} {path!r} is not a store path of {store_dir}")


def derivation_of(value: Any, label: str) -> Derivation:
    """The derivation of an evaluated package `value` (`label` names it in errors).

    Raises `EvalError` when `value` is not a package and `UnavailablePackageError` when its
    `meta.available` is false (the reason from `meta.problems`).
    """
    from .errors import UnavailablePackageError

    try:
        is_package = not isinstance(value, (str, bytes)) and "derivation" in value
    except TypeError:
        is_package = False
    # Evaluated outside the check: an error inside a package's derivation is reported as it is.
    drv = value["derivation"] if is_package else None
    if not isinstance(drv, Derivation):
        raise EvalError(f"{label} is not a package, so it cannot be built")
    meta = _get(value, "meta")
    if meta is not None and _get(meta, "available") is False:  # builders other than buildRedist may not check
        problems = _get(meta, "problems") or {}
        reason = "; ".join(p["message"] for p in problems.values()) or f"{drv.name} is not available on this platform"
        raise UnavailablePackageError(reason)
    return drv


def _get(value: Any, name: str) -> Any:
    try:
        return value[name] if name in value else None
    except TypeError:
        return getattr(value, name, None)
