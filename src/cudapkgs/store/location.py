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
    """The store directory: config `storeDir`, else $CUDAPKGS_STORE, else the XDG data dir."""
    configured = config.storeDir if config is not None else None
    if configured:
        return os.path.abspath(configured)
    if env.get("CUDAPKGS_STORE"):
        return os.path.abspath(env["CUDAPKGS_STORE"])
    from ..xdg import required_dir  # a relative value, or a relative HOME, is ignored (issue 30, item 13)

    return os.path.join(required_dir("XDG_DATA_HOME", env), "cudapkgs", "store")
