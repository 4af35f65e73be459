"""Attribute paths for `cudapkgs eval`: parse, walk, and show values like `nix eval`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from . import errors
from .fixpoint import force
from .patterns import LazyPattern
from .records import Record

__all__ = ["format_attrpath", "parse_attrpath", "render", "resolve", "to_json"]

_IDENTIFIER = LazyPattern(r"[A-Za-z_][A-Za-z0-9_'-]*")
_INDEX = LazyPattern(r"[0-9]+")
_SCALARS = (str, bytes, int, float, bool, type(None))


def parse_attrpath(text: str) -> list[str]:
    """Split ``a.b."9.0".c`` into components; the empty string is the root (``[]``)."""
    if text == "":
        return []
    components: list[str] = []
    i, n = 0, len(text)
    while True:
        if i < n and text[i] == '"':
            name, i = _quoted(text, i)
        else:
            end = i
            while end < n and text[end] != ".":
                if text[end] == '"':
                    raise errors.UsageError(
                        f'invalid attribute path "{text}": a quote must enclose a whole component'
                    )
                end += 1
            name = text[i:end]
            if not name:
                raise errors.UsageError(f'invalid attribute path "{text}": empty component at character {i + 1}')
            i = end
        components.append(name)
        if i == n:
            return components
        if text[i] != ".":
            raise errors.UsageError(f'invalid attribute path "{text}": expected "." after a quoted component')
        i += 1
        if i == n:
            raise errors.UsageError(f'invalid attribute path "{text}": empty component at the end')


_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def _quoted(text: str, start: int) -> tuple[str, int]:
    """Read the quoted component at `start`; returns it and the index after the closing quote."""
    chars: list[str] = []
    i = start + 1
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            chars.append(_UNESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
            continue
        if char == '"':
            return "".join(chars), i + 1
        chars.append(char)
        i += 1
    raise errors.UsageError(f'invalid attribute path "{text}": unbalanced quote')


def format_attrpath(path: Sequence[str]) -> str:
    """The inverse of `parse_attrpath`: quote components that are not plain names."""
    return ".".join(
        name if _IDENTIFIER.fullmatch(name) or _INDEX.fullmatch(name) else _nix_string(name) for name in path
    )


def _where(path: Sequence[str]) -> str:
    return format_attrpath(path) if path else "the top level"


def _candidates(obj: Any) -> list[str]:
    names = getattr(obj, "attribute_names", None)
    if callable(names):
        return [str(name) for name in names()]
    return [name for name in dir(obj) if not name.startswith("_")]


def _top_names(root: Any, walked: Sequence[str]) -> list[str]:
    """The top-level names, for `_set_hint` one level down (``cudaPackages_13.0``)."""
    if len(walked) != 1:
        return []
    try:
        top = force(root)
        return [str(key) for key in top] if isinstance(top, Mapping) else _candidates(top)
    except Exception:  # noqa: BLE001 - only a hint
        return []


def resolve(root: Any, path: Sequence[str]) -> Any:
    """Walk `path` from `root`: mapping keys, public attributes, and list indices."""
    obj = root
    for depth, name in enumerate(path):
        walked = path[:depth]
        obj = force(obj)  # a lazy value inside a plain dict (e.g. passthru) is forced on the way
        if isinstance(obj, Mapping):
            try:
                obj = obj[name]
                continue
            except KeyError:
                # A KeyError from forcing a present value is a bug there, not a missing name.
                keys = [str(key) for key in obj]
                if name in keys:
                    raise
                raise _missing(name, walked, keys, _top_names(root, walked)) from None
        if isinstance(obj, (list, tuple)):
            if _INDEX.fullmatch(name):
                index = int(name)
                if index < len(obj):
                    obj = obj[index]
                    continue
                raise errors.AttributeMissingError(
                    f"index {index} out of range at {_where(walked)} (a list of {len(obj)} elements)"
                )
            raise errors.AttributeMissingError(
                f'attribute "{name}" missing at {_where(walked)}: it is a list, not an attribute set'
            )
        if isinstance(obj, _SCALARS) or callable(obj) and not hasattr(obj, "attribute_names"):
            raise errors.AttributeMissingError(
                f'attribute "{name}" missing at {_where(walked)}: it is {_kind(obj)}, not an attribute set'
            )
        if name.startswith("_"):
            raise _missing(name, walked, _candidates(obj), _top_names(root, walked))
        try:
            obj = getattr(obj, name)
        except errors.AttributeMissingError:
            raise  # from evaluating the attribute, not from looking it up
        except AttributeError:
            raise _missing(name, walked, _candidates(obj), _top_names(root, walked)) from None
    return force(obj)


_SET_RE = LazyPattern(r"cudaPackages(_[0-9]+)*")
_VERSIONED_SET_RE = LazyPattern(r"cudaPackages_([0-9]+)_([0-9]+)")


def _set_hint(name: str, walked: Sequence[str], top_names: Sequence[str]) -> str | None:
    """For CUDA set names: ``cudaPackages_13.0`` means ``cudaPackages_13_0``; an unknown set lists the sets.

    `top_names` are the names at the top level of the tree walked: the sets and their aliases
    are found there, so the language needs no knowledge of which sets exist. Only a top level
    with the default alias `cudaPackages` (a package tree, not some other attribute set) gets hints.
    """
    known = [n for n in top_names if _SET_RE.fullmatch(n)]
    if "cudaPackages" not in known:
        return None
    if len(walked) == 1 and _SET_RE.fullmatch(walked[0]) and name.isdigit():
        meant = f"{walked[0]}_{name}"
        if meant in known:
            return (f'attribute "{name}" missing at {walked[0]}: a set\'s version is written with underscores, '
                    f"{meant} (not {walked[0]}.{name})")
    if not walked and _SET_RE.fullmatch(name) and name not in known:
        versioned = sorted((n for n in known if _VERSIONED_SET_RE.fullmatch(n)),
                           key=lambda n: tuple(int(x) for x in _VERSIONED_SET_RE.fullmatch(n).groups()))  # type: ignore[union-attr]
        aliases = sorted((n for n in known if n not in versioned), key=lambda n: (n == "cudaPackages", n))
        return (f"there is no package set {name}; the sets are {', '.join(versioned)}, "
                f"and the aliases {', '.join(aliases)}")
    return None


def _missing(name: str, walked: Sequence[str], candidates: Sequence[str],
             top_names: Sequence[str] = ()) -> errors.AttributeMissingError:
    hint = _set_hint(name, walked, top_names or (candidates if not walked else ()))
    if hint is not None:
        return errors.AttributeMissingError(hint)
    return errors.AttributeMissingError(
        f'attribute "{name}" missing at {_where(walked)}{errors.did_you_mean(name, candidates)}'
    )


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if value is None:
        return "null"
    if callable(value):
        return "a function"
    return f"a {type(value).__name__}"


def _is_function(value: Any) -> bool:
    if not callable(value) or isinstance(value, (Mapping, type)):
        return False
    return not (hasattr(value, "to_json") or hasattr(value, "to_nix") or _is_dataclass(value))


def _is_dataclass(value: Any) -> bool:
    # A dataclass (checked without importing dataclasses, which is slow to import) or a
    # `Record`, the same kind of value without dataclasses: shown field by field alike.
    if isinstance(value, Record):
        return True
    return hasattr(type(value), "__dataclass_fields__") and not isinstance(value, type)


def _dataclass_items(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Record):  # its fields are its slots, in order
        return [(name, getattr(value, name)) for name in value.__slots__]
    import dataclasses  # already loaded: `value` is a dataclass

    return [(field.name, getattr(value, field.name)) for field in dataclasses.fields(value)]


def to_json(value: Any) -> Any:
    """JSON-ready data for `value`, forcing lazy values in order; functions become "<function>" or are left out."""
    if _is_function(value):
        return "<function>"
    return _to_json(value, [])


def _to_json(value: Any, active: list[int]) -> Any:
    value = force(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _is_function(value):
        return "<function>"
    if id(value) in active:
        raise errors.EvalError(f"cannot show a value that contains itself ({type(value).__name__})")
    active.append(id(value))
    try:
        to_json_method = getattr(value, "to_json", None)
        if callable(to_json_method) and not isinstance(value, type):
            return _to_json(to_json_method(), active)
        if isinstance(value, Mapping):
            result = {}
            for key in value:
                item = value[key]
                if not _is_function(item):
                    result[str(key)] = _to_json(item, active)
            return result
        if isinstance(value, (list, tuple)):
            return [_to_json(item, active) for item in value]
        if isinstance(value, (set, frozenset)):
            return [_to_json(item, active) for item in sorted(value, key=str)]
        to_nix = getattr(value, "to_nix", None)
        if callable(to_nix) and not isinstance(value, type):
            return _to_json(to_nix(), active)
        if _is_dataclass(value):
            result = {}
            for name, item in _dataclass_items(value):
                if not _is_function(item):
                    result[name] = _to_json(item, active)
            return result
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        return str(value)
    finally:
        active.pop()


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _nix_string(text: str, *, shown: bool = False) -> str:
    # With `shown` (`render`, for the terminal), a character a terminal would act on (ESC, C1, the
    # bidi overrides) is a Python escape (``\x1b``, ``\u202e``), as cudapkgs.errors.shown writes it;
    # `format_attrpath` keeps it, to stay the inverse of `parse_attrpath`.
    escaped = "".join(_ESCAPES.get(char, char if char.isprintable() or not shown else _escape(char)) for char in text)
    return '"' + escaped.replace("${", "\\${") + '"'


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _render_key(name: str) -> str:
    return name if _IDENTIFIER.fullmatch(name) else _nix_string(name, shown=True)


def render(value: Any, *, depth: int = 2) -> str:
    """`value` as `nix eval` prints it, on one line.

    Sets nested deeper than `depth` show as ``{ … }`` (and are not forced), as do
    lists there unless they hold only plain values.
    """
    return _render(value, depth)


def _render(value: Any, depth: int) -> str:
    value = force(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _nix_string(value, shown=True)
    if _is_function(value):
        return "«lambda»"
    if isinstance(value, Mapping):
        if depth <= 0:
            return "{ … }"
        # Only keys are read when eliding, so values deeper than `depth` are never forced.
        body = "".join(f"{_render_key(str(key))} = {_render(value[key], depth - 1)}; " for key in value)
        return "{ " + body + "}"
    if isinstance(value, (list, tuple)):
        # Short lists of plain values (capabilities, flags) stay readable at any depth.
        if depth <= 0 and not all(isinstance(item, _SCALARS) for item in value):
            return "[ … ]"
        return "[ " + "".join(_render(item, depth - 1) + " " for item in value) + "]"
    to_json_method = getattr(value, "to_json", None)
    if callable(to_json_method) and not isinstance(value, type):
        return _render(to_json_method(), depth)
    to_nix = getattr(value, "to_nix", None)
    if callable(to_nix) and not isinstance(value, type):
        return _render(to_nix(), depth)
    if _is_dataclass(value):
        return _render(dict(_dataclass_items(value)), depth)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return f"«{value}»"
