"""`cudapkgs cdi inject`: CDI edits applied to an OCI bundle as the CDI reference library does.

Expected values follow cncf-tags/container-device-interface @05ae4b5b
(pkg/cdi/container-edits.go Apply, container-edits_unix.go fillMissingInfo,
internal/ociedit/spec_editor.go, pkg/cdi/cache.go InjectDevices).  Host device
nodes are /dev/null (1:3) and /dev/zero (1:5), which every Linux machine has.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from cudapkgs.cli import main
from cudapkgs.containers.errors import CdiError
from cudapkgs.containers.inject import inject

NULL = os.stat("/dev/null")
ZERO = os.stat("/dev/zero")


def _dev(st):
    return os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)


@pytest.fixture
def bundle(tmp_path):
    b = tmp_path / "bundle"
    (b / "rootfs/usr/lib").mkdir(parents=True)
    config = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 1000, "gid": 100}, "args": ["sh"], "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"], "cwd": "/"},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}, {"destination": "/a/b/c", "source": "/tmp", "options": ["bind"]}],
        "linux": {"devices": [{"path": "/dev/nvidia0", "type": "c", "major": 9, "minor": 9}]},
    }
    (b / "config.json").write_text(json.dumps(config))
    return b


def _spec(tmp_path, name="nvidia.json", kind="nvidia.com/gpu", devices=None, edits=None, version="0.7.0"):
    lib = tmp_path / "libcuda.so.1"
    lib.write_text("")
    doc = {
        "cdiVersion": version,
        "kind": kind,
        "devices": devices
        or [
            {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}], "additionalGids": [44, 0]}},
            {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}], "additionalGids": [44]}},
        ],
        "containerEdits": edits
        or {
            "env": ["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib"],
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": "/dev/zero", "permissions": "rw"}],
            "mounts": [
                {"hostPath": str(lib), "containerPath": "/usr/lib/libcuda.so.1", "options": ["ro", "nosuid", "nodev", "bind"]},
                {"hostPath": str(tmp_path), "containerPath": "/x", "options": ["ro", "bind"]},
            ],
            "hooks": [
                {"hookName": "createContainer", "path": "/usr/bin/hook", "args": ["hook", "update-ldcache"], "env": ["DEBUG=0"]},
                {"hookName": "startContainer", "path": "/usr/bin/hook2", "timeout": 5},
            ],
        },
    }
    path = tmp_path / "specs" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_inject_applies_spec_then_device_edits_as_the_reference_library(tmp_path, bundle):
    spec = _spec(tmp_path)
    report, config = inject(str(spec), ["nvidia.com/gpu=0"], str(bundle))
    assert json.loads((bundle / "config.json").read_text()) == config
    # env: an existing NAME is replaced in place, a new one appended
    assert config["process"]["env"] == ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib"]
    major, minor, mode = _dev(NULL)
    zmajor, zminor, zmode = _dev(ZERO)
    # devices: numbers and mode from an lstat of the host node; uid/gid from a non-root process user;
    # the bundle's own /dev/nvidia0 (9:9) is replaced
    assert config["linux"]["devices"] == [
        {"path": "/dev/nvidiactl", "type": "c", "major": zmajor, "minor": zminor, "fileMode": zmode, "uid": 1000, "gid": 100},
        {"path": "/dev/nvidia0", "type": "c", "major": major, "minor": minor, "fileMode": mode, "uid": 1000, "gid": 100},
    ]
    assert config["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": zmajor, "minor": zminor, "access": "rw"},
        {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"},
    ]
    # mounts: stably sorted by the number of "/" in the destination
    assert [m["destination"] for m in config["mounts"]] == ["/proc", "/x", "/a/b/c", "/usr/lib/libcuda.so.1"]  # equal depth keeps its order
    assert config["mounts"][3] == {"destination": "/usr/lib/libcuda.so.1", "source": str(tmp_path / "libcuda.so.1"), "options": ["ro", "nosuid", "nodev", "bind"]}
    assert config["hooks"] == {
        "createContainer": [{"path": "/usr/bin/hook", "args": ["hook", "update-ldcache"], "env": ["DEBUG=0"]}],
        "startContainer": [{"path": "/usr/bin/hook2", "timeout": 5}],
    }
    # additional GIDs: 0 skipped
    assert config["process"]["user"]["additionalGids"] == [44]
    assert (report.device_nodes, report.mounts, report.hooks, report.env) == (2, 2, 2, 2)


def test_spec_edits_are_applied_once_for_several_devices(tmp_path, bundle):
    _, config = inject(str(_spec(tmp_path)), ["0", "all"], str(bundle))
    assert len(config["hooks"]["createContainer"]) == 1
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]
    assert config["process"]["user"]["additionalGids"] == [44]  # added once
    assert len(config["linux"]["resources"]["devices"]) == 3  # one rule per injected node, as AddLinuxResourcesDevice appends


def test_permissions_none_gives_a_rule_without_access(tmp_path, bundle):
    spec = _spec(tmp_path, devices=[{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/null", "permissions": "none"}]}}], edits={"env": ["A=1"]})
    _, config = inject(str(spec), ["0"], str(bundle))
    assert "access" not in config["linux"]["resources"]["devices"][-1]


def test_directory_source_skips_a_bad_spec_and_reports_it(tmp_path, bundle, capsys):
    spec = _spec(tmp_path)
    (spec.parent / "broken.json").write_text("{not json")
    assert main(["cdi", "inject", str(spec.parent), "nvidia.com/gpu=all", "--bundle", str(bundle), "--json"]) == 0
    out = capsys.readouterr()
    assert "broken.json is ignored" in out.err
    assert json.loads(out.out)["devices"] == ["nvidia.com/gpu=all"]


def test_two_specs_claiming_one_device_is_an_error_naming_both(tmp_path, bundle):
    _spec(tmp_path, "a.json")
    _spec(tmp_path, "b.json")
    before = (bundle / "config.json").read_text()
    with pytest.raises(CdiError, match=r"conflicting device nvidia.com/gpu=0 \(specs .*a.json and .*b.json\)"):
        inject(str(tmp_path / "specs"), ["0"], str(bundle))
    assert (bundle / "config.json").read_text() == before


def test_unresolvable_device(tmp_path, bundle):
    with pytest.raises(CdiError, match="unresolvable CDI devices nvidia.com/gpu=7"):
        inject(str(_spec(tmp_path)), ["7"], str(bundle))


def test_conflicting_edits_are_errors(tmp_path, bundle):
    devices = [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}]}},
        {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/zero"}]}},
    ]
    spec = _spec(tmp_path, devices=devices, edits={"env": ["A=1"]})
    with pytest.raises(CdiError, match="conflicting CDI edits: device /dev/nvidia0"):
        inject(str(spec), ["0", "1"], str(bundle))
    devices = [{"name": "0", "containerEdits": {"env": ["A=2"]}}]
    with pytest.raises(CdiError, match="conflicting CDI edits: A is 'A=1'"):
        inject(str(_spec(tmp_path, devices=devices, edits={"env": ["A=1"]})), ["0"], str(bundle))


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"path": "/dev/nvidia0", "hostPath": "/nonexistent/nvidia0"}, "failed to stat CDI host device /nonexistent/nvidia0"),
        ({"path": "/dev/nvidia0", "hostPath": "/etc/hostname"}, "CDI host device /etc/hostname is not a device node"),
        ({"path": "/dev/nvidia0", "hostPath": "/dev/null", "type": "b"}, r"declared type 'b' but the host node is 'c'"),
    ],
)
def test_bad_host_device_nodes_are_refused_with_the_path(tmp_path, bundle, node, message):
    if not os.path.exists("/etc/hostname") and "hostname" in message:
        pytest.skip("/etc/hostname is absent here")
    spec = _spec(tmp_path, devices=[{"name": "0", "containerEdits": {"deviceNodes": [node]}}], edits={"env": ["A=1"]})
    with pytest.raises(CdiError, match=message):
        inject(str(spec), ["0"], str(bundle))


def test_missing_mount_source_is_refused(tmp_path, bundle):
    edits = {"mounts": [{"hostPath": "/nonexistent/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1", "options": ["ro", "bind"]}]}
    with pytest.raises(CdiError, match="mount source /nonexistent/libcuda.so.1"):
        inject(str(_spec(tmp_path, edits=edits)), ["0"], str(bundle))


def test_destinations_never_follow_a_symlink_out_of_the_rootfs(tmp_path, bundle):
    rootfs = bundle / "rootfs"
    os.symlink("/", rootfs / "usr/lib/up")  # absolute: the container's / (the rootfs), not the host's
    os.symlink("../../../../../../../../etc", rootfs / "etc2")
    edits = {
        "mounts": [
            {"hostPath": str(tmp_path), "containerPath": "/usr/lib/up/opt/m", "options": ["ro", "bind"]},
            {"hostPath": str(tmp_path), "containerPath": "/etc2/m", "options": ["ro", "bind"]},
        ]
    }
    report, config = inject(str(_spec(tmp_path, edits=edits)), ["0"], str(bundle))
    destinations = [m["destination"] for m in config["mounts"]]
    assert "/opt/m" in destinations and "/etc/m" in destinations
    assert ("/usr/lib/up/opt/m", "/opt/m") in report.rewritten


def test_destination_led_into_proc_by_a_symlink_is_refused(tmp_path, bundle):
    os.symlink("/proc/self", bundle / "rootfs/usr/lib/nvidia")
    edits = {"mounts": [{"hostPath": str(tmp_path), "containerPath": "/usr/lib/nvidia/libcuda.so", "options": ["ro", "bind"]}]}
    with pytest.raises(CdiError, match="leads it to /proc/self/libcuda.so; refused"):
        inject(str(_spec(tmp_path, edits=edits)), ["0"], str(bundle))


def test_config_json_symlink_is_refused(tmp_path, bundle):
    real = tmp_path / "elsewhere.json"
    real.write_text((bundle / "config.json").read_text())
    (bundle / "config.json").unlink()
    os.symlink(real, bundle / "config.json")
    with pytest.raises(CdiError, match="config.json"):
        inject(str(_spec(tmp_path)), ["0"], str(bundle))


def test_cli_dry_run_writes_nothing(tmp_path, bundle, capsys):
    before = (bundle / "config.json").read_text()
    assert main(["cdi", "inject", str(_spec(tmp_path)), "0", "--bundle", str(bundle), "--dry-run"]) == 0
    assert "would inject nvidia.com/gpu=0" in capsys.readouterr().err
    assert (bundle / "config.json").read_text() == before
    assert sorted(os.listdir(bundle)) == ["config.json", "rootfs"]


def test_cli_error_is_one_line(tmp_path, bundle, capsys):
    assert main(["cdi", "inject", str(tmp_path / "none.json"), "0", "--bundle", str(bundle)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such spec file or directory" in err


def test_repeated_env_in_one_list_takes_the_last_value(tmp_path, bundle):
    """The library's "empty spec, duplicate env vars use last value" (container-edits_test.go)."""
    spec = _spec(tmp_path, devices=[{"name": "0", "containerEdits": {"env": ["FOO=old", "FOO=new"]}}], edits={"env": ["A=1"]})
    _, config = inject(str(spec), ["0"], str(bundle))
    assert [e for e in config["process"]["env"] if e.startswith("FOO=")] == ["FOO=new"]


