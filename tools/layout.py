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
import itertools
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


_DYNAMIC = frozenset({"import_module", "__import__"})


def _dynamic_name(node: ast.Call, module: str, is_package: bool) -> str | None:
    """The module an ``importlib.import_module(NAME[, package])`` or ``__import__(NAME, …)`` call
    names, as far as it is written out: a string constant, or the constant start of an
    f-string up to its last dot (``f"cudapkgs.pkgs.{name}"`` is a door to ``cudapkgs.pkgs``).
    A relative name counts from ``package=__name__`` (the only package such calls here give).
    A name held in a variable cannot be read: those calls stay unseen."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if called not in _DYNAMIC or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        name = first.value
    elif isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
        name = str(first.values[0].value).rpartition(".")[0] + ("." if "." in str(first.values[0].value) else "")
        name = name if name.strip(".") else "." * len(name)
    else:
        return None
    if name.startswith(".") and called == "import_module":
        level = len(name) - len(name.lstrip("."))
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - level + 1]
        name = ".".join(base + ([name.lstrip(".").rstrip(".")] if name.strip(".") else []))
    return name.rstrip(".") or None


def _targets(node: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> list[tuple[str, tuple[str, ...]]]:
    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        found = [known(alias.name) for alias in node.names if alias.name.split(".")[0] == PACKAGE]
        return [(t, ()) for t in found if t]
    if isinstance(node, ast.Call):
        named = _dynamic_name(node, module, is_package)
        target = known(named) if named and named.split(".")[0] == PACKAGE else None
        return [(target, ())] if target else []
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


def reduction(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The transitive reduction of an acyclic graph: a -> b is left out where another path leads from a to b."""

    def reachable(start: str, without: str) -> set[str]:
        seen: set[str] = set()
        todo = [n for n in graph.get(start, ()) if n != without]
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return seen

    return {a: {b for b in bs if b not in reachable(a, b)} for a, bs in graph.items()}


def _centres(names: list[str], width: dict[str, float], gap: float) -> dict[str, float]:
    """The x of each node's centre when `names` stand in a row in this order, centred on 0."""
    total = sum(width[n] for n in names) + gap * (len(names) - 1)
    out, x = {}, -total / 2
    for n in names:
        out[n] = x + width[n] / 2
        x += width[n] + gap
    return out


def _order(rows: dict[int, list[str]], up: dict[str, list[str]], down: dict[str, list[str]],
           width: dict[str, float], gap: float, sweeps: int = 12) -> None:
    """Orders each floor's nodes (in place) to cross fewer arrows: sweeps down and up the floors,
    each node placed at the mean x of its neighbours on the floors above and below (Sugiyama's
    barycentre heuristic, on the drawn positions; a hub such as errors.py would otherwise pull
    a whole floor onto one x).  Ties keep the earlier order, so the drawing is the same every time."""
    level = {n: f for f, names in rows.items() for n in names}
    for sweep in range(sweeps):
        for f in sorted(rows, reverse=sweep % 2 == 0):
            where = {n: x for g in (f - 1, f + 1) if g in rows for n, x in _centres(rows[g], width, gap).items()}
            before = _centres(rows[f], width, gap)
            index = {n: k for k, n in enumerate(rows[f])}

            def centre(node: str, f: int = f, where: dict[str, float] = where, before: dict[str, float] = before,
                       index: dict[str, int] = index) -> tuple[float, int]:
                near = [where[n] for n in (*up.get(node, ()), *down.get(node, ())) if level[n] != f]
                return (sum(near) / len(near) if near else before[node]), index[node]

            rows[f].sort(key=centre)


