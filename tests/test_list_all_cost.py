"""What a cold `cudapkgs list --all` evaluates (issue 34, item 4): counted, not timed.

Each test counts work the listing used to do and no longer does (its output unchanged: the
other tests of `list` and the comparisons in docs/bench-speed.md); each fails on the tree before.
"""

from __future__ import annotations

import collections
import types

import pytest

import cudapkgs
from cudapkgs.errors import EvalError
from cudapkgs.inventory import list_all
from cudapkgs.lib.fixpoint import AttrSet
from cudapkgs.meta import assertion_stream, assertions_hold, source_meta


class _Config:
    def __init__(self, unfree: bool = False) -> None:
        self.unfree = unfree

    def permits_unfree(self, _package):
        return self.unfree


def _package(stream_or_list, license=None, config=None):
    passthru = AttrSet({"brokenAssertions": stream_or_list})
    final = AttrSet({"name": "p-1", "passthru": passthru})
    meta = source_meta(final, config or _Config(), "x86_64-linux",
                       {"platforms": ["x86_64-linux"], **({"license": license} if license else {})})
    return types.SimpleNamespace(meta=meta)


def test_assertions_hold_stops_at_the_first_failed_assertion_and_agrees_with_meta_broken():
    read: list[int] = []

    def stream():
        for i, ok in enumerate([True, False, None]):
            read.append(i)
            if ok is None:
                raise EvalError("past the first failure")
            yield {"message": f"assertion {i}", "assertion": ok}

    package = _package(assertion_stream(stream))
    assert assertions_hold(package) is False and read == [0, 1]
    assert assertions_hold(package) is False and read == [0, 1]  # remembered
    # meta.broken itself still reads the whole list (Nixpkgs' _mkMetaBroken folds every assertion)
    with pytest.raises(EvalError, match="past the first failure"):
        package.meta["broken"]

    holding = _package(assertion_stream(lambda: iter([{"message": "m", "assertion": True}] * 3)))
    assert assertions_hold(holding) is True and holding.meta["broken"] is False
    failing = _package(assertion_stream(lambda: iter([{"message": "m", "assertion": False}])))
    assert assertions_hold(failing) is False and failing.meta["broken"] is True


def test_assertions_hold_reads_a_plain_list_or_an_overridden_meta_as_it_is():
    package = _package([{"message": "a", "assertion": True}, {"message": "b", "assertion": False}])
    assert assertions_hold(package) is False
    overridden = types.SimpleNamespace(meta=AttrSet({"broken": False}))
    assert assertions_hold(overridden) is True
    forced = _package(assertion_stream(lambda: iter([{"message": "a", "assertion": False}])))
    assert forced.meta["broken"] is True  # forced first: the flag's value is read
    assert assertions_hold(forced) is False


def test_list_all_proves_other_sets_torch_broken_by_its_first_failed_assertion(manifests_dir, monkeypatch):
    # torchvision's and torchaudio's broken messages name "the sets that have it": torch-bin of every CUDA
    # set of torch's major. Without allowUnfree each is broken by its first component (unfree); the
    # listing read every component's availability message in each of those sets (24 in 12_6 and 12_8).
    import cudapkgs.pkgs.python_modules.cuda_fit as cuda_fit

    messages: collections.Counter[str] = collections.Counter()
    real = cuda_fit._unavailable

    def counting(label, package):
        messages[label.split(".")[0]] += 1
        return real(label, package)

    monkeypatch.setattr(cuda_fit, "_unavailable", counting)
    pkgs = cudapkgs.import_pkgs(system="x86_64-linux")
    rows = {row["attr"]: row for row in list_all(pkgs)}
    assert "no set here has it" in rows["python3Packages.torchvision"]["status"]
    default = pkgs.cudaPackages.attr_path
    others = {name: n for name, n in messages.items() if name.startswith("cudaPackages_") and name != default}
    assert others and all(n <= 1 for n in others.values()), messages


def test_an_unfree_package_not_allowed_is_unavailable_without_its_assertions():
    # Nixpkgs' check-meta decides "unfree" before it reads meta.broken (checkValidity)
    from cudapkgs import licenses

    read: list[int] = []

    def stream():
        read.append(0)
        yield {"message": "a component is available", "assertion": False}

    unfree = _package(assertion_stream(stream), license=licenses.unfreeRedistributable)
    assert unfree.meta["available"] is False and read == []
    assert unfree.meta["broken"] is True and read == [0]  # still there when asked
    allowed = _package(assertion_stream(stream), license=licenses.unfreeRedistributable, config=_Config(unfree=True))
    assert allowed.meta["available"] is False and read == [0, 0]
    free = _package(assertion_stream(lambda: iter([{"message": "m", "assertion": True}])), license=licenses.mit)
    assert free.meta["available"] is True


def test_an_unfree_component_not_allowed_is_unavailable_without_its_source_check(manifests_dir, monkeypatch):
    import cudapkgs.cuda.build_redist as build_redist

    calls: list[str] = []
    real = build_redist._unsupplied

    def counting(final, config):
        calls.append(final.pname)
        return real(final, config)

    monkeypatch.setattr(build_redist, "_unsupplied", counting)
    cudart = cudapkgs.import_pkgs(system="x86_64-linux").cudaPackages.cuda_cudart
    assert cudart.meta.available is False and calls == []
    allowed = cudapkgs.import_pkgs(config={"allowUnfree": True}, system="x86_64-linux").cudaPackages.cuda_cudart
    assert allowed.meta.available is True and calls == ["cuda_cudart"]