def test_bind_mounts_get_idmap_in_a_user_namespace(tmp_path, bundle):
    """The library's "mount added to container with Linux user namespace and uid/gid mappings"."""
    config = json.loads((bundle / "config.json").read_text())
    config["linux"]["namespaces"] = [{"type": "user", "path": "/foo/bar"}]
    (bundle / "config.json").write_text(json.dumps(config))
    edits = {
        "mounts": [
            {"hostPath": str(tmp_path), "containerPath": "/dest/path/a", "type": "bind"},
            {"hostPath": str(tmp_path), "containerPath": "/dest/path/d", "type": "bind", "options": ["rbind"]},
            {"hostPath": str(tmp_path), "containerPath": "/dest/path/e", "options": ["ro", "idmap"]},
        ]
    }
    _, config = inject(str(_spec(tmp_path, edits=edits)), ["0"], str(bundle))
    options = {m["destination"]: m.get("options") for m in config["mounts"]}
    assert options["/dest/path/a"] == ["idmap"] and options["/dest/path/d"] == ["rbind", "ridmap"] and options["/dest/path/e"] == ["ro", "idmap"]


def test_minimally_specified_node_needs_no_host_node(tmp_path, bundle):
    """fillMissingInfo: type plus major (or a fifo) is enough when the host path does not exist."""
    nodes = [{"path": "/dev/vendor0", "hostPath": "/nonexistent/vendor0", "type": "c", "major": 240, "minor": 3}, {"path": "/dev/fifo", "hostPath": "/nonexistent/fifo", "type": "p"}]
    _, config = inject(str(_spec(tmp_path, devices=[{"name": "0", "containerEdits": {"deviceNodes": nodes}}], edits={"env": ["A=1"]})), ["0"], str(bundle))
    assert config["linux"]["devices"][-2:] == [
        {"path": "/dev/vendor0", "type": "c", "major": 240, "minor": 3, "uid": 1000, "gid": 100},
        {"path": "/dev/fifo", "type": "p", "major": 0, "minor": 0, "uid": 1000, "gid": 100},
    ]
    assert config["linux"]["resources"]["devices"][-1] == {"allow": True, "type": "c", "major": 240, "minor": 3, "access": "rwm"}


