"""The reference graph of a store, read in one pass, for commands that look at many paths.

`path-info -r -S`, `verify` and `gc` need the references (and sizes) of many or all
valid paths. Asking the database once per path and once per reference made them
quadratic (a closure walk per path with two queries per node). `StoreGraph.load`
reads the whole metadata with two queries instead, and answers closures and closure
sizes from memory:

* `closure(paths)` is one breadth-first walk over in-memory adjacency lists;
* `closure_sizes(paths)` gives every path's closure size at once. Each strongly
  connected component (outputs of one derivation may refer to one another) gets a
  bit set of its closure, built bottom-up in one pass over the component DAG; the
  size of a bit set is ``sum(2**k * popcount(mask & W_k))`` where ``W_k`` holds the
  paths whose NAR size has bit k set, so no closure is ever enumerated. For N paths
  that is O(E + N * N/64 * log2(max size)) machine-word operations, a few hundred
  milliseconds at worst (every path depending on every earlier one) for 5,000 paths.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from .db import PathInfo, StoreDB

__all__ = ["StoreGraph"]


class StoreGraph:
    """A snapshot of the valid paths and their references.

    `rows` maps each valid store path to ``(nar_hash, nar_size, deriver, registration_time)``;
    `refs` maps each valid path to its sorted references (which may name invalid paths
    in a damaged store: `verify` reports those).
    """

    def __init__(self, rows: dict[str, tuple[str, int, str | None, int]], refs: dict[str, tuple[str, ...]]) -> None:
        self.rows = rows
        self.refs = refs

    @classmethod
    def load(cls, db: StoreDB) -> StoreGraph:
        """Read every valid path and every reference with two queries (one snapshot: a read transaction)."""
        conn = db.conn
        conn.execute("BEGIN")
        try:
            rows = {p: (h, s, d, t) for p, h, s, d, t in conn.execute("SELECT path, hash, size, deriver, registration_time FROM ValidPaths")}
            lists: dict[str, list[str]] = {p: [] for p in rows}
            for referrer, reference in conn.execute("SELECT referrer, reference FROM Refs ORDER BY referrer, reference"):
                lists.setdefault(referrer, []).append(reference)
        finally:
            conn.execute("COMMIT")
        return cls(rows, {p: tuple(r) for p, r in lists.items()})

    def is_valid(self, path: str) -> bool:
        """Whether `path` was valid when the snapshot was taken."""
        return path in self.rows

    def info(self, path: str) -> PathInfo:
        """The `PathInfo` of a valid path (KeyError if it is not valid)."""
        h, s, d, t = self.rows[path]
        return PathInfo(path, h, s, self.refs.get(path, ()), d, t)

    def closure(self, paths: Iterable[str]) -> set[str]:
        """Every valid path reachable from `paths` (valid paths) through references, `paths` included."""
        todo = deque(paths)
        seen = set(todo)
        refs = self.refs
        while todo:
            for ref in refs.get(todo.popleft(), ()):
                if ref not in seen and ref in self.rows:
                    seen.add(ref)
                    todo.append(ref)
        return seen

    def closure_sizes(self, paths: Iterable[str]) -> dict[str, int]:
        """Each of `paths`' closure size in bytes: the sum of the NAR sizes of its closure (itself included).

        Works on the sub-graph reachable from `paths` only, so a small query on a big
        store stays small.
        """
        wanted = list(dict.fromkeys(paths))
        nodes = sorted(self.closure(wanted))
        index = {p: i for i, p in enumerate(nodes)}
        succ = [[index[r] for r in self.refs.get(p, ()) if r in index] for p in nodes]
        comp, order = _components(succ)  # order: components, each after every component it reaches
        members: list[list[int]] = [[] for _ in order]
        for node, c in enumerate(comp):
            members[c].append(node)
        masks: list[int] = [0] * len(order)
        for c in order:  # every edge out of a component goes to one completed before it
            mask = 0
            for node in members[c]:
                mask |= 1 << node
                for r in succ[node]:
                    if comp[r] != c:
                        mask |= masks[comp[r]]
            masks[c] = mask
        sizes = [self.rows[p][1] for p in nodes]
        weights = []  # (bit value, mask of nodes whose size has that bit)
        for bit in range(max(sizes, default=0).bit_length()):
            w = 0
            for node, size in enumerate(sizes):
                if size >> bit & 1:
                    w |= 1 << node
            if w:
                weights.append((1 << bit, w))
        result = {}
        by_comp: dict[int, int] = {}
        for p in wanted:
            c = comp[index[p]]
            if c not in by_comp:
                mask = masks[c]
                by_comp[c] = sum(value * (mask & w).bit_count() for value, w in weights)
            result[p] = by_comp[c]
        return result


def _components(succ: list[list[int]]) -> tuple[list[int], list[int]]:
    """Tarjan's strongly connected components, iteratively.

    Returns (component of each node, the component ids in the order they were completed);
    a component is completed only after every component it reaches, which is the order
    closure bit sets can be built in.
    """
    n = len(succ)
    comp = [-1] * n
    low = [0] * n
    num = [-1] * n
    stack: list[int] = []
    on_stack = [False] * n
    order: list[int] = []
    counter = 0
    for start in range(n):
        if num[start] != -1:
            continue
        work = [(start, 0)]
        num[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack[start] = True
        while work:
            node, i = work[-1]
            edges = succ[node]
            if i < len(edges):
                work[-1] = (node, i + 1)
                nxt = edges[i]
                if num[nxt] == -1:
                    num[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, 0))
                elif on_stack[nxt]:
                    low[node] = min(low[node], num[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == num[node]:
                cid = len(order)
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    comp[member] = cid
                    if member == node:
                        break
                order.append(cid)
    return comp, order
