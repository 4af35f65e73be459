"""Where a closure's bytes go: `closure_weights` (sizes, order, shares, chains), the treemap layout and
SVG, and `path-info --weights/--draw`."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs.store.store import Store
from cudapkgs.store.treemap import render_html, render_svg, squarify
from cudapkgs.store.weights import closure_weights, short_names

SVG = "{http://www.w3.org/2000/svg}"


def _store(tmp_path):
    """A store whose paths have exact NAR sizes (registered directly):

    app -> torch -> cudnn -> cublas -> cudart;  torch -> cublas;  app -> tool -> cudart;  unrelated.
    """
    store = Store.open(tmp_path / "store")
    p = {n: f"{store.store_dir}/{c * 32}-{n}" for c, n in zip("abcdfghi", ("app", "torch", "cudnn", "cublas", "cudart",
                                                                            "tool", "unrelated", "doc"))}
    store.db.register_many([
        (p["cudart"], "sha256:0", 100, [], None),
        (p["cublas"], "sha256:1", 600, [p["cudart"]], None),
        (p["cudnn"], "sha256:2", 1000, [p["cublas"], p["cudart"]], None),
        (p["torch"], "sha256:3", 1100, [p["cublas"], p["cudnn"], p["torch"]], None),  # a self-reference
        (p["tool"], "sha256:4", 100, [p["cudart"]], None),
        (p["app"], "sha256:5", 10, [p["tool"], p["torch"]], None),
        (p["unrelated"], "sha256:6", 5000, [], None),
    ])
    for path in p.values():
        (tmp_path / "store" / path.rsplit("/", 1)[1]).mkdir(exist_ok=True)
    return store, p


def test_sizes_order_shares_and_shortest_chains(tmp_path):
    store, p = _store(tmp_path)
    with store:
        weights = closure_weights(store.graph(), [p["app"]])
    assert [(w.path, w.nar_size) for w in weights] == [
        (p["torch"], 1100), (p["cudnn"], 1000), (p["cublas"], 600), (p["cudart"], 100), (p["tool"], 100), (p["app"], 10)]
    total = 2910
    assert [round(w.share * total) for w in weights] == [1100, 1000, 600, 100, 100, 10]
    assert [round(w.cumulative * total) for w in weights] == [1100, 2100, 2700, 2800, 2900, 2910]
    chains = {w.path: w.chain for w in weights}
    assert chains[p["app"]] == (p["app"],)
    assert chains[p["cudnn"]] == (p["app"], p["torch"], p["cudnn"])
    assert chains[p["cublas"]] == (p["app"], p["torch"], p["cublas"])  # the direct reference, not via cudnn
    # cudart: three hops through torch -> cublas, two through tool: the shortest wins.
    assert chains[p["cudart"]] == (p["app"], p["tool"], p["cudart"])
    assert p["unrelated"] not in chains


def test_chains_start_at_the_nearest_of_several_roots_and_invalid_roots_fail(tmp_path):
    store, p = _store(tmp_path)
    with store:
        graph = store.graph()
        weights = {w.path: w for w in closure_weights(graph, [p["app"], p["cudnn"], p["app"]])}
        assert weights[p["cudnn"]].chain == (p["cudnn"],)
        assert weights[p["cublas"]].chain == (p["cudnn"], p["cublas"])  # from cudnn (one hop), not app (two)
        assert len(weights) == 6
        with pytest.raises(KeyError):
            closure_weights(graph, [f"{store.store_dir}/{'z' * 32}-gone"])


def test_short_names_keep_a_hash_prefix_only_where_names_clash():
    a, b, c = "/s/" + "a" * 32 + "-cudnn-9", "/s/" + "b" * 32 + "-cudnn-9", "/s/" + "c" * 32 + "-libcublas-13.1"
    assert short_names([a, b, c]) == {a: "aaaaaaaa-cudnn-9", b: "bbbbbbbb-cudnn-9", c: "libcublas-13.1"}


@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=40),
       st.floats(min_value=10, max_value=2000), st.floats(min_value=10, max_value=2000))
def test_squarify_tiles_fill_the_space_in_proportion_without_overlap(values, w, h):
    values.sort(reverse=True)
    tiles = squarify(values, 5, 7, w, h)
    total = sum(values)
    if total == 0:
        assert tiles == []
        return
    assert sorted(t.index for t in tiles) == list(range(len(values)))
    eps = 1e-6 * w * h
    for t in tiles:
        assert t.w >= -1e-9 and t.h >= -1e-9
        assert abs(t.w * t.h - values[t.index] / total * w * h) <= eps + 1e-6
        assert 5 - 1e-6 <= t.x and t.x + t.w <= 5 + w + 1e-6 and 7 - 1e-6 <= t.y and t.y + t.h <= 7 + h + 1e-6
    for s, t in itertools.combinations(tiles, 2):
        overlap_w = min(s.x + s.w, t.x + t.w) - max(s.x, t.x)
        overlap_h = min(s.y + s.h, t.y + t.h) - max(s.y, t.y)
        assert overlap_w <= 1e-6 or overlap_h <= 1e-6, (s, t)


def test_squarify_refuses_negative_sizes():
    with pytest.raises(ValueError, match="negative"):
        squarify([3, -1], 0, 0, 10, 10)


def test_svg_has_a_tile_per_heavy_path_one_for_the_rest_and_why_in_each_title(tmp_path):
    store, p = _store(tmp_path)
    with store:
        weights = closure_weights(store.graph(), [p["app"]])
    root = ET.fromstring(render_svg(weights, "where the bytes go: app & co", max_tiles=4))
    groups = root.findall(f"{SVG}g")
    assert len(groups) == 5  # 4 heaviest + "2 smaller paths"
    titles = [g.find(f"{SVG}title").text for g in groups]
    assert any(t.startswith(p["cudnn"]) and "why: app → torch → cudnn" in t and "34.4%" in t for t in titles)
    assert any(t.startswith("2 paths under") for t in titles)
    # On the tiles: with one root the chain's line leaves the root out.
    lines = [t.text for g in groups for t in g.findall(f"{SVG}text")]
    assert "via torch" in lines and "the root refers to it" in lines and "(a root)" not in lines  # app's tile is merged
    assert root.find(f"{SVG}text").text == "where the bytes go: app & co"  # escaped, then parsed back
    # Areas in proportion: torch's tile is 11/10 of cudnn's.
    areas = {g.find(f"{SVG}title").text.split("\n")[0]: float(g.find(f"{SVG}rect").get("width")) *
             float(g.find(f"{SVG}rect").get("height")) for g in groups}
    assert areas[p["torch"]] / areas[p["cudnn"]] == pytest.approx(1.1, rel=1e-3)
    page = render_html(weights, "t")
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert page.count("<tr>") == 1 + len(weights)


def _cli(*args: str, store_dir: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudapkgs", "path-info", *args, "--store", store_dir],
                          capture_output=True, text=True)


def test_cli_weights_table_json_and_drawing(tmp_path):
    store, p = _store(tmp_path)
    store.close()
    r = _cli("--weights", "--json", p["app"], store_dir=store.store_dir)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [o["path"] for o in data][:3] == [p["torch"], p["cudnn"], p["cublas"]]
    assert data[0]["narSize"] == 1100 and data[-1]["cumulativeShare"] == pytest.approx(1.0)
    assert data[3]["chain"] == [p["app"], p["tool"], p["cudart"]]

    r = _cli("--weights", "--top", "2", p["app"], store_dir=store.store_dir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["SIZE", "SHARE", "CUMULATIVE", "PATH"]
    assert lines[2].split() == ["1.1", "KiB", "37.8%", "37.8%", "torch", "app"]
    assert lines[3].split() == ["1000", "B", "34.4%", "72.2%", "cudnn", "app", "→", "torch"]
    assert lines[4] == "6 paths, 2.8 KiB in all; 4 lighter paths not shown (--top 0 shows all)"

    out = tmp_path / "closure.svg"
    r = _cli("--draw", str(out), p["app"], store_dir=store.store_dir)
    assert r.returncode == 0, r.stderr
    assert len(ET.parse(out).getroot().findall(f"{SVG}g")) == 6 and f"drawn to {out}" in r.stdout

    r = _cli("--draw", str(tmp_path / "closure.png"), p["app"], store_dir=store.store_dir)
    assert r.returncode == 2 and "must end in .svg or .html" in r.stderr
    r = _cli("--draw", str(tmp_path / "no-such-dir" / "c.svg"), p["app"], store_dir=store.store_dir)
    assert r.returncode == 2 and "cannot write it" in r.stderr and r.stderr.count("\n") == 1


def test_top_without_weights_is_refused_not_ignored(tmp_path):
    # `path-info -rS --top 2 PATH` printed the whole closure: --top only cuts the weights table.
    store, p = _store(tmp_path)
    store.close()
    for extra in ([], ["-rS"], ["--json"]):
        r = _cli(*extra, "--top", "2", p["app"], store_dir=store.store_dir)
        assert r.returncode == 2 and "--top 2 needs --weights (or --draw)" in r.stderr, (extra, r.stderr)
        assert "Traceback" not in r.stderr and r.stdout == ""
        assert f"try `cudapkgs path-info --weights --top 2 {p['app']}`" in r.stderr  # the user's path, not "PATH"
    r = _cli("--caches", "--top", "2", store_dir=store.store_dir)
    assert r.returncode == 2 and "needs --weights" in r.stderr
    r = _cli("--weights", "--top", "2", p["app"], store_dir=store.store_dir)
    assert r.returncode == 0, r.stderr
