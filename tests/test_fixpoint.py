"""Tests of cudapkgs.lib.fixpoint: thunks, lazy sets, fixed points, scopes."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs import errors
from cudapkgs.lib.fixpoint import AttrSet, Scope, Thunk, call_package_with, compose_extensions, compose_many_extensions, extends, fix, force, lazy, make_extensible, make_overridable, make_scope


def boom(message: str = "boom"):
    def raiser():
        raise ValueError(message)

    return raiser


class Counter:
    def __init__(self, value=42):
        self.calls = 0
        self.value = value

    def __call__(self):
        self.calls += 1
        return self.value


# --------------------------------------------------------------------------
# Thunks


def test_thunk_runs_once_on_success():
    fn = Counter()
    t = lazy(fn, "t")
    assert t.force() == 42
    assert t.force() == 42
    assert force(t) == 42
    assert fn.calls == 1


def test_force_passes_plain_values_through():
    assert force(3) == 3
    assert force(None) is None


def test_thunk_failure_is_not_memoized():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ValueError(f"attempt {len(calls)}")
        return "ok"

    t = Thunk(flaky)
    with pytest.raises(ValueError, match="attempt 1"):
        t.force()
    with pytest.raises(ValueError, match="attempt 2"):
        t.force()
    assert t.force() == "ok"
    assert t.force() == "ok"
    assert len(calls) == 3


def test_thunk_chains_are_forced():
    inner = Counter("deep")
    t = lazy(lambda: lazy(lambda: lazy(inner)))
    assert t.force() == "deep"
    s = AttrSet({"x": t})
    assert s.x == "deep"
    assert inner.calls == 1


def test_thunk_repr_does_not_force():
    fn = Counter()
    t = lazy(fn, "label")
    assert "label" in repr(t)
    assert fn.calls == 0


def test_thunk_that_returns_itself_is_recursion():
    box = {}
    box["t"] = lazy(lambda: box["t"], "loop")
    with pytest.raises(errors.InfiniteRecursionError, match="loop -> loop"):
        box["t"].force()


@given(st.integers(min_value=1, max_value=40))
def test_thunk_called_at_most_once_per_success(reads):
    fn = Counter()
    s = AttrSet({"a": lazy(fn), "b": 1})
    for _ in range(reads):
        assert s.a == 42
        assert s["a"] == 42
        assert s.get("a") == 42
    assert fn.calls == 1


# --------------------------------------------------------------------------
# AttrSet


def test_attrset_reads():
    s = AttrSet({"a": 1, "b": lazy(lambda: 2)}, name="s")
    assert s.a == 1
    assert s["b"] == 2
    assert s.get("b") == 2
    assert s.get("zzz") is None
    assert s.get("zzz", 7) == 7
    assert s.attr_path == "s"
    assert list(s) == ["a", "b"]
    assert len(s) == 2
    assert "a" in s and "zzz" not in s
    assert dict(s) == {"a": 1, "b": 2}
    assert s.to_dict() == {"a": 1, "b": 2}
    assert s == {"a": 1, "b": 2}


def test_attrset_names_never_force():
    s = AttrSet({"a": lazy(boom()), "b": lazy(boom())}, name="pkgs")
    assert list(s) == ["a", "b"]
    assert len(s) == 2
    assert "a" in s
    assert isinstance(s.slot("a"), Thunk)
    assert repr(s) == "<AttrSet pkgs: a, b>"
    assert s.named("other").attr_path == "other"
    assert list(s.remove("a")) == ["b"]
    assert list(s | {"c": lazy(boom())}) == ["a", "b", "c"]


def test_attrset_repr_is_short():
    s = AttrSet({f"p{i}": lazy(boom()) for i in range(20)}, name="big")
    assert repr(s).startswith("<AttrSet big: p0, p1,")
    assert repr(s).endswith(", …>")
    assert repr(AttrSet()) == "<AttrSet: (empty)>"


def test_missing_attribute_message_and_types():
    s = AttrSet({"cudnn": 1, "cuda_nvcc": 2}, name="cudaPackages_12_8")
    with pytest.raises(errors.AttributeMissingError) as info:
        s.cudnnn
    assert str(info.value) == (
        "attribute 'cudnnn' missing in cudaPackages_12_8 (did you mean \"cudnn\"?)"
    )
    with pytest.raises(errors.AttributeMissingError, match="cudnnn"):
        s["cudnnn"]
    with pytest.raises(errors.AttributeMissingError, match="cudnnn"):
        s.slot("cudnnn")
    # An AttributeError, so getattr/hasattr work; a KeyError, so Mapping code works.
    assert getattr(s, "cudnnn", "default") == "default"
    assert not hasattr(s, "nope")
    with pytest.raises(KeyError):
        s["nope"]
    assert isinstance(info.value, errors.EvalError)
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, errors.AttributeMissingError)
    assert str(again) == str(info.value)


def test_dunder_lookups_are_plain_attribute_errors():
    s = AttrSet({"__weird": 1})
    with pytest.raises(AttributeError) as info:
        s.__deepcopy_me__
    assert not isinstance(info.value, errors.AttributeMissingError)
    s2 = AttrSet({"a": 1, "b": lazy(lambda: 2)}, name="n")
    c = copy.copy(s2)
    assert c.to_dict() == {"a": 1, "b": 2}
    assert c.attr_path == "n"


def test_attrset_shares_thunks_across_updates():
    fn = Counter()
    s = AttrSet({"a": lazy(fn)})
    t = s | {"b": 1}
    u = AttrSet(t, name="u")
    assert s.a == t.a == u.a == 42
    assert fn.calls == 1


def test_update_copies_raw_slots_of_attrsets():
    left = AttrSet({"a": 1})
    right = AttrSet({"b": lazy(boom())})
    merged = left.update(right)
    assert list(merged) == ["a", "b"]
    assert isinstance(merged.slot("b"), Thunk)


def test_dict_or_attrset():
    s = {"a": 1, "b": 1} | AttrSet({"b": 2}, name="s")
    assert isinstance(s, AttrSet)
    assert s.to_dict() == {"a": 1, "b": 2}


keys = st.sampled_from(["a", "b", "c", "d", "e"])
small_dicts = st.dictionaries(keys, st.integers())


@given(small_dicts, small_dicts)
def test_update_is_right_biased(left, right):
    merged = AttrSet(left).update(AttrSet(right))
    assert merged.to_dict() == {**left, **right}
    assert (AttrSet(left) | right).to_dict() == {**left, **right}
    assert list(merged) == list({**left, **right})


@given(small_dicts, st.sets(keys))
def test_laziness_isolates_failures(values, broken):
    slots = {k: lazy(lambda v=v: v) for k, v in values.items()}
    for k in broken:
        slots[k] = lazy(boom(f"{k} is broken"))
    s = AttrSet(slots, name="s")
    for _ in range(2):
        for k in s:
            if k in broken:
                with pytest.raises(ValueError, match=f"{k} is broken"):
                    s[k]
            else:
                assert s[k] == values[k]


# --------------------------------------------------------------------------
# Fixed points


def test_fix_self_reference():
    s = fix(lambda final: {"a": 1, "b": lazy(lambda: final.a + 1)}, name="s")
    assert s.b == 2
    assert s.attr_path == "s"


def test_fix_does_not_force():
    s = fix(lambda final: {"a": lazy(boom()), "b": lazy(lambda: final.c), "c": 3})
    assert list(s) == ["a", "b", "c"]
    assert s.b == 3


def test_reading_final_during_f_is_infinite_recursion():
    with pytest.raises(errors.InfiniteRecursionError, match=r"s\.a was read while s"):
        fix(lambda final: {"a": 1, "b": final.a}, name="s")
    with pytest.raises(errors.InfiniteRecursionError):
        fix(lambda final: {k: 1 for k in final})
    with pytest.raises(errors.InfiniteRecursionError):
        fix(lambda final: {"a": "a" in final})
    with pytest.raises(errors.InfiniteRecursionError):
        fix(lambda final: final | {"a": 1})
    # repr stays harmless while f runs
    seen = []
    fix(lambda final: seen.append(repr(final)) or {})
    assert "being defined" in seen[0]


def test_two_attribute_cycle_names_both_paths():
    s = fix(
        lambda final: {
            "flags": lazy(lambda: final.backendStdenv),
            "backendStdenv": lazy(lambda: final.flags),
            "ok": 1,
        },
        name="cudaPackages_12_8",
    )
    with pytest.raises(errors.InfiniteRecursionError) as info:
        s.flags
    assert str(info.value) == (
        "infinite recursion: cudaPackages_12_8.flags -> "
        "cudaPackages_12_8.backendStdenv -> cudaPackages_12_8.flags"
    )
    # the failure is not remembered, the stack is clean, other attributes fine
    with pytest.raises(errors.InfiniteRecursionError, match="backendStdenv"):
        s.backendStdenv
    assert s.ok == 1


def test_deep_chain_never_leaks_recursion_error():
    chain = [lazy(lambda: 0)]
    for i in range(5000):
        chain.append(lazy(lambda prev=chain[-1]: prev.force() + 1, f"t{i}"))
    try:
        assert chain[-1].force() == 5000
    except errors.EvalError as e:
        assert isinstance(e, errors.InfiniteRecursionError)
        assert "t4999" not in str(e)  # names the innermost labels
        assert "t" in str(e)
    # nothing is left half-forced: a shallow read still works
    assert chain[10].force() == 10


def test_deep_chain_through_attrsets():
    def f(final):
        slots = {"n0": 0}
        for i in range(1, 5000):
            slots[f"n{i}"] = lazy(lambda i=i: final[f"n{i - 1}"] + 1)
        return slots

    s = fix(f, name="deep")
    try:
        assert s.n4999 == 4999
    except errors.EvalError as e:
        assert "deep.n" in str(e)
    assert s.n5 == 5


def test_recursion_stack_is_per_thread():
    results = []
    gate = threading.Barrier(2)

    def slow():
        gate.wait(timeout=5)
        return 1

    t = lazy(slow, "shared")

    def reader():
        try:
            results.append(t.force())
        except Exception as e:  # pragma: no cover - reported below
            results.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [1, 1]


def test_other_errors_are_not_swallowed():
    s = AttrSet({"a": lazy(boom("original"))})
    with pytest.raises(ValueError, match="original"):
        s.a


# --------------------------------------------------------------------------
# Extensions


def base(final):
    return {
        "a": 1,
        "via_final": lazy(lambda: final.a * 10),
        "via_prev_holder": 0,
    }


def test_extends_prev_versus_final():
    def ext(final, prev):
        return {
            "a": 2,
            "old_a": lazy(lambda: prev.a),
            "via_prev_holder": lazy(lambda: prev.via_final),
        }

    s = fix(extends(ext, base), name="s")
    assert s.a == 2
    assert s.old_a == 1
    assert s.via_final == 20  # late-bound: sees the extension's a
    assert s.via_prev_holder == 20  # prev.via_final itself reads final.a


def test_extension_overriding_with_prev_value():
    def ext(final, prev):
        return {"a": lazy(lambda: prev.a + 100)}

    s = fix(extends(ext, base))
    assert s.a == 101
    assert s.via_final == 1010


def set_to(key, mul, add):
    """An extension setting key to prev[key] * mul + add."""

    def ext(final, prev):
        return {key: lazy(lambda: prev[key] * mul + add)}

    ext.spec = (key, mul, add)
    return ext


ext_specs = st.lists(
    st.tuples(st.sampled_from(["x", "y", "z"]), st.integers(-3, 3), st.integers(-5, 5)),
    max_size=8,
)


def apply_sequentially(start, specs):
    values = dict(start)
    for key, mul, add in specs:
        values[key] = values[key] * mul + add
    return values


START = {"x": 1, "y": 2, "z": 3}


@given(ext_specs)
def test_compose_many_extensions_applies_left_to_right(specs):
    exts = [set_to(*spec) for spec in specs]
    s = fix(extends(compose_many_extensions(exts), lambda final: dict(START)))
    assert s.to_dict() == apply_sequentially(START, specs)


@given(ext_specs)
def test_extends_stacking_matches_composition(specs):
    f = lambda final: dict(START)  # noqa: E731
    for spec in specs:
        f = extends(set_to(*spec), f)
    assert fix(f).to_dict() == apply_sequentially(START, specs)


@given(ext_specs, ext_specs, ext_specs)
def test_compose_extensions_is_associative(s1, s2, s3):
    f, g, h = (compose_many_extensions([set_to(*x) for x in s]) for s in (s1, s2, s3))

    def run(ext):
        return fix(extends(ext, lambda final: dict(START))).to_dict()

    left = run(compose_extensions(compose_extensions(f, g), h))
    right = run(compose_extensions(f, compose_extensions(g, h)))
    assert left == right == apply_sequentially(START, s1 + s2 + s3)


def test_compose_many_of_nothing_is_identity():
    ident = compose_many_extensions([])
    assert fix(extends(ident, lambda final: dict(START))).to_dict() == START


def test_compose_extensions_second_sees_first_as_prev_and_final_late():
    def f(final, prev):
        return {"a": "f"}

    def g(final, prev):
        return {"from_prev": lazy(lambda: prev.a), "from_final": lazy(lambda: final.a)}

    def h(final, prev):
        return {"a": "h"}

    s = fix(extends(compose_many_extensions([f, g, h]), lambda final: {"a": "base"}))
    assert s.from_prev == "f"
    assert s.from_final == "h"


def test_make_extensible_extend_chains():
    x = make_extensible(
        lambda final: {"a": 1, "b": lazy(lambda: final.a + 1)}, name="x"
    )
    assert "extend" in x
    assert x.b == 2
    y = x.extend(lambda final, prev: {"a": 10})
    assert "extend" in y
    assert y.b == 11
    z = y.extend(lambda final, prev: {"c": lazy(lambda: prev.b * 2), "a": lazy(lambda: prev.a + 1)})
    assert z.a == 11
    assert z.b == 12
    assert z.c == 24
    assert "extend" in z and z.attr_path == "x"
    assert x.a == 1 and y.a == 10  # originals untouched


# --------------------------------------------------------------------------
# call_package and overriding


def saxpy(cudaPackages, stdenv, enableFoo=False):
    return AttrSet({"cuda": cudaPackages, "stdenv": stdenv, "foo": enableFoo}, name="saxpy")


def test_call_package_with_injects_by_name_and_honours_defaults():
    scope = AttrSet({"cudaPackages": "cp", "stdenv": "sd", "unrelated": lazy(boom())})
    r = call_package_with(scope, saxpy)
    assert (r.cuda, r.stdenv, r.foo) == ("cp", "sd", False)


def test_call_package_with_scope_value_beats_default():
    scope = {"cudaPackages": "cp", "stdenv": "sd", "enableFoo": True}
    assert call_package_with(scope, saxpy).foo is True


def test_call_package_explicit_override_wins():
    scope = {"cudaPackages": "cp", "stdenv": "sd"}
    assert call_package_with(scope, saxpy, {"stdenv": "other"}).stdenv == "other"
    assert call_package_with(scope, saxpy, stdenv="kw").stdenv == "kw"
    r = call_package_with(scope, saxpy, {"stdenv": "dict", "enableFoo": 1}, stdenv="kw")
    assert (r.stdenv, r.foo) == ("kw", 1)


def test_call_package_missing_argument_message():
    scope = {"cudaPackages": "cp", "stdenv": "sd"}

    def needs(cudaPackagse):
        return cudaPackagse

    with pytest.raises(errors.MissingArgumentError) as info:
        call_package_with(scope, needs)
    msg = str(info.value)
    assert "cudaPackagse" in msg
    assert "needs" in msg
    assert 'did you mean "cudaPackages"' in msg


def test_call_package_unexpected_argument():
    with pytest.raises(errors.EvalError, match="unexpected argument 'bogus'"):
        call_package_with({"cudaPackages": 1, "stdenv": 2}, saxpy, bogus=1)

    def takes_kwargs(a, **rest):
        return AttrSet({"a": a, **rest})

    r = call_package_with({"a": 1, "b": 2}, takes_kwargs, c=3)
    assert r.to_dict() == {"a": 1, "c": 3, "override": r.override}


def test_call_package_rejects_star_args():
    def star(*args):
        return args

    with pytest.raises(errors.EvalError, match="args"):
        call_package_with({}, star)


def test_call_package_forces_only_what_is_taken():
    fn = Counter("cp")
    scope = AttrSet(
        {"cudaPackages": lazy(fn), "stdenv": "sd", "broken": lazy(boom())}, name="pkgs"
    )
    call_package_with(scope, saxpy)
    call_package_with(scope, saxpy)
    assert fn.calls == 1


def test_signature_is_cached_per_function(monkeypatch):
    import inspect

    def pkg(a):
        return a

    call_package_with({"a": 1}, pkg)
    calls = []
    real = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda f: calls.append(f) or real(f))
    for _ in range(5):
        call_package_with({"a": 1}, pkg)
    assert calls == []


def test_override_on_attrset_result():
    scope = {"cudaPackages": "cp", "stdenv": "sd"}
    r = call_package_with(scope, saxpy)
    r2 = r.override(enableFoo=True)
    assert r2.foo is True and r2.cuda == "cp"
    r3 = r2.override(lambda old: {"stdenv": old["stdenv"] + "!"})
    assert (r3.stdenv, r3.foo) == ("sd!", True)
    assert r.foo is False  # original untouched
    assert r3.attr_path == "saxpy"
    with pytest.raises(errors.EvalError, match="unexpected argument 'enableFo'"):
        r.override(enableFo=True)


class Package:
    def __init__(self, version, flavour="plain"):
        self.version = version
        self.flavour = flavour
        self.override = None

    def _with_override(self, override_fn):
        self.override = override_fn
        return self


def test_override_hook_on_objects():
    p = make_overridable(Package, {"version": "1.0"})
    assert p.version == "1.0"
    q = p.override(version="2.0")
    assert isinstance(q, Package) and q.version == "2.0"
    assert q.override(flavour="x").flavour == "x"


def test_plain_results_are_returned_unchanged():
    assert make_overridable(lambda a: a * 2, {"a": 21}) == 42
    assert make_overridable(lambda: None, {}) is None
    assert call_package_with({"a": "s"}, lambda a: a) == "s"


def values_without_override(s):
    return {k: v for k, v in s.to_dict().items() if k != "override"}


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers()), st.integers())
def test_override_idempotence(args, new_a):
    def pkg(a=0, b=0, c=0):
        return AttrSet({"a": a, "b": b, "c": c, "sum": a + b + c})

    x = make_overridable(pkg, args)
    assert values_without_override(x.override()) == values_without_override(x)
    assert values_without_override(x.override({})) == values_without_override(x)
    once = x.override(a=new_a)
    twice = once.override(a=new_a)
    assert values_without_override(once) == values_without_override(twice)
    assert once.a == new_a and once.sum == new_a + args.get("b", 0) + args.get("c", 0)


# --------------------------------------------------------------------------
# Scopes


def cuda_scope(final):
    return {
        "cudaMajorVersion": "12",
        "cuda_nvcc": lazy(lambda: final.call_package(lambda cudaMajorVersion: f"nvcc-{cudaMajorVersion}")),
        "saxpy": lazy(lambda: final.call_package(saxpy_in_scope)),
        "broken": lazy(boom("broken package")),
    }


def saxpy_in_scope(cuda_nvcc, stdenv, cudaMajorVersion, extra="none"):
    return AttrSet({"nvcc": cuda_nvcc, "stdenv": stdenv, "extra": extra}, name="saxpy")


OUTER = AttrSet({"stdenv": "gcc", "cudaMajorVersion": "outer", "lib": "lib"}, name="pkgs")


def test_make_scope_is_lazy_and_a_scope():
    s = make_scope(OUTER, cuda_scope, name="cudaPackages")
    assert isinstance(s, Scope)
    assert list(s) == ["cudaMajorVersion", "cuda_nvcc", "saxpy", "broken"]
    assert s.packages is cuda_scope
    assert s.auto_args is OUTER
    assert repr(s).startswith("<Scope cudaPackages:")


def test_scope_call_package_scope_wins_over_outer():
    s = make_scope(OUTER, cuda_scope, name="cudaPackages")
    assert s.cuda_nvcc == "nvcc-12"
    assert s.saxpy.nvcc == "nvcc-12"
    assert s.saxpy.stdenv == "gcc"
    with pytest.raises(ValueError, match="broken package"):
        s.broken
    assert s.saxpy.extra == "none"
    assert s.call_package(saxpy_in_scope, extra="x").extra == "x"


def test_scope_methods_are_not_slots():
    s = make_scope(OUTER, cuda_scope)
    for method in ("call_package", "new_scope", "override_scope", "packages", "auto_args"):
        assert method not in s


def test_override_scope_leaves_original_untouched():
    s = make_scope(OUTER, cuda_scope, name="cudaPackages")
    assert s.saxpy.nvcc == "nvcc-12"
    t = s.override_scope(lambda final, prev: {"cudaMajorVersion": "13"})
    assert isinstance(t, Scope) and t.attr_path == "cudaPackages"
    assert t.saxpy.nvcc == "nvcc-13"
    assert s.saxpy.nvcc == "nvcc-12"
    u = t.override_scope(
        lambda final, prev: {"cuda_nvcc": lazy(lambda: prev.cuda_nvcc + "-patched")}
    )
    assert u.saxpy.nvcc == "nvcc-13-patched"
    assert t.cuda_nvcc == "nvcc-13"


def test_new_scope_extra_wins():
    s = make_scope(OUTER, cuda_scope, name="cudaPackages")
    call = s.new_scope({"stdenv": "clang", "cuda_nvcc": "mine"})
    r = call(saxpy_in_scope)
    assert (r.stdenv, r.nvcc) == ("clang", "mine")
    assert call(saxpy_in_scope, stdenv="icc").stdenv == "icc"


def test_scope_call_package_missing_argument_suggests_scope_names():
    s = make_scope(OUTER, cuda_scope, name="cudaPackages")

    def pkg(cuda_nvc):
        return cuda_nvc

    with pytest.raises(errors.MissingArgumentError, match='did you mean "cuda_nvcc"'):
        s.call_package(pkg)


def test_scope_result_override_keeps_scope():
    def make(tag="a"):
        return make_scope(OUTER, lambda final: {"tag": tag})

    s = call_package_with({}, make)
    assert isinstance(s, Scope) and s.tag == "a"
    t = s.override(tag="b")
    assert isinstance(t, Scope) and t.tag == "b"
    assert "override" in t


def test_scope_cycle_names_paths():
    s = make_scope(
        OUTER,
        lambda final: {
            "a": lazy(lambda: final.call_package(lambda b: b)),
            "b": lazy(lambda: final.call_package(lambda a: a)),
        },
        name="cp",
    )
    with pytest.raises(errors.InfiniteRecursionError, match=r"cp\.a -> cp\.b -> cp\.a"):
        s.a


def test_eager_call_package_during_scope_definition_is_recursion():
    with pytest.raises(errors.InfiniteRecursionError):
        make_scope(OUTER, lambda final: {"x": final.call_package(lambda stdenv: stdenv)})


def test_fixpoint_re_exports_the_three_modules_names():
    """The model is split as Nixpkgs' lib (lazy values, fixed points, customisation);
    `cudapkgs.lib.fixpoint` exports the same objects under every name it had."""
    from cudapkgs.lib import customisation, fixed_points, fixpoint
    from cudapkgs.lib import lazy as lazy_module

    homes = (lazy_module, fixed_points, customisation)
    for name in fixpoint.__all__:
        (home,) = [m for m in homes if name in m.__all__]
        assert getattr(fixpoint, name) is getattr(home, name), name
    assert sorted(fixpoint.__all__) == sorted(n for m in homes for n in m.__all__)
