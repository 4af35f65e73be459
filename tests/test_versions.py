"""Nix version semantics, checked against a literal port of Nix's componentsLT."""

from __future__ import annotations

import functools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs.errors import EvalError
from cudapkgs.lib.versions import compare_versions, major, major_minor, natural_sort, split_version, version_at_least, version_key, version_older


# --- an independent, deliberately naive port of Nix's names.cc --------------


def _next_component(s: str, i: int) -> tuple[str, int]:
    while i < len(s) and s[i] in ".-":
        i += 1
    j = i
    if j < len(s) and s[j] in "0123456789":
        while j < len(s) and s[j] in "0123456789":
            j += 1
    else:
        while j < len(s) and s[j] not in "0123456789.-":
            j += 1
    return s[i:j], j


def _to_int(c: str):
    if c and all(ch in "0123456789" for ch in c) and int(c) <= 2**31 - 1:
        return int(c)
    return None


def _components_lt(c1: str, c2: str) -> bool:
    n1, n2 = _to_int(c1), _to_int(c2)
    if n1 is not None and n2 is not None:
        return n1 < n2
    if c1 == "" and n2 is not None:
        return True
    if c1 == "pre" and c2 != "pre":
        return True
    if c2 == "pre":
        return False
    if n2 is not None:
        return True
    if n1 is not None:
        return False
    return c1 < c2


def nix_compare(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        c1, i = _next_component(a, i)
        c2, j = _next_component(b, j)
        if _components_lt(c1, c2):
            return -1
        if _components_lt(c2, c1):
            return 1
    return 0


# --- examples -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("v", "parts"),
    [
        ("10.0a", ["10", "0", "a"]),
        ("12.1f", ["12", "1", "f"]),
        ("12.6.3", ["12", "6", "3"]),
        ("1.2-pre3", ["1", "2", "pre", "3"]),
        ("2.0..1-", ["2", "0", "1"]),
        ("", []),
    ],
)
def test_split_version(v, parts):
    assert split_version(v) == parts


ASCENDING = ["9.0a", "10.0", "10.0a", "10.0f", "10.1", "10.1a", "10.1f", "10.3", "11.0", "12.0", "12.1f"]


def test_capability_chain_is_ascending():
    for lo, hi in zip(ASCENDING, ASCENDING[1:]):
        assert compare_versions(lo, hi) == -1, (lo, hi)
        assert compare_versions(hi, lo) == 1, (lo, hi)
        assert version_older(lo, hi) and not version_older(hi, lo)
        assert version_at_least(hi, lo) and not version_at_least(lo, hi)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("1.0", "1.0", 0),
        ("1", "1.0", -1),  # a missing component is "", which sorts below any number
        ("1.", "1", 0),
        ("1.01", "1.1", 0),
        ("1.0pre", "1.0", -1),
        ("1.0pre1", "1.0", -1),
        ("1.0-pre", "1.0-alpha", -1),  # "pre" sorts below every other word
        ("2.3a", "2.3.1", -1),
        ("2.3", "2.3a", -1),
        ("1.a", "1.b", -1),
        ("12.6", "12.10", -1),
        ("9", "10", -1),
        ("12.9", "13.0", -1),
    ],
)
def test_compare_versions_examples(a, b, expected):
    assert compare_versions(a, b) == expected
    assert compare_versions(b, a) == -expected
    assert nix_compare(a, b) == expected  # the oracle agrees with the spec, too


def test_version_older_and_at_least_on_equal():
    assert not version_older("12.6", "12.6")
    assert version_at_least("12.6", "12.6")


def test_major_and_major_minor():
    assert major("12.6.3") == "12"
    assert major_minor("12.6.3") == "12.6"
    assert major_minor("10.0a") == "10.0"
    assert major_minor("13") == "13"
    with pytest.raises(EvalError):
        major("")


def test_natural_sort_examples():
    assert natural_sort(["Turing", "Ampere"]) == ["Ampere", "Turing"]
    assert natural_sort(["sm_100", "sm_89", "sm_9"]) == ["sm_9", "sm_89", "sm_100"]
    assert natural_sort(["a10", "a9", "a010"]) == ["a010", "a9", "a10"]  # "0" is its own run
    assert natural_sort([]) == []


# --- properties ---------------------------------------------------------------

_component = st.one_of(
    st.integers(0, 40).map(str),
    st.sampled_from(["pre", "a", "f", "rc", "b", "00", "007", "99999999999"]),
)
versions = st.builds(
    lambda parts, seps: "".join(p + s for p, s in zip(parts, seps)),
    st.lists(_component, max_size=5),
    st.lists(st.sampled_from(["", ".", "-", ".."]), min_size=5, max_size=5),
) | st.text(alphabet="0123.-apref", max_size=8)


@given(versions, versions)
def test_compare_matches_nix_oracle(a, b):
    assert compare_versions(a, b) == nix_compare(a, b)


@given(versions, versions)
def test_antisymmetry(a, b):
    assert compare_versions(a, b) == -compare_versions(b, a)


@given(versions, versions, versions)
def test_transitivity(a, b, c):
    if compare_versions(a, b) <= 0 and compare_versions(b, c) <= 0:
        assert compare_versions(a, c) <= 0
    if compare_versions(a, b) == 0 and compare_versions(b, c) == 0:
        assert compare_versions(a, c) == 0


@given(versions, versions)
def test_version_key_consistent(a, b):
    ka, kb = version_key(a), version_key(b)
    assert ((ka > kb) - (ka < kb)) == nix_compare(a, b)


@given(st.lists(versions, max_size=12))
def test_sorting_by_key_agrees_with_oracle(vs):
    ordered = sorted(vs, key=version_key)
    for x, y in zip(ordered, ordered[1:]):
        assert nix_compare(x, y) <= 0


def _oracle_natural_cmp(a: str, b: str) -> int:
    def vec(s):
        out = []
        for i, part in enumerate(re.split(r"(0|[1-9][0-9]*)", s)):
            out.append(int(part) if i % 2 else part)
        return out

    va, vb = vec(a), vec(b)
    return (va > vb) - (va < vb)


@given(st.lists(st.text(alphabet="ab019_", max_size=5), max_size=10))
def test_natural_sort_is_stable_and_ordered(items):
    out = natural_sort(items)
    assert sorted(out) == sorted(items)
    for x, y in zip(out, out[1:]):
        assert _oracle_natural_cmp(x, y) <= 0
    # stability: equal-keyed items keep their input order
    keyed = sorted(range(len(items)), key=functools.cmp_to_key(lambda i, j: _oracle_natural_cmp(items[i], items[j])))
    assert out == [items[i] for i in keyed]
    assert natural_sort(out) == out
