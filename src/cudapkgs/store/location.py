"""Where the store lives: `storeDir`, $CUDAPKGS_STORE, else the XDG data directory.

Kept apart from the path arithmetic (`store.paths`) so that an evaluation, which needs only
the directory, imports neither hashlib nor the database.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any


def default_store_dir(config: Any = None, env: Mapping[str, str] = os.environ) -> str:
    """The store directory: config `storeDir`, else $CUDAPKGS_STORE, else the XDG data dir.

    Raises `ConfigError` when $CUDAPKGS_STORE is a relative path (`xdg.env_path`) or there is no home."""
    configured = config.storeDir if config is not None else None
    if configured:
        return os.path.abspath(configured)
    from ..xdg import env_path, required_dir  # a relative XDG value, or a relative HOME, is ignored

    named = env_path("CUDAPKGS_STORE", env)  # a relative one is refused: it would be the working directory's
    if named:
        return os.path.normpath(named)

    return os.path.join(required_dir("XDG_DATA_HOME", env), "cudapkgs", "store")
