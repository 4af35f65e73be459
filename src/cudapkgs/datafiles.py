"""The package's TOML data files, parsed once per installation rather than once per process.

``cudapkgs eval`` reads three TOML files (the sets, the component table, the capability
database); parsing them with ``tomllib`` is most of what a short command costs.  The
parsed value is kept as JSON under ``$XDG_CACHE_HOME/cudapkgs/data/`` (JSON: parsed by C
code, and unlike pickle or marshal it cannot run anything), keyed by the file's name,
size and modification time, so an edited file is parsed again.  Any problem with the
cache (unwritable, corrupt, stale) falls back to parsing the file.
"""

from __future__ import annotations

import json
import os
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["load_toml"]

#: The most a cached data file may hold (bytes): the parsed manifests and tables are a few MiB.
_CACHE_LIMIT = 256 << 20


def _cache_file(path: str | os.PathLike[str], stat: os.stat_result) -> str:
    """The cache file of the data file `path` as `stat` found it (os.path, not pathlib: `pathlib`
    with `urllib.parse` and `ipaddress` is about 2.7 ms of a cold ``eval``'s 30)."""
    from .xdg import required_dir  # a relative value, or a relative HOME, is ignored (issue 30, item 13)

    name = os.path.basename(os.path.normpath(os.fspath(path)))
    return os.path.join(required_dir("XDG_CACHE_HOME"), "cudapkgs", "data",
                        f"{name}.{stat.st_size}.{stat.st_mtime_ns}.json")


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML document at ``path`` (as ``tomllib.load`` gives it; the data files hold no
    dates or times, which JSON could not carry)."""
    path = os.fspath(path)
    stat = os.stat(path)
    cache = _cache_file(path, stat)
    try:
        from .inputs import read_cached

        # a FIFO or device there is a miss, never a hang; so is a file of another user's (or one others can write):
        # the parsed package sets and component table are believed as they are
        data = json.loads(read_cached(cache, _CACHE_LIMIT, owned=True))
        if isinstance(data, dict):
            return data
    except (OSError, ValueError):
        pass
    import tomllib

    with open(path, "rb") as f:
        data = tomllib.load(f)
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        from .atomic_files import write_atomically

        write_atomically(cache, json.dumps(data), sync=False)
    except (OSError, TypeError, ValueError):
        pass  # the cache is an optimisation only
    return data
