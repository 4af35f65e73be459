"""StoreGraph: whole-store closures and closure sizes from one pass over the database."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from cudapkgs.store.graph import StoreGraph


def naive_closure(refs: dict[str, tuple[str, ...]], start: str) -> set[str]:
    seen, todo = {start}, deque([start])
    while todo:
        for r in refs[todo.popleft()]:
            if r not in seen and r in refs:
                seen.add(r)
                todo.append(r)
    return seen


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 40))
    names = [f"/s/{i:03d}-p{i}" for i in range(n)]
    sizes = draw(st.lists(st.integers(0, 2**45), min_size=n, max_size=n))
    # any edges at all: cycles (outputs referring to each other), self-references, dangling references
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n)), max_size=4 * n))
    refs: dict[str, set[str]] = {p: set() for p in names}
    for a, b in edges:
        refs[names[a]].add(names[b] if b < n else "/s/zzz-missing")
    rows = {p: ("sha256:x", s, None, 0) for p, s in zip(names, sizes)}
    return StoreGraph(rows, {p: tuple(sorted(r)) for p, r in refs.items()})


@settings(max_examples=200, deadline=None)
@given(graphs(), st.data())
def test_closure_sizes_equal_the_sum_over_each_closure(graph, data):
    wanted = data.draw(st.lists(st.sampled_from(sorted(graph.rows)), min_size=1, unique=True))
    got = graph.closure_sizes(wanted)
    assert set(got) == set(wanted)
    for p in wanted:
        closure = naive_closure(graph.refs, p)
        assert closure == graph.closure([p])
        assert got[p] == sum(graph.rows[q][1] for q in closure), p


def test_load_reads_the_database_and_skips_invalid_references(tmp_path):
    from cudapkgs.store.store import Store

    with Store.open(tmp_path / "store") as store:
        a, b, c = (f"{store.store_dir}/{h}-{n}" for h, n in (("a" * 32, "a"), ("b" * 32, "b"), ("c" * 32, "c")))
        store.db.register_many([(c, "sha256:c", 5, [], None), (b, "sha256:b", 7, [c, b], None), (a, "sha256:a", 11, [b], None)])
        graph = store.graph()
        assert graph.info(b).references == tuple(sorted([b, c])) and graph.info(b).nar_size == 7
        assert graph.closure_sizes([a, b, c]) == {a: 23, b: 12, c: 5}
        store.db.invalidate([c])  # b now refers to an invalid path (a damaged store)
        graph = store.graph()
        assert graph.closure([a]) == {a, b} and graph.closure_sizes([a]) == {a: 18}
        assert [p.kind for p in store.verify(check_contents=False)] == ["missing", "missing"]  # not on disk
        for path in (a, b):
            (tmp_path / "store" / path.rsplit("/", 1)[1]).mkdir()
        assert [(p.path, p.kind) for p in store.verify(check_contents=False)] == [(b, "invalid-reference")]
