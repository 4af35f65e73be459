"""The house read from its imports: modules, rooms (top-level folders and flat modules), floors.

Reads `src/cudapkgs` with `ast` only (nothing is imported or run), so it works on any
checkout. `tests/test_layout.py` holds the rules against it (no circles, doors one way,
`lib/` alone, the command line a room nobody enters); `python tools/layout.py --svg FILE`
draws the rooms and their doors for docs/architecture.md.

    python tools/layout.py            # rooms by floor, top first, with their doors
    python tools/layout.py --svg docs/rooms.svg
"""

from __future__ import annotations

import argparse
import ast
import html
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "cudapkgs"
SRC = Path(__file__).resolve().parents[1] / "src"
# Front doors: the package module and __main__ open onto the rooms; no room may import them.
FRONT = frozenset({PACKAGE, f"{PACKAGE}.__main__", f"{PACKAGE}.api"})


@dataclass
class Import:
    """One import of a cudapkgs module by another: where it is, and the names it takes."""

    importer: str
    target: str
    line: int
    names: tuple[str, ...] = ()


@dataclass
class House:
    """Modules (dotted names -> file), their imports, and the rooms they make."""

    modules: dict[str, Path]
    imports: list[Import] = field(default_factory=list)

    def edges(self) -> dict[str, set[str]]:
        """module -> modules it imports (cudapkgs' own only)."""
        out: dict[str, set[str]] = defaultdict(set)
        for imp in self.imports:
            out[imp.importer].add(imp.target)
        return out

    def room_edges(self) -> dict[str, set[str]]:
        """room -> rooms it imports; front doors are left out."""
        out: dict[str, set[str]] = defaultdict(set)
        for imp in self.imports:
            if imp.importer in FRONT or imp.target in FRONT:
                continue
            a, b = room_of(imp.importer), room_of(imp.target)
            if a != b:
                out[a].add(b)
        return out

    def rooms(self) -> dict[str, list[str]]:
        """room -> its modules."""
        out: dict[str, list[str]] = defaultdict(list)
        for module in self.modules:
            if module not in FRONT:
                out[room_of(module)].append(module)
        return dict(out)

    def lines(self, module: str) -> int:
        return len(self.modules[module].read_text(encoding="utf-8").splitlines())


def room_of(module: str) -> str:
    """`cudapkgs.store.caches.http` -> "store"; a flat module is its own room."""
    parts = module.split(".")
    return module if len(parts) == 1 else parts[1]


def read_house(src: Path = SRC) -> House:
    """Every module under `src/cudapkgs` and every import of a cudapkgs module in it,
    at any depth (inside functions and `if TYPE_CHECKING:` too: they are dependencies all the same)."""
    modules: dict[str, Path] = {}
    packages: set[str] = set()
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            packages.add(".".join(parts))
        modules[".".join(parts)] = path
    house = House(modules)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            for target, names in _targets(node, module, module in packages, modules):
                if target != module and not module.startswith(target + "."):
                    house.imports.append(Import(module, target, node.lineno, names))
    return house


def _targets(node: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> list[tuple[str, tuple[str, ...]]]:
    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        found = [known(alias.name) for alias in node.names if alias.name.split(".")[0] == PACKAGE]
        return [(t, ()) for t in found if t]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        name = ".".join(base + ([node.module] if node.module else []))
    else:
        name = node.module or ""
    if name.split(".")[0] != PACKAGE:
        return []
    out: list[tuple[str, tuple[str, ...]]] = []
    plain: list[str] = []
    for alias in node.names:
        if f"{name}.{alias.name}" in modules:
            out.append((f"{name}.{alias.name}", ()))
        else:
            plain.append(alias.name)
    if plain:
        target = known(name)
        if target:
            out.append((target, tuple(plain)))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {b for bs in graph.values() for b in bs})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def floors(graph: dict[str, set[str]], nodes: set[str]) -> dict[str, int]:
    """Floor 0 imports no other room; a room's floor is one above the highest it imports.
    Needs an acyclic graph (`cycles` empty)."""
    memo: dict[str, int] = {}

    def floor(node: str, seen: tuple[str, ...] = ()) -> int:
        if node in memo:
            return memo[node]
        if node in seen:
            raise ValueError(f"circle through {node}")
        below = [floor(b, (*seen, node)) for b in graph.get(node, ()) if b in nodes]
        memo[node] = 1 + max(below) if below else 0
        return memo[node]

    return {node: floor(node) for node in nodes}


def svg(house: House) -> str:
    """The rooms as boxes on their floors (top floor at the top), doors as arrows downwards."""
    graph = house.room_edges()
    rooms = house.rooms()
    level = floors(graph, set(rooms))
    by_floor: dict[int, list[str]] = defaultdict(list)
    for room, f in level.items():
        by_floor[f].append(room)
    top = max(by_floor)
    box_w, box_h, gap_x, gap_y, margin = 150, 34, 18, 56, 20
    widest = max(len(v) for v in by_floor.values())
    width = margin * 2 + widest * box_w + (widest - 1) * gap_x
    height = margin * 2 + (top + 1) * box_h + top * gap_y + 24
    where: dict[str, tuple[float, float]] = {}
    for f, names in by_floor.items():
        names.sort()
        row_w = len(names) * box_w + (len(names) - 1) * gap_x
        x0 = (width - row_w) / 2
        y = margin + 24 + (top - f) * (box_h + gap_y)
        for i, name in enumerate(names):
            where[name] = (x0 + i * (box_w + gap_x), y)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="12">',
        '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#889"/></marker></defs>',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{margin}" y="{margin + 4}" font-size="13" font-weight="bold">cudapkgs: rooms by floor, '
        f'imports as arrows (always downwards); generated by tools/layout.py</text>',
    ]
    for a in sorted(graph):
        for b in sorted(graph[a]):
            (xa, ya), (xb, yb) = where[a], where[b]
            out.append(f'<line x1="{xa + box_w / 2:.0f}" y1="{ya + box_h:.0f}" x2="{xb + box_w / 2:.0f}" '
                       f'y2="{yb:.0f}" stroke="#99a" stroke-opacity="0.55" marker-end="url(#a)"/>')
    for name, (x, y) in sorted(where.items()):
        modules = rooms[name]
        size = sum(house.lines(m) for m in modules)
        label = f"{name}/" if len(modules) > 1 or house.modules[modules[0]].name == "__init__.py" else name
        fill = "#e8f0ff" if label.endswith("/") else "#f4f4f4"
        out.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{box_w}" height="{box_h}" rx="5" fill="{fill}" stroke="#557"/>')
        out.append(f'<text x="{x + box_w / 2:.0f}" y="{y + 15:.0f}" text-anchor="middle">{html.escape(label)}</text>')
        out.append(f'<text x="{x + box_w / 2:.0f}" y="{y + 28:.0f}" text-anchor="middle" font-size="10" '
                   f'fill="#666">{len(modules)} module(s), {size} lines</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--svg", metavar="FILE", help="write the picture of rooms and doors to FILE")
    args = parser.parse_args(argv)
    house = read_house()
    graph = house.room_edges()
    circles = cycles(house.edges()) + cycles(graph)
    if circles:
        for circle in circles:
            print("circle:", " -> ".join(circle))
        return 1
    rooms = house.rooms()
    level = floors(graph, set(rooms))
    for room in sorted(rooms, key=lambda r: (-level[r], r)):
        print(f"floor {level[room]:2}  {room:14} -> {', '.join(sorted(graph.get(room, ()))) or '(nothing)'}")
    if args.svg:
        Path(args.svg).write_text(svg(house), encoding="utf-8")
        print(f"wrote {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
