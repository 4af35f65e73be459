"""Paths that refer to each other in a cycle are refused wherever they are registered (build, import,
substitution), as Nix refuses them; nothing waits forever on such a closure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudapkgs.store import registration
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.cycles import ReferenceCycleError, find_cycle, topological_order
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store
from cudapkgs.store.transfer import export_closure, import_closure


def test_topological_order_and_nix_s_message():
    assert topological_order({"b": ["a"], "a": ["a"], "c": ["b", "elsewhere"]}) == ["a", "b", "c"]  # self-refs pass
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) is not None
    # Depth first from the first path in sorted order, as Nix's topoSort: out, then dev, which leads back to out.
    with pytest.raises(ReferenceCycleError, match=r"^cycle detected in the references of output 'out' from output 'dev'$"):
        topological_order({"/s/x": ["/s/x-dev"], "/s/x-dev": ["/s/x"]}, {"/s/x": "out", "/s/x-dev": "dev"})


def _outputs(store: Store, name: str) -> tuple[str, str]:
    return (make_store_path(store.store_dir, "output:out", name, name),
            make_store_path(store.store_dir, "output:dev", name, f"{name}-dev"))


def _write_cross_references(out: str, dev: str, both: bool):
    def build(dirs: dict[str, Path]) -> None:
        for path, directory in dirs.items():
            directory.mkdir()
        (dirs[dev] / "lib.pc").write_text(f"libdir={out}/lib\n")  # dev -> out: fine
        if both:
            (dirs[out] / "nix-support").write_text(f"{dev}\n")  # out -> dev as well: a cycle
    return build


def test_outputs_that_refer_to_each_other_are_a_build_error(tmp_path):
    # Before, add_outputs registered both (and `copy --to` uploaded them); Nix refuses such a build:
    # "cycle detected in the references of output 'dev' from output 'out'".
    with Store.open(tmp_path / "store") as store:
        out, dev = _outputs(store, "one-way")
        store.add_outputs([out, dev], _write_cross_references(out, dev, both=False), names={out: "out", dev: "dev"})
        assert store.references(dev) == [out] and store.references(out) == []
        out, dev = _outputs(store, "cyclic")
        with pytest.raises(ReferenceCycleError, match=r"cycle detected in the references of output '(dev|out)' from "
                                                      r"output '(out|dev)'"):
            store.add_outputs([out, dev], _write_cross_references(out, dev, both=True), names={out: "out", dev: "dev"})
        assert not store.is_valid(out) and not store.is_valid(dev)
        assert not os.path.lexists(out) and not os.path.lexists(dev)
        with pytest.raises(ReferenceCycleError, match=f"cycle detected in the references of '{tmp_path}/store/"):
            store.add_outputs([out, dev], _write_cross_references(out, dev, both=True))


def _cyclic_store(store_dir: Path, monkeypatch) -> tuple[str, str]:
    """A store holding an out <-> dev cycle, as the code before this change registered it."""
    with monkeypatch.context() as patched:
        patched.setattr(registration, "topological_order", lambda *args, **kwargs: [])
        with Store.open(store_dir) as store:
            out, dev = _outputs(store, "cyclic")
            store.add_outputs([out, dev], _write_cross_references(out, dev, both=True))
            assert set(store.references(out)) == {dev} and set(store.references(dev)) == {out}
    return out, dev


def _empty(store_dir: Path) -> None:
    import shutil

    for dirpath, _, _ in os.walk(store_dir):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(store_dir)


def test_import_refuses_a_cycle_before_extracting_anything(tmp_path, monkeypatch):
    store_dir = tmp_path / "store"
    out, dev = _cyclic_store(store_dir, monkeypatch)
    with Store.open(store_dir) as store:
        export_closure(store, [out], tmp_path / "cyclic.tar")
    _empty(store_dir)
    with Store.open(store_dir) as store:
        with pytest.raises(ReferenceCycleError, match=r"cyclic\.tar: cycle detected in the references of .*nothing was imported"):
            import_closure(store, tmp_path / "cyclic.tar")
        assert store.all_paths() == []


def test_import_registers_dependencies_first_whatever_the_manifest_order(tmp_path):
    store_dir = tmp_path / "store"
    with Store.open(store_dir) as store:
        out, dev = _outputs(store, "one-way")
        store.add_outputs([out, dev], _write_cross_references(out, dev, both=False))
        export_closure(store, [dev], tmp_path / "ok.tar")
    _empty(store_dir)
    import tarfile

    with tarfile.open(tmp_path / "ok.tar") as good, tarfile.open(tmp_path / "reversed.tar", "w") as bad:
        for member in good.getmembers():
            data = good.extractfile(member).read() if member.isfile() else None
            if member.name == "cudapkgs-export.json":
                manifest = json.loads(data)
                manifest["paths"].reverse()  # the referrer first
                data = json.dumps(manifest).encode()
                member.size = len(data)
            import io

            bad.addfile(member, io.BytesIO(data) if data is not None else None)
    with Store.open(store_dir) as store:
        assert sorted(import_closure(store, tmp_path / "reversed.tar")) == sorted([out, dev])


def test_copy_from_a_cache_with_a_cycle_refuses_it_and_ends(tmp_path, monkeypatch):
    # Before, `cudapkgs copy --from` of this closure waited forever: each path waited for the other's registration.
    store_dir = tmp_path / "store"
    out, dev = _cyclic_store(store_dir, monkeypatch)
    key = generate("cycle-test-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    with Store.open(store_dir) as store:
        cache.upload_closure(store, [out], secret_key=key)
    _empty(store_dir)
    warnings: list[str] = []
    subs = Substituters([cache], [key.public], warn=warnings.append)
    with Store.open(store_dir) as store:
        assert subs.query(store, [out]) == {}  # not substitutable: the plan builds it instead
        assert any("cycle detected in the references of" in w for w in warnings)
        found = {p: subs.lookup(p) for p in (out, dev)}
        with pytest.raises(ReferenceCycleError):
            subs.fetch(store, list(found.values()))  # refused before any download, not a wait
        assert store.all_paths() == []
    env = {**os.environ, "CUDAPKGS_STORE": str(store_dir), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-m", "cudapkgs", "copy", "--from", f"file://{tmp_path}/cache",
                           "--trusted-public-key", key.public.to_string() if hasattr(key.public, "to_string")
                           else str(key.public), out], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "cycle detected in the references of" in done.stderr and "Traceback" not in done.stderr
