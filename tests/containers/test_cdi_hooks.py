"""The createContainer hooks, run against a container root in a temp dir."""

from __future__ import annotations

import io
import json
import os

import pytest

from cudapkgs.cli import main
from cudapkgs.containers import hooks
from cudapkgs.containers.errors import CdiError


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "rootfs"
    (r / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (r / "etc").mkdir()
    return r


def test_container_root_from_the_oci_state(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = io.StringIO(json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": str(bundle)}))
    assert hooks.container_root(stdin=state) == str(bundle / "rootfs")
    with pytest.raises(CdiError, match="container state on stdin"):
        hooks.container_root(stdin=io.StringIO("not json"))


@pytest.mark.parametrize("root_path", [5, None, "", ["rootfs"]])
def test_a_config_root_path_that_is_not_a_string_is_one_error(tmp_path, root_path):
    """Review r1: root.path of another JSON type ended the hook with exit 70 (TypeError)."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": root_path}}))
    with pytest.raises(CdiError, match="root.path is not a non-empty string"):
        hooks.container_root(stdin=io.StringIO(json.dumps({"bundle": str(bundle)})))


def test_resolve_in_root_never_escapes(root):
    os.symlink("/", root / "escape")
    os.symlink("../../..", root / "usr/lib/up")
    assert hooks.resolve_in_root(str(root), "/escape/etc/passwd") == f"{root}/etc/passwd"
    assert hooks.resolve_in_root(str(root), "/usr/lib/up/../../x") == f"{root}/x"


def test_create_symlinks(root):
    links = ["libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so", "../card1::/dev/dri/by-path/pci-0000:41:00.0-card"]
    assert hooks.create_symlinks(str(root), links) == ["/usr/lib/x86_64-linux-gnu/libcuda.so", "/dev/dri/by-path/pci-0000:41:00.0-card"]
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libcuda.so") == "libcuda.so.1"
    assert hooks.create_symlinks(str(root), links) == []  # idempotent
    (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so").write_text("the image's own file")
    assert hooks.create_symlinks(str(root), ["x::/usr/lib/x86_64-linux-gnu/libnvidia-ml.so"]) == []
    assert (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so").read_text() == "the image's own file"


def test_create_symlinks_through_an_absolute_symlink_stays_inside(root, tmp_path):
    os.symlink("/", root / "hostile")
    hooks.create_symlinks(str(root), ["t::/hostile/made-here"])
    assert os.path.islink(root / "made-here") and not os.path.lexists("/made-here")


def test_bad_link_spec():
    with pytest.raises(CdiError, match="TARGET::/ABSOLUTE/LINK"):
        hooks.parse_link("no-separator")


@pytest.mark.parametrize(("compat", "host", "used"), [("575.51.03", "550.54.15", True), ("550.90.07", "570.153.02", False), ("570.10.01", "570.153.02", False)])
def test_enable_cuda_compat(root, compat, host, used):
    (root / "usr/local/cuda/compat").mkdir(parents=True)
    (root / f"usr/local/cuda/compat/libcuda.so.{compat}").write_text("")
    added = hooks.enable_cuda_compat(str(root), host)
    conf = root / "etc/ld.so.conf.d" / hooks.COMPAT_LDCONF_NAME
    assert (added == "/usr/local/cuda/compat") is used and conf.exists() is used
    if used:
        assert conf.read_text() == "/usr/local/cuda/compat\n"


def test_enable_cuda_compat_without_compat_libraries(root):
    assert hooks.enable_cuda_compat(str(root), "570.153.02") is None


def test_update_ldcache_runs_ldconfig_in_the_root(root, tmp_path):
    record = tmp_path / "args"
    fake = tmp_path / "ldconfig"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {record}\n")
    fake.chmod(0o755)
    assert main(["cdi", "hook", "update-ldcache", "--container-root", str(root), "--ldconfig-path", f"@{fake}", "--folder", "/usr/lib/x86_64-linux-gnu", "--folder", "/missing"]) == 0
    assert record.read_text().split() == ["-r", str(root), "/usr/lib/x86_64-linux-gnu"]
    assert (root / "etc/ld.so.conf.d" / hooks.LDCONF_NAME).read_text() == "/usr/lib/x86_64-linux-gnu\n"


def test_update_ldcache_failures(root, tmp_path):
    with pytest.raises(CdiError, match="ldconfig not found"):
        hooks.update_ldcache(str(root), [], str(tmp_path / "nope"))
    with pytest.raises(CdiError, match="failed with status 3"):
        hooks.update_ldcache(str(root), [], "/bin/sh", run=lambda _cmd: 3)


def test_disable_device_node_modification(root, tmp_path):
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/params").write_text("")
    mounted = []
    assert hooks.disable_device_node_modification(str(root), str(params), mount=lambda text, target: mounted.append((text, os.readlink(target))))
    # The mount goes onto a descriptor resolved inside the root, never onto a re-walked path string.
    assert mounted == [("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\n", f"{root}/proc/driver/nvidia/params")]
    params.write_text("ModifyDeviceFiles: 0\n")
    assert not hooks.disable_device_node_modification(str(root), str(params), mount=lambda *_: pytest.fail("no mount"))


def test_hook_errors_are_one_line(capsys):
    assert main(["cdi", "hook", "create-symlinks", "--container-spec", "/nonexistent/config.json", "--link", "a::/b"]) == 1
    assert capsys.readouterr().err.startswith("cudapkgs: error: cannot read the container's root from /nonexistent/config.json")


# -- hostile images (issue 8, part 2): no write inside a container root reaches the host -----------


@pytest.fixture
def host_file(tmp_path):
    victim = tmp_path / "host" / "shadow"
    victim.parent.mkdir()
    victim.write_text("host secret\n")
    victim.chmod(0o600)
    return victim


def _fake_ldconfig(tmp_path):
    fake = tmp_path / "ldconfig"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    return str(fake)


def _untouched(victim):
    assert victim.read_text() == "host secret\n" and (victim.stat().st_mode & 0o777) == 0o600


def test_update_ldcache_ignores_planted_temp_file_symlinks(root, tmp_path, host_file):
    (root / "etc/ld.so.conf.d").mkdir()
    # The old hook wrote `<conf>.tmp<pid>` with open(): plant that name (and every pid near ours).
    for pid in range(os.getpid() - 5, os.getpid() + 50):
        os.symlink(host_file, root / f"etc/ld.so.conf.d/{hooks.LDCONF_NAME}.tmp{pid}")
    hooks.update_ldcache(str(root), ["/usr/lib/x86_64-linux-gnu"], _fake_ldconfig(tmp_path))
    _untouched(host_file)
    conf = root / "etc/ld.so.conf.d" / hooks.LDCONF_NAME
    assert not conf.is_symlink() and conf.read_text() == "/usr/lib/x86_64-linux-gnu\n"
    assert (conf.stat().st_mode & 0o777) == 0o644


def test_update_ldcache_replaces_a_planted_final_symlink_instead_of_writing_through_it(root, tmp_path, host_file):
    (root / "etc/ld.so.conf.d").mkdir()
    os.symlink(host_file, root / "etc/ld.so.conf.d" / hooks.LDCONF_NAME)
    hooks.update_ldcache(str(root), ["/usr/lib/x86_64-linux-gnu"], _fake_ldconfig(tmp_path))
    _untouched(host_file)
    assert (root / "etc/ld.so.conf.d" / hooks.LDCONF_NAME).read_text() == "/usr/lib/x86_64-linux-gnu\n"


@pytest.mark.parametrize("how", ["absolute", "relative", "chain"])
def test_update_ldcache_directory_symlinks_resolve_inside_the_root(root, tmp_path, host_file, how):
    outside = host_file.parent
    if how == "absolute":
        os.symlink(outside, root / "etc/ld.so.conf.d")  # means <root><outside> inside the container
    elif how == "relative":
        os.symlink("../../../../../../../../" + str(outside).lstrip("/"), root / "etc/ld.so.conf.d")
    else:  # d/s1 -> .., d/s2 -> s1/.., ... (issue 8's chain shape)
        (root / "d").mkdir()
        os.symlink("..", root / "d/s1")
        for i in range(2, 21):
            os.symlink(f"s{i - 1}/..", root / f"d/s{i}")
        os.symlink("d/s20/" + "../" * 10 + str(outside).lstrip("/"), root / "etc/ld.so.conf.d")
    hooks.update_ldcache(str(root), ["/usr/lib/x86_64-linux-gnu"], _fake_ldconfig(tmp_path))
    _untouched(host_file)
    assert sorted(os.listdir(outside)) == ["shadow"]
    written = [p for p in root.rglob(hooks.LDCONF_NAME)]
    assert len(written) == 1 and str(written[0]).startswith(str(root) + "/")


def test_enable_cuda_compat_through_hostile_links_stays_inside(root, host_file):
    (root / "usr/local/cuda/compat").mkdir(parents=True)
    (root / "usr/local/cuda/compat/libcuda.so.999.1.2").write_text("")
    (root / "etc/ld.so.conf.d").mkdir()
    os.symlink(host_file, root / "etc/ld.so.conf.d" / hooks.COMPAT_LDCONF_NAME)
    os.symlink(host_file, root / "etc/ld.so.conf.d" / f"{hooks.COMPAT_LDCONF_NAME}.tmp{os.getpid()}")
    assert hooks.enable_cuda_compat(str(root), "580.1.2") == "/usr/local/cuda/compat"
    _untouched(host_file)
    assert (root / "etc/ld.so.conf.d" / hooks.COMPAT_LDCONF_NAME).read_text() == "/usr/local/cuda/compat\n"


def test_create_symlinks_through_a_relative_escape_stays_inside(root, host_file):
    os.symlink("../../../../../../../../" + str(host_file.parent).lstrip("/"), root / "usr/lib/escape")
    hooks.create_symlinks(str(root), ["libcuda.so.1::/usr/lib/escape/libcuda.so"])
    assert sorted(os.listdir(host_file.parent)) == ["shadow"]
    assert os.readlink(root / str(host_file.parent).lstrip("/") / "libcuda.so") == "libcuda.so.1"


def test_symlink_loop_in_an_image_is_a_clean_error(root):
    os.symlink("loop", root / "etc/loop")
    with pytest.raises(CdiError, match="too many levels of symbolic links"):
        hooks.create_symlinks(str(root), ["t::/etc/loop/x"])


def test_disable_device_node_modification_really_mounts(tmp_path):
    """A real bind mount, in a private mount namespace (root only): read-only, patched text.

    Linux 6.18 refuses a memfd as a bind source; the hook falls back to an unlinked temp file.
    """
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    root = tmp_path / "rootfs"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/params").write_text("ModifyDeviceFiles: 1\n")
    host = tmp_path / "host-params"
    host.write_text("ResmanDebugLevel: 0\nModifyDeviceFiles: 1\n")
    code = (
        "from cudapkgs.containers import hooks; import sys\n"
        f"assert hooks.disable_device_node_modification({str(root)!r}, {str(host)!r})\n"
        f"p = {str(root / 'proc/driver/nvidia/params')!r}\n"
        "print(open(p).read(), end='')\n"
        "try:\n    open(p, 'w')\nexcept OSError as e:\n    print('refused', e.errno)\n"
    )
    result = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", code], capture_output=True, text=True)
    if result.returncode != 0 and "Operation not permitted" in result.stderr:
        pytest.skip(f"mount namespaces are not permitted here: {result.stderr.strip()[:200]}")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ResmanDebugLevel: 0\nModifyDeviceFiles: 0\nrefused 30\n"
    assert (root / "proc/driver/nvidia/params").read_text() == "ModifyDeviceFiles: 1\n"  # outside the namespace: untouched


def test_container_spec_that_is_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(CdiError, match="cannot read the container's root"):
        hooks.container_root(spec=str(fifo))


def test_a_read_only_container_root_is_a_one_line_error(tmp_path):
    """Review r1: writes into a read-only root (mkdir, symlink) ended the hooks with exit 70 (OSError)."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare for a private read-only bind mount")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    mapping = [] if os.geteuid() == 0 else ["--map-root-user"]
    cli = f"{sys.executable} -m cudapkgs"
    script = (
        'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99\n'
        f'{cli} cdi hook create-symlinks --container-root "$1" --link a::/x/y; echo "rc=$?"\n'
        f'{cli} cdi hook create-symlinks --container-root "$1" --link a::/etc/y; echo "rc=$?"\n'
        f'{cli} cdi hook update-ldcache --container-root "$1" --folder /etc --ldconfig-path /bin/true; echo "rc=$?"\n'
    )
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", *mapping, "sh", "-c", script, "sh", str(root)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode == 99:
        pytest.skip(f"cannot make a read-only bind mount here: {done.stderr.strip()}")
    assert done.stdout.split() == ["rc=1", "rc=1", "rc=1"], (done.stdout, done.stderr)
    assert "internal error" not in done.stderr and done.stderr.count("Read-only file system") == 3, done.stderr
    assert os.listdir(root) == ["etc"] and os.listdir(root / "etc") == []
