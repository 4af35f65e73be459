"""The user's base directories: ``$XDG_CONFIG_HOME``, ``$XDG_DATA_HOME``, ``$XDG_CACHE_HOME`` and home.

The XDG Base Directory Specification (version 0.8, "Environment variables") says that all
paths set in these variables must be absolute, and that a relative one is invalid and
should be ignored; the default then applies (``$HOME/.config``, ``$HOME/.local/share``,
``$HOME/.cache``). Taken as they were, a relative value was resolved against the working
directory, so a cloned repository supplied the user's configuration overlay and its own
allow records (issue 30, item 13). ``$HOME`` is used only when it is absolute too, else
the password database's home directory.

cudapkgs' own path variables (``CUDAPKGS_CONFIG``, ``CUDAPKGS_STORE``, ``CUDAPKGS_MANIFESTS``,
``CUDAPKGS_SOURCE_MIRRORS``, …: `PATH_VARIABLES`) are the same trap: a relative value set once
in a shell's profile is read from whatever directory a command runs in, a cloned repository's
included, which then chooses the store, the configuration (its overlays are Python files that
run) or the manifests.  They are read through `env_path` and `env_paths`, which refuse a relative
value with a one-line `ConfigError` naming the variable (unlike the XDG variables, no
specification says what to fall back to, and a silent fallback would build into another store
than the user named).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["DEFAULTS", "PATH_VARIABLES", "home", "base_dir", "required_dir", "env_path", "env_paths"]

#: Each variable's default under the home directory (XDG Base Directory Specification 0.8).
DEFAULTS = {
    "XDG_CONFIG_HOME": (".config",),
    "XDG_DATA_HOME": (".local", "share"),
    "XDG_CACHE_HOME": (".cache",),
    "XDG_STATE_HOME": (".local", "state"),
}


def home(env: Mapping[str, str] = os.environ) -> str | None:
    """The user's home directory: ``$HOME`` when it is absolute, else the password database's
    entry for the effective user when that is absolute, else None (a relative home would be
    read from the working directory). An `env` without HOME falls back to the process's."""
    value = env.get("HOME", os.environ.get("HOME", ""))
    if os.path.isabs(value):
        return value
    try:
        import pwd

        value = pwd.getpwuid(os.geteuid()).pw_dir
    except (ImportError, KeyError):
        return None
    return value if os.path.isabs(value) else None


def base_dir(variable: str, env: Mapping[str, str] = os.environ) -> str | None:
    """The directory `variable` (a key of `DEFAULTS`) names when it is absolute, else its default
    under `home`; None when neither is absolute. Raises KeyError for an unknown variable."""
    default = DEFAULTS[variable]
    value = env.get(variable, "")
    if os.path.isabs(value):
        return value
    root = home(env)
    return os.path.join(root, *default) if root is not None else None


def required_dir(variable: str, env: Mapping[str, str] = os.environ) -> str:
    """`base_dir`, or `ConfigError` saying that there is no home directory to put it under."""
    found = base_dir(variable, env)
    if found is None:
        from .errors import ConfigError

        raise ConfigError(f"${variable} is unset or relative and there is no home directory (HOME is not an "
                          f"absolute path, nor the password database's): set {variable} to an absolute directory")
    return found


#: cudapkgs' environment variables that name files or directories (read through `env_path` or
#: `env_paths`): each must be absolute.
PATH_VARIABLES = ("CUDAPKGS_CONFIG", "CUDAPKGS_STORE", "CUDAPKGS_MANIFESTS", "CUDAPKGS_SOURCE_MIRRORS",
                  "CUDAPKGS_SOURCES", "CUDAPKGS_PATCHELF", "CUDAPKGS_SIGN_KEY_FILE", "CUDAPKGS_WORKER_STORE")


def _is_scheme(text: str) -> bool:
    """Whether `text` is a URI scheme name (RFC 3986, section 3.1: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ))."""
    return text[:1].isalpha() and text.isascii() and all(c.isalnum() or c in "+-." for c in text)


def _refuse_relative(variable: str, value: str, entry: str | None = None) -> None:
    from .errors import ConfigError, shown

    which = (f"holds the relative path '{shown(entry)}'" if entry is not None
             else f"is the relative path '{shown(value)}'")
    raise ConfigError(f"${variable} {which}, which would be read from the working directory (a cloned "
                      f"repository's, wherever you run cudapkgs): set it to an absolute path, or unset it")


def _absolute(value: str, env: Mapping[str, str]) -> str | None:
    """`value` with a leading ``~`` or ``~/`` made the `home` directory; None when not absolute then."""
    if value == "~" or value.startswith("~/"):
        root = home(env)
        if root is None:
            return None
        value = root + value[1:]
    return value if os.path.isabs(value) else None


def env_path(variable: str, env: Mapping[str, str] = os.environ) -> str | None:
    """The absolute path the environment variable `variable` names (``~`` expanded), or None when
    it is unset or empty.

    Raises `ConfigError` naming the variable when its value is relative (``store``, ``./x``,
    ``~user/x``): it would be resolved against the working directory (see the module docstring).
    """
    value = env.get(variable, "")
    if not value:
        return None
    found = _absolute(value, env)
    if found is None:
        _refuse_relative(variable, value)
    return found


def env_paths(variable: str, env: Mapping[str, str] = os.environ, *, urls: bool = False) -> list[str]:
    """The entries of the ``os.pathsep``-separated list in `variable` (empty entries skipped), each
    an absolute path (``~`` expanded); with `urls`, an entry holding ``://`` is a URL and kept as it is
    (its ``scheme:`` is not taken for a separator), but a ``file://`` URL's path must be absolute too.
    [] when unset or empty.

    Raises `ConfigError` naming the variable and the first relative entry.
    """
    pieces = env.get(variable, "").split(os.pathsep)
    if urls:  # "https://host/x" split at ":" is "https" and "//host/x": joined again
        joined: list[str] = []
        for piece in pieces:
            if joined and piece.startswith("//") and _is_scheme(joined[-1]):
                joined[-1] += ":" + piece
            else:
                joined.append(piece)
        pieces = joined
    found = []
    for entry in pieces:
        if not entry:
            continue
        if urls and "://" in entry:
            if entry.startswith("file://") and not os.path.isabs(entry.removeprefix("file://")):
                _refuse_relative(variable, env[variable], entry)
            found.append(entry)
            continue
        path = _absolute(entry, env)
        if path is None:
            _refuse_relative(variable, env[variable], entry)
        found.append(path)
    return found