@pytest.mark.parametrize("config", [{}, {"allowUnfree": True}, {"allowUnfree": True, "cudaSupport": True},
                                    {"allowUnfreePredicate": "cuda", "cudaSupport": True}])
def test_list_all_computes_no_derivation_and_no_store_path(manifests_dir, monkeypatch, config):
    # A listing reads names, versions, licenses, outputs and meta (as `nix search` and `nix-env -qa` do:
    # meta, never drvPath). opencv4 read its interpreter's outPath (one derivation and its closure's paths;
    # with cudaSupport, the propagated CUDA libraries' too) where it built its attributes.
    import cudapkgs.derivation as derivation
    import cudapkgs.store.paths as paths

    made: collections.Counter[str] = collections.Counter()
    real_init = derivation.Derivation.__init__

    def counting_init(self, *args, **kwargs):
        made["Derivation"] += 1
        return real_init(self, *args, **kwargs)

    monkeypatch.setattr(derivation.Derivation, "__init__", counting_init)
    for name in ("make_store_path", "make_store_path_from_digest", "fixed_output_path"):
        module = derivation if name == "fixed_output_path" else paths
        real = getattr(module, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            made[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
    rows = list_all(cudapkgs.import_pkgs(config=config, system="x86_64-linux"))
    assert any(row["attr"] == "python3Packages.opencv4" and row["version"] for row in rows)
    assert not made, made
    # the counting sees a derivation when one is made
    cudapkgs.import_pkgs(config=config, system="x86_64-linux").python3Packages.opencv4.drvPath
    assert made["Derivation"] >= 1


def test_opencv4_with_cuda_is_listed_by_its_own_meta_as_nccl_is(manifests_dir):
    # With cudaSupport and no allowUnfree, opencv4's row was an error (its attributes read cuda_cudart's
    # outPath, which refuses the unfree license) where nccl's, which needs cudart as much, says "available":
    # meta.available is the package's own check (Nixpkgs' check-meta); an input's license is refused when
    # the derivation is made (a build), not by a listing.
    rows = {row["attr"]: row for row in list_all(cudapkgs.import_pkgs(config={"cudaSupport": True},
                                                                       system="x86_64-linux"))}
    assert rows["cudaPackages.nccl"]["status"] == "available"
    for attr in ("opencv4", "python3Packages.opencv4"):
        assert rows[attr]["status"] == "available" and rows[attr]["version"] == "4.11.0", rows[attr]
    from cudapkgs.errors import UnfreeLicenseError

    with pytest.raises(UnfreeLicenseError):  # the build still refuses it
        cudapkgs.import_pkgs(config={"cudaSupport": True}, system="x86_64-linux").opencv4.drvPath


def test_a_package_attribute_is_read_without_a_second_failed_lookup(manifests_dir, monkeypatch):
    # `pkg.version` on a Package reached AttrSet.__getattr__ through getattr(attrs, name): a second
    # failed class lookup, whose AttributeError CPython 3.11 formats and discards. Read as an item now;
    # names AttrSet's class has (get, update, ...) still go through getattr, as before.
    from cudapkgs.package import mk_package

    calls: list[str] = []
    real = AttrSet.__getattr__

    def counting(self, attr):
        calls.append(attr)
        return real(self, attr)

    monkeypatch.setattr(AttrSet, "__getattr__", counting)
    package = mk_package(lambda final: {"pname": "p", "version": "1", "get": "an attribute named get",
                                        "passthru": {"extra": 2}})
    assert (package.pname, package.version, package.extra) == ("p", "1", 2)
    assert calls == []
    assert callable(package.get)  # AttrSet's method, as getattr(attrs, "get") always gave
    with pytest.raises(AttributeError, match="'nope' missing"):
        package.nope
    assert calls == ["nope"]


def test_list_all_reads_each_rows_meta_once_and_the_prebuilt_wheels_once_a_set(manifests_dir, monkeypatch):
    from cudapkgs.config import Config
    from cudapkgs.package import Package

    reads: collections.Counter[str] = collections.Counter()
    real_item, real_attr, real_config = Package.__getitem__, Package.__getattr__, Config.__getattr__

    def item(self, attr):
        reads[attr] += 1
        return real_item(self, attr)

    def attribute(self, attr):
        reads[attr] += 1
        return real_attr(self, attr)

    def config(self, key):
        reads[f"config.{key}"] += 1
        return real_config(self, key)

    import cudapkgs.cuda.scope as scope

    made: list[int] = []

    class Members(dict):  # the source-built members, walked once by each CUDA scope made
        def items(self):
            made.append(1)
            return super().items()

    monkeypatch.setattr(Package, "__getitem__", item)
    monkeypatch.setattr(Package, "__getattr__", attribute)
    monkeypatch.setattr(Config, "__getattr__", config)
    monkeypatch.setattr(scope, "FROM_SOURCE", Members(scope.FROM_SOURCE))
    pkgs = cudapkgs.import_pkgs(system="x86_64-linux")
    rows = list_all(pkgs)
    sets = len(made)  # the CUDA scopes the listing made (its own sets, the companions' evidence's)
    assert sets >= 8
    # a row read meta three times (its license, its availability, its status); other readers (the
    # companions' evidence, assertions) read some packages' meta too, but far fewer than the rows
    assert reads["meta"] < 1.5 * len(rows), (reads["meta"], len(rows))
    # one read a set made, not one a source-built member (14 a set)
    assert reads["config.prebuiltWheels"] <= sets, (reads["config.prebuiltWheels"], sets)
