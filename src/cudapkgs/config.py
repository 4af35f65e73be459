"""The user's configuration: Nixpkgs' `config`, with keys in Nixpkgs spelling.

Values come, lowest precedence first, from the defaults in `OPTIONS`,
``$XDG_CONFIG_HOME/cudapkgs/config.toml``, the file named by ``$CUDAPKGS_CONFIG``,
an explicit file, a Python mapping, and ``--set KEY=VALUE`` arguments.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from . import errors
from .errors import shown_cache_url
from .lib.patterns import LazyPattern

__all__ = ["Config", "OPTIONS", "Option", "ENV_FALLBACKS", "load_config", "parse_set", "parse_toml", "shown_cache_url"]


class Option:
    """One configuration key: its kind ("bool", "str", "str-list", "predicate", "path" or "path-list"), default and help."""

    # A plain slotted class: dataclasses would cost the CLI's start-up an `inspect` import.
    __slots__ = ("name", "kind", "default", "doc", "check", "redact")

    def __init__(
        self,
        name: str,
        kind: str,
        default: Any,
        doc: str,
        # Extra validation on top of the kind's; returns the (normalised) value or raises ValueError.
        check: Callable[[Any], Any] | None = None,
        # Its values are echoed in errors only as `errors.redacted` shows them (a key pasted in the wrong
        # place may be a secret one).
        redact: bool = False,
    ) -> None:
        self.name, self.kind, self.default, self.doc, self.check = name, kind, default, doc, check
        self.redact = redact

    def __repr__(self) -> str:
        return f"Option({self.name!r}, {self.kind!r}, default={self.default!r})"


def _check_url(url: str, what: str) -> None:
    """ValueError naming `what` when the URL `url` has a port that is no number from 0 to 65535 (urllib
    raised it later, from the listings, the plan and doctor: an internal error)."""
    import urllib.parse

    try:
        urllib.parse.urlsplit(url).port
    except ValueError:
        raise ValueError(f"{what}: the port is not a number from 0 to 65535") from None


def _check_source_mirrors(mirrors: tuple[str, ...]) -> tuple[str, ...]:
    for mirror in mirrors:
        if "://" in mirror:
            _check_url(mirror, f'"{shown_cache_url(mirror)}"')
    return mirrors


def _check_fetchers(fetchers: tuple[str, ...]) -> tuple[str, ...]:
    if not fetchers:
        raise ValueError('at least one fetcher is needed: "redist", "mirror:<dir or URL prefix>" or "wheels"')
    for fetcher in fetchers:
        kind, _, where = fetcher.partition(":")
        if kind == "mirror" and "://" in where:
            _check_url(where, f'"{shown_cache_url(fetcher)}"')
        if fetcher in ("redist", "wheels") or (kind == "mirror" and where):
            continue
        suggestion = errors.did_you_mean(fetcher, ["redist", "wheels", "mirror:"])
        raise ValueError(
            f'"{shown_cache_url(fetcher)}" is not a fetcher; use "redist", "mirror:<dir or URL prefix>" or "wheels"{suggestion}'
        )
    return fetchers


# The set members `prebuiltWheels` may name (cuda/prebuilt.py's PREBUILT: the same names).
PREBUILT_WHEEL_NAMES = ("libnvshmem", "nccl")


def _check_prebuilt(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if name not in PREBUILT_WHEEL_NAMES:
            raise ValueError(f'"{name}" has no prebuilt wheel{errors.did_you_mean(name, PREBUILT_WHEEL_NAMES)}; '
                             f'known: {", ".join(PREBUILT_WHEEL_NAMES)}')
    return names


_CAPABILITY = LazyPattern(r"[0-9]+\.[0-9]+[af]?")
# Spellings people copy from nvcc flags or nvidia-smi: "sm_89", "compute_90a", "89".
_NVCC_SPELLING = LazyPattern(r"(?:sm_|compute_)?([0-9]+)([0-9])([af]?)")


def _check_capabilities(capabilities: tuple[str, ...]) -> tuple[str, ...]:
    for capability in capabilities:
        if _CAPABILITY.fullmatch(capability):
            continue
        nvcc = _NVCC_SPELLING.fullmatch(capability)
        if nvcc:
            hint = f'write "{nvcc[1]}.{nvcc[2]}{nvcc[3]}"'
        else:
            hint = 'expected a capability such as "8.9", "9.0a" or "10.0f"'
        raise ValueError(f'"{capability}" is not a CUDA capability; {hint}')
    return capabilities


def _check_substituters(urls: tuple[str, ...]) -> tuple[str, ...]:
    for url in urls:
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        if scheme not in ("file", "http", "https", "s3"):
            raise ValueError(f'"{shown_cache_url(url)}" is not a cache URL; use "file:///dir", "https://host/prefix" '
                             'or "s3://bucket?…"')
    return urls


def _check_public_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    import base64
    import binascii

    for key in keys:
        name, sep, data = key.partition(":")
        try:
            ok = bool(sep and name) and len(base64.b64decode(data, validate=True)) == 32
        except (binascii.Error, ValueError):
            ok = False
        if not ok:
            from .errors import redacted

            raise ValueError(f'{redacted(key)} is not a public key; expected "name:base64" of 32 bytes (as `cudapkgs key generate` prints)')
    return keys


def _check_safe_directories(entries: tuple[str, ...]) -> tuple[str, ...]:
    for entry in entries:
        if entry != "*" and not os.path.isabs(os.path.expanduser(entry)):
            raise ValueError(f'"{entry}" is not an absolute directory (or "*", every directory)')
    return entries


def _check_size(value: str) -> str:

    try:
        parse_size(value)
    except errors.ConfigError as error:
        raise ValueError(str(error)) from None
    return value


# Adding an option is one line here; validation, defaults and --help text follow from it.
OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        Option("cudaSupport", "bool", False, "Enable CUDA code paths in packages that have them."),
        Option("rocmSupport", "bool", False, "Enable ROCm code paths (pkgsCuda forces it off, pkgsRocm on)."),
        Option("cudaCapabilities", "str-list", (), 'GPU capabilities to build for, e.g. ["8.9", "9.0a"]; empty means the set\'s default.', _check_capabilities),
        Option("cudaForwardCompat", "bool", True, "Also emit PTX for the last capability, so code runs on newer GPUs."),
        Option("allowUnfree", "bool", False, "Allow every package with an unfree license."),
        Option("allowUnfreePredicate", "predicate", None, 'Allow the unfree packages this function accepts; "cuda" accepts NVIDIA\'s CUDA licenses.'),
        Option("allowAliases", "bool", True, "Keep the deprecated alias names in every package set."),
        Option("manifestsDir", "path", None, "The only directory to read NVIDIA's redistrib manifests from (else $CUDAPKGS_MANIFESTS, else the user manifests directory, then the shipped copies)."),
        Option("storeDir", "path", None, "The store's directory (else $CUDAPKGS_STORE, else $XDG_DATA_HOME/cudapkgs/store); part of every store path."),
        Option("fetchers", "str-list", ("redist", "wheels"), 'Where sources come from, tried in order: "redist" (NVIDIA), "mirror:<dir or URL prefix>", "wheels" (NVIDIA\'s PyPI wheels).', _check_fetchers),
        Option("sourceMirrors", "str-list", (), "Directories or URL prefixes tried before upstream by fetchurl, fetchFromGitHub and fetchPypi (then $CUDAPKGS_SOURCE_MIRRORS); what they hold is checked against the declared hash.", _check_source_mirrors),
        Option("maxCacheSize", "str", None, 'Size budget of the download caches (archives and wheels), e.g. "5GiB": after each build the least recently used entries go until they fit; `cudapkgs gc --caches` frees them on demand.', _check_size),
        Option("overlays", "path-list", (), "Python files each defining overlay(final, prev) -> attributes, applied in order to the top level and every variant (pkgsCuda, pkgsForCudaArch.*, cudaPackages_X_Y.pkgs)."),
        Option("python3Executable", "path", None, "The host Python interpreter behind python3 and python3Packages (default: the python3 on PATH resolved to its real interpreter, a venv's or pyenv shim's base; else /usr/bin, /usr/local/bin or /bin); e.g. a Python 3.12 to build for a machine that runs 3.12. python310Packages … python313Packages use the CPython of their version found here."),
        Option("prebuiltWheels", "str-list", ("nccl", "libnvshmem"), 'Set members Nixpkgs builds from source to take from NVIDIA\'s prebuilt PyPI wheel of the same version instead, keeping their attribute names: "nccl" (minutes instead of an hour of nvcc), "libnvshmem" (its source build needs MPI, UCX, libfabric and PMIx, which cudapkgs lacks). Both by default (a deviation from Nixpkgs, for the ML stack: docs/ml-stack.md); ["libnvshmem"] builds NCCL from source as Nixpkgs does, [] both.', _check_prebuilt),
        Option("driverLibDir", "path", None, "Host directory holding libcuda.so.1, appended to run paths (default: /run/opengl-driver/lib)."),
        Option("substituters", "str-list", (), 'Binary caches to substitute from before building, in order: "file:///dir", "https://host/prefix", "s3://bucket?endpoint=…&region=…".', _check_substituters),
        Option("trustedPublicKeys", "str-list", (), 'Keys whose signatures make a cache\'s paths trusted, in Nix\'s "name:base64" form (as `cudapkgs key generate` prints).', _check_public_keys, redact=True),
        Option("requireSigs", "bool", True, "Refuse a substitute that no trusted key signed (turn off only for caches you fully control); a project file cannot turn it off."),
        Option("safeDirectories", "str-list", (), 'Directories whose project file (cudapkgs.toml) may be owned by another user, as git\'s safe.directory ("*": every directory); it must still be allowed (cudapkgs allow). Only your own configuration can set it.', _check_safe_directories),
    )
}  # fmt: skip

_PREDICATES = ("cuda",)

_EXPECTED = {
    "bool": "a boolean",
    "str": "a string",
    "str-list": "a list of strings",
    "predicate": 'a function or the string "cuda"',
    "path": "a path",
    "path-list": "a list of paths",
}


def _describe(value: Any) -> str:
    """'the string "yes"', 'the integer 1', 'a table', ... for error messages (a URL's password masked:
    `shown_cache_url`, a substituter given as a string was echoed whole)."""
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, str):
        return f'the string "{shown_cache_url(value)}"'
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the float {value}"
    if value is None:
        return "nothing (None)"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _builtin_predicate(name: str) -> Callable[[Any], bool]:
    from .licenses import allow_unfree_cuda_predicate

    return {"cuda": allow_unfree_cuda_predicate}[name]


def _validate(option: Option, value: Any, base_dir: str | None) -> Any:
    """Return the stored form of `value` for `option`, or raise ValueError with the reason."""
    if value is None and option.default is None:
        return None
    kind = option.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"expected a boolean, got {_describe(value)}")
    elif kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {_describe(value)}")
    elif kind == "str-list":
        if not isinstance(value, (list, tuple)):
            if option.redact and isinstance(value, str):
                from .errors import redacted

                raise ValueError(f"expected a list of strings, got the string {redacted(value)} (write it inside [\"…\"])")
            hint = f' (write ["{shown_cache_url(str(value))}"])' if isinstance(value, (str, int, float)) else ""
            raise ValueError(f"expected a list of strings, got {_describe(value)}{hint}")
        for item in value:
            if not isinstance(item, str):
                hint = f' (write "{item}")' if isinstance(item, (int, float)) and not isinstance(item, bool) else ""
                raise ValueError(f"expected a list of strings, got a list containing {_describe(item)}{hint}")
        value = tuple(value)
    elif kind == "path-list":
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, os.PathLike)) and os.fspath(v) for v in value):
            raise ValueError(f"expected a list of paths, got {_describe(value)}")
        value = tuple(os.path.normpath(os.path.join(base_dir or os.getcwd(), os.path.expanduser(os.fspath(v)))) for v in value)
    elif kind == "predicate":
        if isinstance(value, str):
            if value not in _PREDICATES:
                raise ValueError(
                    f'unknown predicate "{value}"{errors.did_you_mean(value, _PREDICATES)}; '
                    'the built-in one is "cuda"'
                )
            value = _builtin_predicate(value)
        elif not callable(value):
            raise ValueError(f"expected {_EXPECTED[kind]}, got {_describe(value)}")
    elif kind == "path":
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"expected a path, got {_describe(value)}")
        path = os.path.expanduser(os.fspath(value))
        if not path:
            raise ValueError("expected a path, got an empty string")
        value = os.path.normpath(os.path.join(base_dir or os.getcwd(), path))
    else:  # pragma: no cover - a mistake in OPTIONS
        raise AssertionError(f"unknown option kind {kind!r}")
    # No control character in a string (issue 30, item 7): an ESC in a substituter reached the terminal.
    for text in (value,) if isinstance(value, str) else value if isinstance(value, tuple) else ():
        char = errors.control_character(text) if isinstance(text, str) else None
        if char is not None:
            raise ValueError(f'"{errors.shown(shown_cache_url(text))}" holds the control character {char}; remove it '
                             "(a terminal acts on such characters when the value is shown)")
    if option.check is not None:
        value = option.check(value)
    return value


def _where(source: str, key: str) -> str:
    # "--set cudaSupport: ..." reads like the command line; files read "path: key: ...".
    return f"{source} {key}" if source == "--set" else f"{source}: {key}"


class Config:
    """An immutable configuration; read values as ``config.cudaSupport`` or ``config["cudaSupport"]``.

    Equal configurations (predicates compared by identity) hash equally, so
    package-set variants can be cached by configuration.
    """

    __slots__ = ("_values", "_hash")

    def __init__(self, values: Mapping[str, Any] | None = None, /, *, source: str = "Config()") -> None:
        stored = {name: _stored_default(option) for name, option in OPTIONS.items()}
        object.__setattr__(self, "_values", stored)
        object.__setattr__(self, "_hash", None)
        if values:
            stored.update(self._validated(values, source, None))

    @classmethod
    def _from_values(cls, values: dict[str, Any]) -> Config:
        config = cls.__new__(cls)
        object.__setattr__(config, "_values", values)
        object.__setattr__(config, "_hash", None)
        return config

    @staticmethod
    def _validated(mapping: Mapping[str, Any], source: str, base_dir: str | None) -> dict[str, Any]:
        validated = {}
        for key, value in mapping.items():
            option = OPTIONS.get(key)
            if option is None:
                raise errors.ConfigError(
                    f'{source}: unknown configuration key "{key}"{errors.did_you_mean(str(key), OPTIONS)}'
                )
            try:
                validated[key] = _validate(option, value, base_dir)
            except ValueError as error:
                raise errors.ConfigError(f"{_where(source, key)}: {error}") from None
        return validated

    def merged(self, mapping: Mapping[str, Any], *, source: str, relative_to: str | None = None) -> Config:
        """A copy with `mapping` laid over this one; `source` names it in errors.

        Relative `path` values are taken relative to `relative_to` (default: the
        current directory).
        """
        values = dict(self._values)
        values.update(self._validated(mapping, source, relative_to))
        return Config._from_values(values)

    def replace(self, **changes: Any) -> Config:
        """A copy with `changes` applied, validated like any other source."""
        return self.merged(changes, source="Config.replace()")

    def __getitem__(self, key: str) -> Any:
        try:
            value = self._values[key]
        except KeyError:
            raise KeyError(key) from None
        # Lists are stored as tuples (for hashing) and handed out as fresh lists, as Nix shows them.
        return list(value) if isinstance(value, tuple) else value

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self[key]
        except KeyError:
            raise AttributeError(
                f'no configuration key "{key}"{errors.did_you_mean(key, OPTIONS)}'
            ) from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Config is immutable; use replace() or merged()")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Config._from_values, (dict(self._values),))

    def __copy__(self) -> Config:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Config:
        return self

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def attribute_names(self) -> list[str]:
        """The configuration keys (used by `cudapkgs eval` for suggestions)."""
        return list(self._values)

    def _key(self) -> tuple[Any, ...]:
        return tuple(
            ("<function>", id(value)) if OPTIONS[name].kind == "predicate" and value is not None else value
            for name, value in self._values.items()
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(self._key()))
        return self._hash  # type: ignore[return-value]

    def __repr__(self) -> str:
        changed = {
            name: value for name, value in self.to_nix().items() if self._values[name] != _stored_default(OPTIONS[name])
        }
        return "Config(" + ", ".join(f"{name}={value!r}" for name, value in changed.items()) + ")"

    def to_nix(self) -> dict[str, Any]:
        """Every key with a JSON-friendly value; a predicate shows as "cuda" or "<function>"."""
        result: dict[str, Any] = {}
        for name, value in self._values.items():
            if OPTIONS[name].kind == "predicate" and value is not None:
                value = _predicate_name(value)
            elif isinstance(value, tuple):
                value = list(value)
            result[name] = value
        return result

    to_json = to_nix

    def permits_unfree(self, package: Any) -> bool:
        """Nixpkgs' check: `allowUnfree`, or `allowUnfreePredicate(package)`."""
        if self._values["allowUnfree"]:
            return True
        predicate = self._values["allowUnfreePredicate"]
        return predicate is not None and bool(predicate(package))


