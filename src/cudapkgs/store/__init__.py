"""The content-addressed store: paths, NAR hashing, metadata, locks, GC.

Import the pieces from their modules (`cudapkgs.store.store.Store`, ...); this
package module stays empty so that importing the CLI stays cheap.
"""


def open_store(config=None):
    """The store a configuration names: `storeDir`, else $CUDAPKGS_STORE, else the XDG data dir."""
    from .location import default_store_dir
    from .store import Store

    return Store.open(default_store_dir(config))