@pytest.mark.parametrize(
    "field, value, message",
    [
        (("process",), None, "process is not an object"),
        (("process", "env"), "A=1", "process.env is not an array"),
        (("process", "env"), [1, None], "process.env holds an entry that is not a string"),
        (("process", "user"), "root", "process.user is not an object"),
        (("process", "user", "uid"), "1000", "process.user.uid is not an integer"),
        (("process", "user", "additionalGids"), "44", "process.user.additionalGids is not an array"),
        (("linux", "devices"), {"a": 1}, "linux.devices is not an array"),
        (("linux", "devices"), [1], "linux.devices holds an entry that is not an object"),
        (("linux", "resources"), [], "linux.resources is not an object"),
        (("linux", "resources", "devices"), {}, "linux.resources.devices is not an array"),
        (("mounts",), [1, "x"], "mounts holds an entry that is not an object"),
        (("hooks",), [], "hooks is not an object"),
        (("hooks",), {"createContainer": {}}, "hooks holds an entry that is not an array"),
        (("hooks", "prestart"), ["x"], "hooks.prestart holds an entry that is not an object"),
    ],
)
def test_hostile_config_json_shapes_are_one_line_errors_and_nothing_is_written(tmp_path, bundle, capsys, field, value, message):
    """Review r1: a config.json field of the wrong JSON type ended `cdi inject` with exit 70."""
    config = json.loads((bundle / "config.json").read_text())
    target = config
    for key in field[:-1]:
        target = target.setdefault(key, {})
    target[field[-1]] = value
    before = json.dumps(config)
    (bundle / "config.json").write_text(before)
    assert main(["cdi", "inject", str(_spec(tmp_path)), "0", "--bundle", str(bundle)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert (bundle / "config.json").read_text() == before
    assert sorted(os.listdir(bundle)) == ["config.json", "rootfs"]


def test_a_device_named_twice_is_injected_once(tmp_path, bundle, capsys):
    """Review r1: `cdi inject SPEC 0 nvidia.com/gpu=0` applied the device's edits twice: its hooks ran twice
    and the report counted every node, mount and hook twice."""
    spec = _spec(tmp_path, devices=[{"name": "0", "containerEdits": {
        "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}],
        "hooks": [{"hookName": "createContainer", "path": "/usr/bin/hook", "args": ["hook", "update-ldcache"]}]}}],
        edits={"env": ["A=1"]})
    report, config = inject(str(spec), ["0", "nvidia.com/gpu=0", "0"], str(bundle))
    assert report.devices == ["nvidia.com/gpu=0"]
    assert report.hooks == 1 and report.device_nodes == 1
    assert config["hooks"]["createContainer"] == [{"path": "/usr/bin/hook", "args": ["hook", "update-ldcache"]}]