def _untangle(rows: dict[int, list[str]], up: dict[str, list[str]], down: dict[str, list[str]], passes: int = 8) -> None:
    """Swaps neighbours in a row (in place) while that crosses fewer arrows to the floors above
    and below (the greedy switch that follows the barycentre ordering in Sugiyama's method)."""
    level = {n: f for f, names in rows.items() for n in names}

    def crossings(u: str, v: str, index: dict[str, int]) -> int:  # with u left of v
        count = 0
        for links in (up, down):
            for a in links.get(u, ()):
                for b in links.get(v, ()):
                    if level[a] == level[b] and level[a] != level[u] and index[a] > index[b]:
                        count += 1
        return count

    for _ in range(passes):
        changed = False
        index = {n: k for names in rows.values() for k, n in enumerate(names)}
        for names in rows.values():
            for i in range(len(names) - 1):
                u, v = names[i], names[i + 1]
                if crossings(v, u, index) < crossings(u, v, index):
                    names[i], names[i + 1] = v, u
                    index[u], index[v] = i + 1, i
                    changed = True
        if not changed:
            return


def _place(rows: dict[int, list[str]], up: dict[str, list[str]], down: dict[str, list[str]],
           width: dict[str, float], gap: float, rounds: int = 6) -> dict[str, float]:
    """The x of every node's centre: each as near as its row allows to the mean x of its
    neighbours on the floors above and below, in the row's order, the rows no wider than the
    widest packed one and each centred; rounds alternate top-down and bottom-up."""
    x = {n: c for names in rows.values() for n, c in _centres(names, width, gap).items()}
    half = max(sum(width[n] for n in names) + gap * (len(names) - 1) for names in rows.values()) / 2
    level = {n: f for f, names in rows.items() for n in names}
    for r in range(rounds):
        for f in sorted(rows, reverse=r % 2 == 0):
            names = rows[f]
            want = []
            for n in names:
                near = [x[m] for m in (*up.get(n, ()), *down.get(n, ())) if level[m] != f]
                want.append(sum(near) / len(near) if near else x[n])
            for i, n in enumerate(names):  # left to right: no overlap, nothing past the left edge
                low = -half + width[n] / 2 if i == 0 else want[i - 1] + (width[names[i - 1]] + width[n]) / 2 + gap
                want[i] = max(want[i], low)
            for i in range(len(names) - 1, -1, -1):  # right to left: nothing past the right edge
                n = names[i]
                high = half - width[n] / 2 if i == len(names) - 1 else want[i + 1] - (width[names[i + 1]] + width[n]) / 2 - gap
                want[i] = min(want[i], high)
            # the row's span centred again, so that the rows do not drift to one side together
            shift = -((want[0] - width[names[0]] / 2) + (want[-1] + width[names[-1]] / 2)) / 2
            x.update((n, w + shift) for n, w in zip(names, want))
    return x


