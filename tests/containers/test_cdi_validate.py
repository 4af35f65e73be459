"""Validation: the schema plus the CDI Go loader's checks, each problem pointing at its field."""

from __future__ import annotations

import copy
import json

import pytest
from cdi_fakes import REFERENCE

from cudapkgs.containers.validate import host_problems, loads, validate, validate_file


@pytest.fixture
def spec() -> dict:
    return json.loads((REFERENCE / "nvidia-cdi-example-golden-1gpu.json").read_text())


def test_golden_spec_is_valid(spec):
    assert validate(spec) == []


def _set(doc: dict, path: str, value) -> None:
    *parents, last = path.split("/")
    for part in parents:
        doc = doc[int(part)] if part.isdigit() else doc[part]
    if isinstance(doc, list):
        doc[int(last)] = value
    else:
        doc[last] = value


@pytest.mark.parametrize(
    ("path", "value", "where", "message"),
    [
        ("cdiVersion", "0.4.0", "$.cdiVersion", "at least v0.5.0"),
        ("cdiVersion", "0.9.0", "$.cdiVersion", "unknown CDI version"),
        ("cdiVersion", 5, "$.cdiVersion", "is not of type 'string'"),
        ("kind", "nvidia.com", "$.kind", "vendor/class"),
        ("kind", "nvidia.com/gpu/x", "$.kind", "invalid class"),
        ("kind", "1nvidia.com/gpu", "$.kind", "invalid vendor"),
        ("devices/0/name", "0/1", "$.devices[0].name", "invalid device name"),
        ("devices/0/name", "-0", "$.devices[0].name", "invalid device name"),
        ("devices/1/name", "0", "$.devices[1].name", "defined twice"),
        ("devices/0/containerEdits", {}, "$.devices[0].containerEdits", "must not be empty"),
        ("devices/0/extra", 1, "$.devices[0].extra", "unknown field"),
        ("containerEdits/devicenodes", [], "$.containerEdits.devicenodes", 'did you mean "deviceNodes"'),
        ("containerEdits/env/0", "NOVALUE", "$.containerEdits.env[0]", "NAME=value"),
        ("containerEdits/env/1", 3, "$.containerEdits.env[1]", "must be a string"),
        ("containerEdits/deviceNodes/0/path", "dev/nvidiactl", "$.containerEdits.deviceNodes[0].path", "not an absolute path"),
        ("containerEdits/deviceNodes/0/type", "x", "$.containerEdits.deviceNodes[0].type", "invalid device type"),
        ("containerEdits/deviceNodes/0/permissions", "rwx", "$.containerEdits.deviceNodes[0].permissions", "rwm"),
        ("containerEdits/deviceNodes/0/fileMode", -1, "$.containerEdits.deviceNodes[0].fileMode", "non-negative"),
        ("containerEdits/deviceNodes/0/uid", -1, "$.containerEdits.deviceNodes[0].uid", "less than the minimum"),
        ("containerEdits/hooks/0/hookName", "precreate", "$.containerEdits.hooks[0].hookName", "invalid hook name"),
        ("containerEdits/hooks/0/path", "nvidia-cdi-hook", "$.containerEdits.hooks[0].path", "not an absolute path"),
        ("containerEdits/hooks/0/timeout", "1s", "$.containerEdits.hooks[0].timeout", "is not of type 'integer'"),
        ("containerEdits/mounts/0/containerPath", "", "$.containerEdits.mounts[0].containerPath", "needs a containerPath"),
        ("containerEdits/mounts/1/hostPath", "relative/lib.so", "$.containerEdits.mounts[1].hostPath", "not an absolute path"),
        ("annotations", {"bad key!": "x"}, "$.annotations.bad key!", "invalid annotation key"),
        ("devices", [], "$.devices", "at least one device"),
    ],
)
def test_each_problem_points_at_its_field(spec, path, value, where, message):
    _set(spec, path, value)
    problems = validate(spec)
    assert any(p.path == where and message in p.message for p in problems), problems


def test_missing_required_fields(spec):
    del spec["kind"]
    del spec["devices"][0]["name"]
    paths = {(p.path, p.message) for p in validate(spec)}
    assert ("$", "'kind' is a required property") in paths
    assert ("$.devices[0]", "'name' is a required property") in paths


def test_tmpfs_mounts_need_no_absolute_source(spec):
    spec["containerEdits"]["mounts"].append({"hostPath": "tmpfs", "containerPath": "/scratch", "type": "tmpfs"})
    spec["cdiVersion"] = "0.5.0"
    assert validate(spec) == []


def test_file_mode_is_accepted_although_the_schema_lacks_it(spec):
    spec["containerEdits"]["deviceNodes"][0]["fileMode"] = 0o666
    assert validate(spec) == []


def test_a_valid_spec_stays_valid_after_a_round_trip_through_yaml(spec, tmp_path):
    import yaml

    path = tmp_path / "nvidia.yaml"
    path.write_text(yaml.safe_dump(spec))
    doc, problems = validate_file(path)
    assert problems == [] and doc == spec


def test_yml_files_are_flagged(spec, tmp_path):
    path = tmp_path / "nvidia.yml"
    path.write_text(json.dumps(spec))
    _, problems = validate_file(path)
    assert [p.message for p in problems] == ["runtimes only load specs named *.json or *.yaml, not 'nvidia.yml'"]


def test_broken_json_names_the_line():
    doc, problems = loads('{\n  "cdiVersion": "0.5.0",\n  "kind": \n}')
    assert doc is None and "line 4" in problems[0].message


def test_host_problems(spec, tmp_path):
    existing = tmp_path / "libcuda.so.1"
    existing.write_text("")
    spec["containerEdits"]["mounts"][0]["hostPath"] = str(existing)
    problems = {p.path for p in host_problems(copy.deepcopy(spec))}
    assert "$.containerEdits.mounts[0].hostPath" not in problems
    assert "$.containerEdits.mounts[1].hostPath" in problems
    assert "$.devices[0].containerEdits.deviceNodes[0].hostPath" in problems
