"""Reference cycles between store paths registered together, refused as Nix refuses them.

A path may refer to itself; a set of paths whose references (among the set) form a cycle
cannot be registered: Nix's ``LocalStore::registerValidPaths`` topologically sorts what it
registers and throws "cycle detected in the references of '<path>' from '<parent>'"
(src/libstore/local-store.cc), and a build whose outputs refer to each other fails with
"cycle detected in the references of output 'dev' from output 'out'" (its output
registration does the same sort over the outputs).  A substitution or an import of such
paths would otherwise wait on each other forever, each for the other to be valid first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import StoreError

__all__ = ["ReferenceCycleError", "find_cycle", "topological_order"]


class ReferenceCycleError(StoreError):
    """Paths registered together refer to each other in a cycle.

    ``path`` is reached again from ``parent`` (both are keys of the references given).
    """

    def __init__(self, message: str, path: str, parent: str) -> None:
        super().__init__(message)
        self.path, self.parent = path, parent


def _visit(refs_of: Mapping[str, Iterable[str]]) -> tuple[list[str], tuple[str, str] | None]:
    """Depth first over the keys in sorted order: (the keys, references first; the first cycle met)."""
    edges = {p: sorted(r for r in refs if r != p and r in refs_of) for p, refs in refs_of.items()}
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(edges):
        if start in state:
            continue
        state[start] = 1
        stack = [(start, iter(edges[start]))]
        while stack:
            node, refs = stack[-1]
            for ref in refs:
                seen = state.get(ref)
                if seen == 1:
                    return order, (ref, node)
                if seen is None:
                    state[ref] = 1
                    stack.append((ref, iter(edges[ref])))
                    break
            else:
                stack.pop()
                state[node] = 2
                order.append(node)
    return order, None


def find_cycle(refs_of: Mapping[str, Iterable[str]]) -> tuple[str, str] | None:
    """``(path, parent)`` of a reference cycle among the keys of ``refs_of`` (path -> the paths it
    refers to; references outside the keys and self-references are ignored), or None."""
    return _visit(refs_of)[1]


def topological_order(refs_of: Mapping[str, Iterable[str]], names: Mapping[str, str] | None = None) -> list[str]:
    """The keys of ``refs_of`` with every path after the paths it refers to (among the keys).

    Raises `ReferenceCycleError` with Nix's message when they refer to each other in a cycle;
    with ``names`` (path -> output name, for a derivation's outputs) the message names the outputs.
    """
    order, cycle = _visit(refs_of)
    if cycle is None:
        return order
    path, parent = cycle
    if names is not None and path in names and parent in names:
        message = f"cycle detected in the references of output '{names[path]}' from output '{names[parent]}'"
    else:
        message = f"cycle detected in the references of '{path}' from '{parent}'"
    raise ReferenceCycleError(message, path, parent)