def _stored_default(option: Option) -> Any:
    default = option.default
    return tuple(default) if isinstance(default, list) else default


def _predicate_name(predicate: Callable[[Any], bool]) -> str:
    for name in _PREDICATES:
        if predicate is _builtin_predicate(name):
            return name
    return "<function>"


_TOML_BOOLEANS = {"true": True, "false": False}


def _plain_string(body: str) -> bool:
    # Printable ASCII without a quote or a backslash: a TOML basic string that is exactly its characters.
    return body.isascii() and body.isprintable() and '"' not in body and "\\" not in body


def _plain_toml_strings(text: str) -> str | list[str] | None:
    """What TOML reads for ``"x"`` or an array of such strings on one line (``["9.0", "8.9",]``), when
    every string is plain (`_plain_string`); None for anything else, which tomllib then reads (so a
    value this does not recognise loses nothing: tests/test_config.py compares both on many texts)."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1] if _plain_string(text[1:-1]) else None
    if len(text) < 2 or text[0] != "[" or text[-1] != "]":
        return None
    body = text[1:-1].strip(" \t")
    if not body:
        return []
    items = body.split(",")
    if len(items) > 1 and not items[-1].strip(" \t"):
        items.pop()  # a trailing comma, which TOML allows
    found = []
    for item in items:
        item = item.strip(" \t")
        if len(item) < 2 or item[0] != '"' or item[-1] != '"' or not _plain_string(item[1:-1]):
            return None
        found.append(item[1:-1])
    return found


def parse_set(assignment: str) -> tuple[str, Any]:
    """Split ``KEY=VALUE``; VALUE is read as TOML, or taken as a string if it is not valid TOML."""
    key, sep, text = assignment.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise errors.UsageError(f'--set "{assignment}": expected KEY=VALUE, e.g. --set cudaSupport=true')
    # The commonest values read as TOML reads them, without importing tomllib (about 5 ms with
    # datetime and string): a boolean, or a decimal integer without sign, underscore or leading zero.
    if text in _TOML_BOOLEANS:
        return key, _TOML_BOOLEANS[text]
    # (At most 18 digits: int() refuses more than 4,300, and a 64-bit integer has at most 19.)
    if text.isascii() and text.isdigit() and (text == "0" or text[0] != "0") and len(text) <= 18:
        return key, int(text)
    plain = _plain_toml_strings(text)  # fetchers=["wheels"], cudaCapabilities=["9.0"]: 11 ms of tomllib saved
    if plain is not None:
        return key, plain
    import tomllib

    try:
        parsed = tomllib.loads(f"v = {text}")
    except (tomllib.TOMLDecodeError, RecursionError, ValueError):
        # ValueError: an integer of more than 4,300 digits, which int() (and so tomllib) refuses
        return key, text
    # A VALUE with a newline could smuggle in more keys; then it is just a string.
    if set(parsed) != {"v"}:
        return key, text
    return key, parsed["v"]


def _read_toml(path: str, label: str) -> dict[str, Any]:
    from .inputs import InputFileError, read_input_file

    try:
        # A regular file only (a FIFO or /dev/zero would hang or never end), UTF-8 as TOML requires.
        data = read_input_file(path, what="configuration file")
    except InputFileError as error:
        raise errors.ConfigError(f"{label}: cannot read configuration file: {error.reason}") from None
    return parse_toml(data, label)


def parse_toml(data: bytes, label: str) -> dict[str, Any]:
    """The TOML document `data` (bytes read from the file `label`); every malformed input is a
    one-line `ConfigError` naming `label`: not UTF-8, nested too deeply (tomllib recurses), or
    invalid TOML."""
    import tomllib

    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise errors.ConfigError(f"{label}: not UTF-8 text (byte {error.start}); TOML files are UTF-8") from None
    except RecursionError:
        raise errors.ConfigError(f"{label}: invalid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as error:
        raise errors.ConfigError(f"{label}: invalid TOML: {error}") from None


def _user_config_file(env: Mapping[str, str]) -> str | None:
    """``$XDG_CONFIG_HOME/cudapkgs/config.toml``; a relative XDG_CONFIG_HOME (or HOME) is ignored, as the
    XDG Base Directory Specification says (`cudapkgs.xdg`): it was read from the working directory, so a
    cloned repository supplied the user's configuration (issue 30, item 13). None without a home."""
    from .xdg import base_dir

    base = base_dir("XDG_CONFIG_HOME", env)
    return os.path.join(base, "cudapkgs", "config.toml") if base is not None else None


