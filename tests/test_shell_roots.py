"""A shell kept alive against gc (issue 32, item 4): `cudapkgs shell --profile LINK`, and gc saying which
roots keep what."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cudapkgs.shell import ShellExtras, shell_root
from cudapkgs.store.store import Store

from conftest import MANIFESTS
from test_shell import add_output
from test_project import project  # noqa: F401  (the fixture)


def test_a_shell_root_keeps_the_packages_and_what_they_propagate(tmp_path):
    store_dir = tmp_path / "store"
    with Store.open(store_dir) as store:
        cudart = add_output(store, "cudart-lib", ["lib"])
        cublas = add_output(store, "cublas-dev", ["include"], propagates=[cudart])
        joined = add_output(store, "cuda-toolkit-root", ["bin"])
        other = add_output(store, "unrelated", ["lib"])
        root = shell_root(store, [cublas], ShellExtras(toolkit_root=joined))
        assert shell_root(store, [cublas], ShellExtras(toolkit_root=joined)) == root  # the same shell, the same path
        assert set(store.references(root)) == {cublas, cudart, joined}
        assert Path(root, "nix-support", "shell-paths").read_text().split() == [cublas, cudart, joined]
        link = store.add_indirect_root(tmp_path / "profile", root)
    with Store.open(store_dir) as store:
        dry = store.gc(dry_run=True)
        assert dry.deleted == [other]
        assert dry.roots == ((str(link), root, 4),)
        result = store.gc()
        assert result.deleted == [other] and all(os.path.isdir(p) for p in (cublas, cudart, joined, root))
    link.unlink()
    with Store.open(store_dir) as store:
        assert set(store.gc().deleted) == {root, cublas, cudart, joined}


def test_shell_profile_roots_the_shell_and_gc_names_the_root(tmp_path):
    store_dir = tmp_path / "store"
    env = {**os.environ, "CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": str(store_dir)}
    profile = tmp_path / ".cudapkgs" / "shell"  # its directory made, as a project's
    run = subprocess.run([sys.executable, "-m", "cudapkgs", "shell", "--profile", str(profile), "saxpy",
                          "--command", "sh", "-c", "command -v saxpy"], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    saxpy = run.stdout.strip().rsplit("/bin/", 1)[0]
    assert profile.is_symlink() and f"{profile} keeps this shell's packages" in run.stderr
    dry = subprocess.run([sys.executable, "-m", "cudapkgs", "gc", "--dry-run"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert f"kept by the root {profile}: {os.readlink(profile)} and its closure" in dry.stdout
    assert saxpy not in dry.stdout  # not among what would go
    profile.unlink()
    after = subprocess.run([sys.executable, "-m", "cudapkgs", "gc", "--dry-run"], capture_output=True, text=True,
                           env=env, timeout=300)
    assert f"would delete '{saxpy}'" in after.stdout and "kept by the root" not in after.stdout


def test_a_profile_in_a_linked_directory_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / ".cudapkgs").symlink_to(elsewhere)
    env = {**os.environ, "CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": str(tmp_path / "store")}
    run = subprocess.run([sys.executable, "-m", "cudapkgs", "shell", "--profile", str(tmp_path / ".cudapkgs" / "shell"),
                          "saxpy", "--command", "true"], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 2 and "is a symbolic link" in run.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_project_shell_is_rooted_in_its_cudapkgs_directory(project, capsys, tmp_path):
    """As nix-direnv keeps its roots in .direnv: `cudapkgs shell` in a project roots the shell at
    <project>/.cudapkgs/shell; a .cudapkgs that is a link is not written through (a warning)."""
    import textwrap

    from test_project import PROJECT, allow, run

    (project / "cudapkgs.toml").write_text(textwrap.dedent(PROJECT).replace('"cuda_nvcc", "libcublas", ', ""))
    allow(project)
    assert run(capsys, "lock")[0] == 0
    code, _, err = run(capsys, "shell", "--command", "true")
    assert code == 0, err
    link = project / ".cudapkgs" / "shell"
    assert link.is_symlink() and os.readlink(link).endswith("-shell-env")
    hello = [p for p in Path(os.readlink(link), "nix-support", "shell-paths").read_text().split() if p.endswith("-hello-1.12.8")]
    assert hello
    code, out, _ = run(capsys, "gc", "--dry-run")
    assert code == 0 and f"kept by the root {link}" in out and hello[0] not in out.split("kept by")[0]

    link.unlink()
    (project / ".cudapkgs").rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / ".cudapkgs").symlink_to(elsewhere)
    code, _, err = run(capsys, "shell", "--command", "true")
    assert code == 0 and "not kept from `cudapkgs gc`" in err and "symbolic link" in err
    assert list(elsewhere.iterdir()) == []
