"""The Python API of cudapkgs: what package files, overlays and programs import.

    from cudapkgs.api import import_pkgs, lazy, mk_derivation

Every name here is also ``cudapkgs.NAME`` (``cudapkgs.import_pkgs``), except `realise`, since
``cudapkgs.realise`` is the package that builds.  The names are the library's own objects,
imported on first use (``from cudapkgs.api import lazy`` loads the evaluation language
alone).  Other modules of cudapkgs are internal: their paths may move (old paths:
`cudapkgs.old_paths`).  Every error a user can cause is a `CudapkgsError`, whose message is
one line naming the input, the reason and what to do.

Evaluating
----------
import_pkgs(config=None, system=None, *, overlays=(), config_file=None, sets=()) -> Scope
    Nixpkgs' ``import <nixpkgs> { config; system; overlays; }``: the lazy top level.
    `config` is a mapping of configuration keys (``cudaCapabilities``, ``allowUnfree``, ...),
    layered over ``~/.config/cudapkgs/config.toml``, ``$CUDAPKGS_CONFIG`` and `config_file`;
    `sets` are ``KEY=VALUE`` strings (TOML values) on top; `system` a Nix system
    (``x86_64-linux``; default this machine's); `overlays` are ``(final, prev) -> mapping``
    functions.  Equal arguments give the same object.  Raises `ConfigError` for an unknown
    key or a wrongly typed value, `UsageError` for an unknown system.
Scope
    The class of package sets (``pkgs``, ``pkgs.cudaPackages_12_8``): a lazy, immutable
    mapping.  ``scope.call_package(fn, overrides=None, **kw)`` calls `fn` with its parameters
    taken by name from `kw`/`overrides`, then the scope, then the defaults, and makes the
    result overridable (``.override(**args)``); `MissingArgumentError` names a parameter the
    scope lacks.  ``scope.override_scope(lambda final, prev: {...})`` returns a new scope.
AttrSet
    The lazy attribute set (Nix's ``{ ... }``): ``s.name`` or ``s["name"]`` forces the value,
    `AttributeMissingError` (an `AttributeError`) names a missing one with near spellings.
lazy(fn, label="") -> Thunk
    Delays ``fn()`` (no arguments) until the value is read; put it where an attribute
    reads ``final``/``prev`` or another package, so that the fixed point can form.  A value
    that needs itself raises `InfiniteRecursionError` naming the cycle.
Package
    The class of packages: ``pkg.version``, ``pkg.meta``, ``pkg.outPath`` (str),
    ``pkg.override(**args)``, ``pkg.override_attrs(mapping | prev -> mapping |
    (final, prev) -> mapping)``.

Writing packages
----------------
mk_derivation(pkgs_or_config, attrs, *, system=None, name="") -> Package
    Nixpkgs' ``stdenv.mkDerivation``.  `attrs` is a mapping or ``final -> mapping``
    (``finalAttrs``): ``pname``/``version`` (or ``name``), ``src`` (a local path, hashed, or
    a fetcher's package), the phases (``buildPhase`` ... as shell strings or Python
    callables), ``nativeBuildInputs``/``buildInputs``/``propagated*`` (packages),
    ``outputs``, ``env``, ``meta``, ``passthru`` and any other attribute (handed to the
    build as JSON).  The host compiler is stdenv.cc.  `EvalError` for bad attributes,
    raised when the derivation is read.
build_python_package(config, python, attrs, *, system=None) -> Package
    ``python3Packages.buildPythonPackage`` (in a package file take ``python3Packages`` as a
    parameter and call its ``buildPythonPackage(attrs)``): mk_derivation's `attrs` plus
    ``dependencies``, ``build-system``, ``pythonImportsCheck`` and ``format``
    (``"pyproject"``, ``"setuptools"`` or ``"wheel"``; `EvalError` for another).
    ``dependencies`` and ``build-system`` may be ``lazy(lambda: [...])``: made when the
    derivation is, so the package and its meta are read without them (as Nix's lists).
with_packages(config, python, packages, *, system=None) -> Package
    ``python3Packages.withPackages``: ``bin/python3`` with `packages` importable.
fetchurl(pkgs, *, url=None | urls=[...], hash= | sha256= | sha512=, name=None, executable=False) -> Package
    Nixpkgs' ``fetchurl`` (``pkgs.fetchurl(url=..., hash=...)``, or a package file's
    ``fetchurl`` parameter, is this bound to the top level): one file, a fixed output named
    by its hash (SRI ``sha256-...``, hex or Nix base-32).  An empty hash builds to a
    mismatch that prints the real one.  `EvalError` for no URL, a scheme other than
    http(s)/file, two hashes, a malformed hash or an unsupported Nixpkgs option.
fetch_from_github(pkgs, *, owner, repo, tag= | rev=, hash=, name="source") -> Package
    Nixpkgs' ``fetchFromGitHub`` (``pkgs.fetchFromGitHub``): the tree at `tag` or `rev`,
    `hash` the NAR hash of the unpacked tree as Nixpkgs gives it.  `EvalError` for both or
    neither of rev/tag, a name that is no GitHub name, a malformed hash.
fetch_pypi(pkgs, *, pname, version, hash=, format="setuptools" | "wheel", ...) -> Package
    Nixpkgs' ``fetchPypi`` (``pkgs.fetchPypi``): the sdist, or with ``format="wheel"`` (and
    ``python=``, ``abi=``, ``platform=``) the wheel, downloaded by pip and checked against
    `hash`.  `EvalError` for a malformed project name, version, hash or tag.
get_output(pkg, *outputs), get_dev(pkg), get_lib(pkg), get_bin(pkg), get_include(pkg), get_static(pkg)
    Nixpkgs' ``lib.getOutput``/``getDev``/...: the chosen outputs of `pkg` as an input-list
    item (a bare package in ``buildInputs`` gives its ``dev`` output, else its first).
version_older(a, b) -> bool, version_at_least(a, b) -> bool
    ``lib.versionOlder`` / ``lib.versionAtLeast`` on version strings (Nix's
    ``builtins.compareVersions`` order).
licenses
    Nixpkgs' ``lib.licenses`` (``licenses.mit``, ``licenses.bsd3``, ``licenses.nvidiaCuda``)
    for ``meta.license``.

Building
--------
Store
    A store on disk.  ``Store.open(root=None, *, read_only=False)`` opens (creating) the store
    at `root`, ``$CUDAPKGS_STORE`` or ``~/.local/share/cudapkgs/store``; a store others can
    write is refused.  ``store.is_valid(path)``, ``store.query(path)``, ``store.closure(paths)``,
    ``store.references(path)``, ``store.gc(dry_run=False)``.  `StoreError` names the store
    and the reason.
open_store(config=None) -> Store
    The store a configuration names (``storeDir``, else ``$CUDAPKGS_STORE``, else the default).
realise(store, derivations, **options) -> list[str]
    Builds every missing derivation of the closures of `derivations` (``pkg.derivation``)
    in dependency order, into `store`; returns their output paths.  `BuildError` names the
    failed derivation and its log.  (``cudapkgs.api.realise`` only.)
open_cache(url) -> Cache
    A binary cache: ``file:///dir``, ``http(s)://host/prefix`` or ``s3://bucket?...``
    (docs/binary-caches.md); `StoreError` (a ``CacheError``) for an unknown scheme.
    ``cache.narinfo(path)`` (None when absent), ``cache.upload_closure(store, paths,
    secret_key=...)``, ``cache.substitute(store, path, trusted_keys=[...])``.
SecretKey, PublicKey
    Ed25519 keys in Nix's ``name:base64`` form: ``SecretKey.load(path)``,
    ``SecretKey.parse(text)``, ``key.public()``, ``PublicKey.parse("lab-1:...")``; a malformed
    key is a `CudapkgsError` naming where it came from.

Errors
------
CudapkgsError
    Base of every error cudapkgs reports (``exit_code`` 1; 2 for `UsageError`).
UsageError
    A wrong use: an unknown system, a malformed command line.
ConfigError
    The configuration is invalid: an unknown key (with near spellings) or a wrongly typed value.
EvalError
    Evaluating failed; the kinds below are `EvalError`s.
AttributeMissingError
    An attribute path names nothing; also an `AttributeError`.
InfiniteRecursionError
    A value needs itself; the message names the cycle.
MissingArgumentError
    `call_package` found no value for a parameter (in the scope or a default).
FailedAssertionsError
    Nixpkgs' assertion lists failed (``- message`` per line; ``hint`` says what would pass).
UnfreeLicenseError
    An unfree package was used without ``allowUnfree`` or ``allowUnfreePredicate``.
UnavailablePackageError
    A package cannot be used here: platform, broken, missing from a manifest.
UserFileError
    A package or overlay file failed: ``FILE:LINE: ...``.
ManifestError
    An NVIDIA manifest is missing, unreadable or malformed.
FetchError
    A download failed (``reasons``: each source's, when every one failed).
HashMismatchError
    A download's bytes do not have the declared hash (``expected``, ``actual``); nothing was kept.
StoreError
    The store refused an operation: a path not in it, no space, no permission.
BuildError
    A build failed; the message names the derivation and its log.
BuildFailed
    One or more builds failed (``failures``, each a `BuildError`; ``skipped`` not started).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed)
if TYPE_CHECKING:  # pragma: no cover - for type checkers: the names and where they live
    from typing import Any

    from . import licenses
    from .build_inputs import get_bin, get_dev, get_include, get_lib, get_output, get_static
    from .builders.python import build_python_package, with_packages
    from .errors import (
        AttributeMissingError,
        ConfigError,
        CudapkgsError,
        EvalError,
        FailedAssertionsError,
        FetchError,
        HashMismatchError,
        InfiniteRecursionError,
        ManifestError,
        MissingArgumentError,
        StoreError,
        UnavailablePackageError,
        UnfreeLicenseError,
        UsageError,
    )
    from .fetch.fetchurl import fetchurl
    from .fetch.github import fetch_from_github
    from .fetch.pypi import fetch_pypi
    from .lib.customisation import Scope
    from .lib.lazy import AttrSet, lazy
    from .lib.versions import version_at_least, version_older
    from .package import Package
    from .realise.errors import BuildError, BuildFailed
    from .realise.realise import realise
    from .stdenv import mk_derivation
    from .store import open_store
    from .store.caches import open_cache
    from .store.caches.signing import PublicKey, SecretKey
    from .store.store import Store
    from .top_level import import_pkgs
    from .user_files import UserFileError

from . import _API, _NOT_AT_TOP, _api_value

#: name -> the module that defines it (the table lives in ``cudapkgs/__init__``, which answers
#: ``cudapkgs.NAME`` from it without importing this module)
EXPORTS = _API
#: names that are this module's only: ``cudapkgs.realise`` is a package of cudapkgs
NOT_AT_TOP = _NOT_AT_TOP

__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module 'cudapkgs.api' has no attribute {name!r}")
    value = _api_value(name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