#: Keys that, left unset (None), fall back to an environment variable where they are used
#: (store/location.py, top_level.py); `cudapkgs config` names the variable as their origin.
ENV_FALLBACKS = {"storeDir": "CUDAPKGS_STORE", "manifestsDir": "CUDAPKGS_MANIFESTS"}


def load_config(
    *,
    file: str | os.PathLike[str] | None = None,
    sets: Sequence[str] = (),
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] = os.environ,
    origins: dict[str, str] | None = None,
) -> Config:
    """Build the configuration from every source, in precedence order (see the module docstring).

    With `origins` (a dict), it is filled with key -> where the value in effect came from: "default",
    "file <path>", "environment: file <path> ($CUDAPKGS_CONFIG)", "environment ($CUDAPKGS_STORE)" (a
    key of ENV_FALLBACKS left unset while the variable is set), "import_pkgs(config=…)" or "--set".
    """
    config = Config()
    where = origins if origins is not None else {}
    where.update({name: "default" for name in OPTIONS})

    def apply_file(path: str, label: str, origin: str) -> None:
        nonlocal config
        data = _read_toml(path, label)
        base = os.path.dirname(os.path.abspath(path))
        config = config.merged(data, source=label, relative_to=base)
        where.update({key: origin for key in data})

    user_file = _user_config_file(env)
    if user_file is not None and os.path.isfile(user_file):
        apply_file(user_file, user_file, f"file {user_file}")
    from .xdg import env_path

    env_file = env_path("CUDAPKGS_CONFIG", env)  # a relative one is refused (read from the working directory)
    if env_file:
        apply_file(env_file, f"{env_file} (from CUDAPKGS_CONFIG)", f"environment: file {env_file} ($CUDAPKGS_CONFIG)")
    if file is not None:
        apply_file(os.fspath(file), os.fspath(file), f"file {os.fspath(file)} (--config)")
    if overrides:
        config = config.merged(overrides, source="import_pkgs(config=…)")
        where.update({key: "import_pkgs(config=…)" for key in overrides})
    for assignment in sets:
        key, value = parse_set(assignment)
        config = config.merged({key: value}, source="--set")
        where[key] = "--set"
    for key, variable in ENV_FALLBACKS.items():
        if config[key] is None and env.get(variable):
            where[key] = f"environment (${variable})"
    return config


_SIZE_RE = LazyPattern(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?i?B?)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


def parse_size(text: str | int) -> int:
    """``"5GiB"`` -> 5368709120, ``"500MB"`` -> 500000000, ``"0"`` -> 0 (bytes; IEC and SI units).

    Raises ConfigError for anything else.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise errors.ConfigError(f"a size cannot be negative: {text}")
        return text
    match = _SIZE_RE.fullmatch(str(text))
    unit = (match.group(2) or "").lower() if match else None
    if match is None or unit not in _UNITS:
        raise errors.ConfigError(f"{text!r} is not a size; use bytes or a unit, e.g. 500MiB, 5GiB, 2GB")
    return int(float(match.group(1)) * _UNITS[unit])
