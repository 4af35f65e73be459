"""Where the bytes of a closure go: each path's NAR size, its share, and why it is in the closure.

`path-info --weights` (a table) and `path-info --draw FILE` (a treemap, `store.treemap`) read this.
The "why" of a path is the shortest chain of references from a root to it, the chain
`why-depends ROOT PATH` prints first when the root's references are tried in sorted order
(the files holding each hash are left to `why-depends`: finding them reads the paths' contents).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .graph import StoreGraph
from .paths import hash_part

__all__ = ["Weight", "closure_weights", "short_names"]


@dataclass(frozen=True)
class Weight:
    """One path of a closure.

    `nar_size` in bytes; `share` and `cumulative` are fractions (0..1) of the closure's total
    NAR size, `cumulative` summing this path and every heavier one before it in the order
    `closure_weights` returns; `chain` runs from a root to this path (a root's chain is itself).
    """

    path: str
    nar_size: int
    share: float
    cumulative: float
    chain: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        """The JSON object `path-info --weights --json` prints for this path."""
        return {"path": self.path, "narSize": self.nar_size, "share": self.share,
                "cumulativeShare": self.cumulative, "chain": list(self.chain)}


def closure_weights(graph: StoreGraph, roots: Sequence[str]) -> list[Weight]:
    """Every path of the closure of `roots` (valid paths), heaviest first (ties by path).

    Chains come from one breadth-first walk from all roots at once, roots and references
    taken in order (references are sorted), so each path gets a shortest chain from the
    nearest root and the same store always gives the same chains. KeyError for a root
    that is not valid in `graph`. An empty closure cannot occur (roots are in it); a closure
    whose total size is 0 gets shares of 0.
    """
    roots = list(dict.fromkeys(roots))
    for root in roots:
        graph.rows[root]  # KeyError: not valid
    parent: dict[str, str | None] = {root: None for root in roots}
    todo = deque(roots)
    while todo:
        node = todo.popleft()
        for ref in graph.refs.get(node, ()):
            if ref not in parent and ref in graph.rows:
                parent[ref] = node
                todo.append(ref)
    sizes = {path: graph.rows[path][1] for path in parent}
    total = sum(sizes.values())
    order = sorted(parent, key=lambda p: (-sizes[p], p))
    weights, running = [], 0
    for path in order:
        running += sizes[path]
        chain = [path]
        while (up := parent[chain[-1]]) is not None:
            chain.append(up)
        weights.append(Weight(path, sizes[path], sizes[path] / total if total else 0.0,
                              running / total if total else 0.0, tuple(reversed(chain))))
    return weights


def short_names(paths: Sequence[str]) -> dict[str, str]:
    """A short label for each store path: its name after the hash (``/s/abc…-libcublas-13.1`` ->
    ``libcublas-13.1``), with the first 8 characters of the hash kept where two paths share a name."""
    names = {p: p.rsplit("/", 1)[-1].split("-", 1)[-1] for p in paths}
    count: dict[str, int] = {}
    for name in names.values():
        count[name] = count.get(name, 0) + 1
    return {p: name if count[name] == 1 else f"{hash_part(p)[:8]}-{name}" for p, name in names.items()}
