"""The content-addressed store: paths, NAR hashing, metadata, locks, GC.

Import the pieces from their modules (`cudapkgs.store.store.Store`, ...); this
package module stays empty so that importing the CLI stays cheap.
"""
