"""`cdi snippet`: what it prints is accepted by the engines' own schemas and parsers.

Compose: the Compose Specification's JSON schema (tests/data/compose/, see SOURCE.md), and
docker-compose's own `config` when it is installed.  Docker: `dockerd --validate` when it is
installed (Docker >= 23).  Podman: `podman run --device nvidia.com/gpu=…` was run with a real
podman 4.3 on the H200 (docs/cdi-podman.md); here its flags are checked for shape.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cudapkgs.cli import main

SCHEMA = Path(__file__).parents[1] / "data" / "compose" / "compose-spec.json"


def _validator():
    from jsonschema import Draft7Validator

    return Draft7Validator(json.loads(SCHEMA.read_text()))


def _snippet(capsys, *args) -> str:
    assert main(["cdi", "snippet", *args]) == 0
    return capsys.readouterr().out


def test_compose_snippet_validates_against_the_compose_spec_schema(capsys):
    doc = yaml.safe_load(_snippet(capsys, "compose", "--service", "app", "--device", "0,all"))
    doc["services"]["app"]["image"] = "ubuntu"
    assert list(_validator().iter_errors(doc)) == []
    devices = doc["services"]["app"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "cdi", "capabilities": ["gpu"], "device_ids": ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]}]
    # the check bites: the form without capabilities (as some guides show it) is rejected
    del devices[0]["capabilities"]
    assert any("'capabilities' is a required property" in e.message for e in _validator().iter_errors(doc))


def test_compose_snippet_with_docker_compose_config(tmp_path, capsys):
    tool = shutil.which("docker-compose")
    if not tool:
        pytest.skip("docker-compose is not installed here; the schema test covers the format")
    compose = tmp_path / "compose.yaml"
    doc = yaml.safe_load(_snippet(capsys, "compose", "--service", "app"))
    doc["services"]["app"]["image"] = "ubuntu"
    compose.write_text(yaml.safe_dump(doc))
    done = subprocess.run([tool, "-f", str(compose), "config", "-q"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_docker_daemon_snippet(tmp_path, capsys):
    conf = json.loads(_snippet(capsys, "docker-daemon"))
    assert conf == {"features": {"cdi": True}, "cdi-spec-dirs": ["/etc/cdi", "/var/run/cdi"]}
    dockerd = shutil.which("dockerd")
    if dockerd:
        path = tmp_path / "daemon.json"
        path.write_text(json.dumps(conf))
        done = subprocess.run([dockerd, "--validate", "--config-file", str(path)], capture_output=True, text=True, check=False)
        if "unknown flag: --validate" not in done.stderr:
            assert done.returncode == 0, done.stderr


def test_run_flags(capsys):
    assert _snippet(capsys, "podman", "--device", "0", "--device", "GPU-8836a272-04e4-4e91-b0a8-d9b5b8b7a1a7") == (
        "--device nvidia.com/gpu=0 --device nvidia.com/gpu=GPU-8836a272-04e4-4e91-b0a8-d9b5b8b7a1a7\n"
    )
    assert main(["cdi", "snippet", "docker", "--device", "bad name"]) == 1


def test_the_example_compose_file_in_docs_validates():
    example = Path(__file__).parents[2] / "docs" / "examples" / "compose-gpu.yaml"
    doc = yaml.safe_load(example.read_text())
    assert list(_validator().iter_errors(doc)) == []
    ids = [d["device_ids"] for s in doc["services"].values() for d in s["deploy"]["resources"]["reservations"]["devices"]]
    assert ids == [["nvidia.com/gpu=all"], ["nvidia.com/gpu=0"]]
