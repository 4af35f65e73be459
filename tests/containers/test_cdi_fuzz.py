"""Hostile CDI input, generated: the validator and `cdi inject` never crash or hang (issue 8, part 11).

Bounded: a fixed number of examples, no deadline (no wall-clock budgets in unit tests).
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudapkgs.containers.errors import CdiError
from cudapkgs.containers.validate import loads, validate

_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=30)
_keys = st.sampled_from(["cdiVersion", "kind", "devices", "containerEdits", "name", "deviceNodes", "mounts", "hooks", "env", "path", "hostPath", "annotations", "x"])
_specish = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=5)), max_leaves=40)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INJECT_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@SETTINGS
@given(st.one_of(_json, _specish))
def test_validate_never_raises(doc):
    problems = validate(doc)
    assert all(p.path.startswith("$") and p.message for p in problems)


@SETTINGS
@given(st.text(max_size=200))
def test_loads_never_raises_on_text(text):
    doc, problems = loads(text)
    assert doc is None or not problems


@INJECT_SETTINGS
@given(_specish)
def test_inject_refuses_cleanly(tmp_path_factory, doc):
    from cudapkgs.containers.inject import inject

    base = tmp_path_factory.mktemp("fuzz")
    (base / "bundle" / "rootfs").mkdir(parents=True)
    (base / "bundle" / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": {"args": ["sh"]}, "root": {"path": "rootfs"}}))
    spec = base / "spec.json"
    spec.write_text(json.dumps(doc))
    try:
        inject(str(spec), ["nvidia.com/gpu=0"], str(base / "bundle"))
    except CdiError:
        pass


_paths = st.sampled_from(["/dev/null", "/dev/zero", "/nonexistent", "/etc", "/", "relative", "/dev/../dev/null", "", "/proc/self/fd/0"])
_node = st.fixed_dictionaries({"path": _paths}, optional={"hostPath": _paths, "type": st.sampled_from(["", "c", "b", "p", "u", "x"]), "major": st.integers(-2, 300), "permissions": st.sampled_from(["", "rw", "none", "q"])})
_mount = st.fixed_dictionaries({"hostPath": _paths, "containerPath": _paths}, optional={"options": st.lists(st.sampled_from(["ro", "bind", "rbind", "nosuid"]), max_size=3), "type": st.sampled_from(["", "bind", "tmpfs"])})
_edits = st.fixed_dictionaries({}, optional={"env": st.lists(st.sampled_from(["A=1", "A=2", "B=", "=x", "C"]), max_size=3), "deviceNodes": st.lists(_node, max_size=3), "mounts": st.lists(_mount, max_size=3), "additionalGids": st.lists(st.integers(0, 5), max_size=3)})


@INJECT_SETTINGS
@given(_edits, _edits)
def test_inject_of_well_formed_specs_with_hostile_fields(tmp_path_factory, common, device):
    """Specs that pass the schema's shape but name odd host paths: only clean CdiErrors, or a valid config."""
    from cudapkgs.containers.inject import inject

    base = tmp_path_factory.mktemp("fuzz")
    (base / "bundle" / "rootfs").mkdir(parents=True)
    (base / "bundle" / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["A=0"]}, "root": {"path": "rootfs"}}))
    spec = base / "spec.json"
    spec.write_text(json.dumps({"cdiVersion": "0.7.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": device or {"env": ["Z=1"]}}], "containerEdits": common}))
    try:
        _, config = inject(str(spec), ["0"], str(base / "bundle"))
    except CdiError:
        return
    for dev in config.get("linux", {}).get("devices", []):
        assert dev["type"] in ("c", "b", "p", "u") and dev["path"].startswith("/")