def svg(house: House) -> str:
    """The rooms as boxes on their floors (top floor at the top) and their doors as arrows, all
    going down; an arrow another path of arrows implies is left out (`reduction`), and an arrow
    past several floors runs between the rooms of the floors it passes.  Only the rooms and
    their doors decide the picture (no sizes), so it changes when the structure does."""
    graph = house.room_edges()
    rooms = house.rooms()
    level = floors(graph, set(rooms))
    doors = reduction(graph)
    rows: dict[int, list[str]] = defaultdict(list)
    for room in sorted(rooms):
        rows[level[room]].append(room)
    # an arrow across several floors passes through one waypoint on each floor between
    up: dict[str, list[str]] = defaultdict(list)
    down: dict[str, list[str]] = defaultdict(list)
    paths: list[list[str]] = []
    for a in sorted(doors):
        for b in sorted(doors[a]):
            path = [a, *(f"{a}>{b}@{f}" for f in range(level[a] - 1, level[b], -1)), b]
            for f, point in zip(range(level[a] - 1, level[b], -1), path[1:-1]):
                rows[f].append(point)
            for upper, lower in itertools.pairwise(path):
                down[upper].append(lower)
                up[lower].append(upper)
            paths.append(path)
    box_w, box_h, gap, way_w, floor_h, margin, label_w, head = 112, 30, 14, 10, 74, 16, 58, 74
    node_w = {n: (way_w if "@" in n else box_w) for names in rows.values() for n in names}
    _order(rows, up, down, node_w, gap)
    _untangle(rows, up, down)
    top = max(rows)
    xs = _place(rows, up, down, node_w, gap)
    widest = max(sum(node_w[n] for n in names) + gap * (len(names) - 1) for names in rows.values())
    width = margin * 2 + label_w + widest
    height = margin * 2 + head + top * floor_h + box_h + 26
    middle = margin + label_w + widest / 2
    where = {n: (middle + xs[n], margin + head + (top - f) * floor_h) for f, names in rows.items() for n in names}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
        '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#556"/></marker></defs>',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{margin}" y="{margin + 12}" font-size="14" font-weight="bold">cudapkgs: its rooms by floor, '
        'imports as arrows, every one going down</text>',
        f'<text x="{margin}" y="{margin + 30}" font-size="11" fill="#444">A room imports only rooms on lower '
        'floors (tests/test_layout.py). An arrow that other arrows imply is left out: `python tools/layout.py` '
        'lists every door.</text>',
        f'<rect x="{margin}" y="{margin + 40}" width="{width - 2 * margin:.0f}" height="22" rx="5" fill="#fff8e6" '
        'stroke="#c9a040" stroke-dasharray="4 3"/>',
        f'<text x="{width / 2:.0f}" y="{margin + 55}" text-anchor="middle" font-size="11">front doors: '
        '&#8220;import cudapkgs&#8221;, cudapkgs.api and &#8220;python -m cudapkgs&#8221; (the cudapkgs '
        'command) may open any room; no room imports them</text>',
    ]
    for f in range(top + 1):
        y = margin + head + (top - f) * floor_h
        if f % 2 == 0:
            out.append(f'<rect x="{margin}" y="{y - 12:.0f}" width="{width - 2 * margin:.0f}" height="{box_h + 24}" fill="#f5f7fa"/>')
        out.append(f'<text x="{margin + 6}" y="{y + box_h / 2 + 4:.0f}" font-size="11" fill="#667">floor {f}</text>')
    for path in paths:
        points = []
        for k, node in enumerate(path):
            x, y = where[node]
            if k == 0:
                points.append((x, y + box_h))
            elif k == len(path) - 1:
                points.append((x, y))
            else:
                points += [(x, y - 6), (x, y + box_h + 6)]  # straight through the floor it passes
        d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if x0 == x1:
                d += f" L{x1:.1f},{y1:.1f}"
            else:
                mid = (y0 + y1) / 2
                d += f" C{x0:.1f},{mid:.1f} {x1:.1f},{mid:.1f} {x1:.1f},{y1:.1f}"
        out.append(f'<path d="{d}" fill="none" stroke="#556" stroke-opacity="0.6" stroke-width="1.2" marker-end="url(#a)"/>')
    for name in sorted(rooms):
        x, y = where[name]
        modules = rooms[name]
        package = len(modules) > 1 or house.modules[modules[0]].name == "__init__.py"
        label = f"{name}/" if package else f"{name}.py"
        fill, stroke = ("#e3edff", "#4a6aa8") if package else ("#f0f0f0", "#777")
        out.append(f'<rect x="{x - box_w / 2:.0f}" y="{y:.0f}" width="{box_w}" height="{box_h}" rx="5" '
                   f'fill="{fill}" stroke="{stroke}"/>')
        out.append(f'<text x="{x:.0f}" y="{y + box_h / 2 + 4:.0f}" text-anchor="middle">{html.escape(label)}</text>')
    y = height - margin - 4
    out.append(f'<rect x="{margin}" y="{y - 11}" width="14" height="14" rx="3" fill="#e3edff" stroke="#4a6aa8"/>')
    out.append(f'<text x="{margin + 20}" y="{y}" font-size="11">a package (folder)</text>')
    out.append(f'<rect x="{margin + 140}" y="{y - 11}" width="14" height="14" rx="3" fill="#f0f0f0" stroke="#777"/>')
    out.append(f'<text x="{margin + 160}" y="{y}" font-size="11">a module alone (src/cudapkgs/NAME.py)</text>')
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
