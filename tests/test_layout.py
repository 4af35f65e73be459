"""The layout's rules, read from the imports with `ast` (tools/layout.py; nothing is executed).

Each rule fails on the layout before the move (issue 19: 5 circles, `project` importing the
command line, `stdenv` importing `pkgs/`, `lib` modules importing `errors`), so none comes back.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("layout", ROOT / "tools" / "layout.py")
assert _spec is not None and _spec.loader is not None
layout = importlib.util.module_from_spec(_spec)
sys.modules["layout"] = layout
_spec.loader.exec_module(layout)


@pytest.fixture(scope="module")
def house():
    return layout.read_house(ROOT / "src")


def _where(house, imports):
    return "\n".join(f"  {i.importer} (line {i.line}) -> {i.target} {', '.join(i.names)}".rstrip() for i in imports)


def test_no_module_imports_another_in_a_circle(house):
    assert layout.cycles(house.edges()) == []


def test_rooms_have_one_way_doors(house):
    """No room imports a room that imports it back, however far round: every door goes down a floor."""
    graph = house.room_edges()
    assert layout.cycles(graph) == []
    level = layout.floors(graph, set(house.rooms()))
    upward = [(a, b) for a, bs in graph.items() for b in bs if level[b] >= level[a]]
    assert upward == []


def test_lib_imports_nothing_outside_itself(house):
    outside = [i for i in house.imports if layout.room_of(i.importer) == "lib" and layout.room_of(i.target) != "lib"]
    assert outside == [], _where(house, outside)


def test_nothing_imports_the_command_line(house):
    entering = [i for i in house.imports if layout.room_of(i.target) == "cli"
                and layout.room_of(i.importer) != "cli" and i.importer not in layout.FRONT]
    assert entering == [], _where(house, entering)


def test_no_room_imports_the_front_door(house):
    """`cudapkgs` and `cudapkgs.api` are for package files and users; a room importing them
    would import every room above it."""
    front = [i for i in house.imports if i.target in layout.FRONT and i.importer not in layout.FRONT]
    assert front == [], _where(house, front)


def test_argparse_only_in_the_command_line(house):
    import ast

    users = []
    for module, path in house.modules.items():
        if layout.room_of(module) == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                users.append(module)
    assert users == []


def test_stdenv_is_given_its_compiler(house):
    """Nixpkgs' stdenv takes `cc` as an argument; here `stdenv.generic` knows no compiler and the
    room imports nothing of `pkgs/` (before the move, stdenv imported pkgs/cc_wrapper and back)."""
    generic = [i for i in house.imports if i.importer == "cudapkgs.stdenv.generic"]
    assert not [i for i in generic if "cc_wrapper" in i.target]
    assert not [i for i in house.imports if layout.room_of(i.importer) == "stdenv" and layout.room_of(i.target) == "pkgs"]


def test_the_reader_finds_a_circle(tmp_path):
    """The rules above are only as good as the reader: a planted circle, a relative import in a
    function and a room-level circle are all seen."""
    pkg = tmp_path / "cudapkgs"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("def f():\n    from ..b import thing\n")
    (pkg / "b.py").write_text("from .a import one\nthing = 1\n")
    (pkg / "c.py").write_text("from cudapkgs.a.one import f\n")
    planted = layout.read_house(tmp_path)
    assert layout.cycles(planted.edges()) == [["cudapkgs.a.one", "cudapkgs.b"]]
    assert layout.cycles(planted.room_edges()) == [["a", "b"]]
    assert ("cudapkgs.c", "cudapkgs.a.one") in {(i.importer, i.target) for i in planted.imports}



def test_the_reader_sees_imports_by_a_written_out_name(tmp_path):
    """`importlib.import_module("cudapkgs.cli")` in lib/ passed every rule: the reader saw only
    import statements (and so missed cuda/scope's door to pkgs/ and top_level's to fetch/).
    A name written out (a constant, an f-string's constant start) is a door; one in a variable
    cannot be read."""
    pkg = tmp_path / "cudapkgs"
    for room in ("lib", "cli", "pkgs"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cli" / "main.py").write_text("")
    (pkg / "pkgs" / "hello.py").write_text("")
    (pkg / "lib" / "sneaky.py").write_text(
        "import importlib\n"
        "def f(name):\n"
        "    importlib.import_module('cudapkgs.cli.main')\n"
        "    __import__(f'cudapkgs.pkgs.{name}', fromlist=['x'])\n"
        "    importlib.import_module('.other', __name__)\n"
        "    importlib.import_module(name)\n")
    (pkg / "lib" / "other.py").write_text("")
    doors = {(i.importer, i.target) for i in layout.read_house(tmp_path).imports}
    assert doors == {("cudapkgs.lib.sneaky", "cudapkgs.cli.main"), ("cudapkgs.lib.sneaky", "cudapkgs.pkgs"),
                     ("cudapkgs.lib.sneaky", "cudapkgs.lib.other")}


def test_the_picture_in_the_docs_is_drawn_from_this_code(house):
    """docs/architecture.md shows docs/rooms.svg: it must be the picture of the rooms as they are."""
    drawn = layout.svg(house)
    committed = (ROOT / "docs" / "rooms.svg").read_text(encoding="utf-8")
    assert committed == drawn, "docs/rooms.svg is out of date: run `python tools/layout.py --svg docs/rooms.svg`"
    assert layout.svg(layout.read_house(ROOT / "src")) == drawn  # the same drawing every time
    doors = layout.reduction(house.room_edges())
    assert drawn.count('marker-end="url(#a)"') == sum(len(bs) for bs in doors.values())
    for room in house.rooms():
        assert f">{room}/<" in drawn or f">{room}.py<" in drawn, room


def test_the_picture_leaves_out_only_implied_doors():
    graph = {"a": {"b", "c", "d"}, "b": {"c"}, "c": {"d"}, "e": {"d"}}
    assert layout.reduction(graph) == {"a": {"b"}, "b": {"c"}, "c": {"d"}, "e": {"d"}}


def test_the_table_of_rooms_names_every_room_and_only_rooms(house):
    """docs/architecture.md's table says what each room owns: a room added or removed shows here."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("| room | owns |"):].split("\n\n", 1)[0].splitlines()[2:]
    named = {name.rstrip("/") for row in table for name in re.findall(r"`([^`]+)`", row.split("|")[1])}
    assert named == set(house.rooms()), (sorted(set(house.rooms()) - named), sorted(named - set(house.rooms())))


MAX_LINES = 720


def test_no_module_is_over_about_700_lines(house):
    """One concern per module: a file past ~700 lines holds several (issue 19 split `store/store.py`,
    954 lines, and `manifests.py`, 841, by concern); split it rather than raise the bound."""
    long = {module: house.lines(module) for module in house.modules if house.lines(module) > MAX_LINES}
    assert long == {}
