"""The user's base directories: ``$XDG_CONFIG_HOME``, ``$XDG_DATA_HOME``, ``$XDG_CACHE_HOME`` and home.

The XDG Base Directory Specification (version 0.8, "Environment variables") says that all
paths set in these variables must be absolute, and that a relative one is invalid and
should be ignored; the default then applies (``$HOME/.config``, ``$HOME/.local/share``,
``$HOME/.cache``). Taken as they were, a relative value was resolved against the working
directory, so a cloned repository supplied the user's configuration overlay and its own
allow records (issue 30, item 13). ``$HOME`` is used only when it is absolute too, else
the password database's home directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["DEFAULTS", "home", "base_dir", "required_dir"]

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
