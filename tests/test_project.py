"""Project environments: cudapkgs.toml, `cudapkgs lock`, `cudapkgs shell` with no packages."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from cudapkgs.cli import main
from cudapkgs.errors import ConfigError
from cudapkgs.project import load_project
from cudapkgs.project_lock import check_lock, read_lock
from cudapkgs.top_level import clear_cache

needs_bash = pytest.mark.skipif(shutil.which("bash", path="/usr/bin:/bin") is None, reason="needs bash")

PROJECT = """\
    set = "12.8"
    capabilities = ["9.0"]
    packages = ["cuda_nvcc", "libcublas", "hello"]
    files = ["nix/packages.py"]
    [config]
    allowUnfreePredicate = "cuda"
"""

PACKAGES = """\
    from cudapkgs.stdenv import mk_derivation

    def hello(config, cudaPackages):
        return mk_derivation(config, {
            "pname": "hello", "version": "1." + cudaPackages.cudaMajorMinorVersion,
            "installPhase": 'mkdir -p "$out/bin"; printf "#!/bin/sh\\\\necho hello $version\\\\n" > "$out/bin/hello"; '
                            'chmod +x "$out/bin/hello"',
        })
"""


@pytest.fixture
def project(tmp_path, monkeypatch, manifests_dir) -> Path:
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    root = tmp_path / "proj"
    (root / "nix").mkdir(parents=True)
    (root / "cudapkgs.toml").write_text(textwrap.dedent(PROJECT))
    (root / "nix" / "packages.py").write_text(textwrap.dedent(PACKAGES))
    (root / "src").mkdir()
    monkeypatch.chdir(root / "src")  # found from a subdirectory, like git
    allow(root)
    return root


def allow(root: Path) -> None:
    """`cudapkgs allow ROOT` (a project is used only once allowed with its present contents)."""
    assert main(["allow", str(root)]) == 0


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_lock_records_manifests_configuration_and_derivations(project, capsys):
    code, out, err = run(capsys, "lock")
    assert code == 0, err
    lock = read_lock(project / "cudapkgs.lock")
    assert lock["set"] == "cudaPackages_12_8" and lock["cudaVersion"] == "12.8"
    assert lock["configuration"]["cudaCapabilities"] == ["9.0"]
    assert lock["configuration"]["allowUnfreePredicate"] == "cuda"
    assert set(lock["packages"]) == {"cuda_nvcc", "libcublas", "hello"}
    assert lock["packages"]["hello"]["own"] is True  # the project's file defines it: not pinned itself
    assert lock["packages"]["cuda_nvcc"]["name"].startswith("cuda12.8-cuda_nvcc-")
    assert lock["manifests"]["cuda"]["version"].startswith("12.8") and lock["manifests"]["cuda"]["sha256"].startswith("sha256:")
    for label in ("cuda_nvcc", "libcublas"):
        assert lock["packages"][label]["drv"] in lock["derivations"]
    # What hello is built with is pinned all the same (stdenv.cc, the compiler wrapper).
    assert lock["packages"]["hello"]["inputs"] and set(lock["packages"]["hello"]["inputs"]) <= set(lock["derivations"])
    assert not any(entry["name"].startswith("hello-") for entry in lock["derivations"].values())
    code, out, _ = run(capsys, "lock", "--check")
    assert code == 0 and "up to date" in out
    before = (project / "cudapkgs.lock").read_bytes()
    assert run(capsys, "lock")[0] == 0 and (project / "cudapkgs.lock").read_bytes() == before  # deterministic


def test_another_machine_is_told_exactly_what_differs(project, capsys, monkeypatch):
    assert run(capsys, "lock")[0] == 0
    # A different driver directory on "the other machine": a configuration key, and the
    # derivations it reaches (recorded as their own field), then the packages it changed.
    code, _, err = run(capsys, "lock", "--check", "--set", "driverLibDir=/usr/lib/x86_64-linux-gnu")
    assert code == 1
    assert 'configuration driverLibDir: locked null, here "/usr/lib/x86_64-linux-gnu"' in err
    change = 'attrs.driverLibDir: locked "/run/opengl-driver/lib", here "/usr/lib/x86_64-linux-gnu"'
    # Reported where it starts: the derivations whose own field differs (not their dependents).
    assert any(line.strip().startswith("derivation cuda12.8-") and line.endswith(change) for line in err.splitlines())
    assert "differs as a result: cuda_nvcc, libcublas" in err
    assert "derivation hello" not in err  # the project's own package: never a difference
    # An edited package file (the project's own): it rebuilds, the lock still holds.
    packages = project / "nix" / "packages.py"
    packages.write_text(packages.read_text().replace('"1." +', '"2." +'))
    clear_cache()
    code, _, err = run(capsys, "lock", "--check")  # an edited package file must be allowed again
    assert code == 1 and "changed since you allowed it (nix/packages.py)" in err
    allow(project)
    code, out, err = run(capsys, "lock", "--check")
    assert code == 0 and "up to date" in out, err


def test_the_projects_sources_are_not_pinned_but_fetched_ones_are(project, capsys, tmp_path):
    """Before, any edit of the project's own sources made `cudapkgs shell` refuse (the lock pinned the
    derivations built from them); a fetched source, named by its hash, is what the team shares."""
    (project / "myapp").mkdir()
    (project / "myapp" / "main.sh").write_text("echo one\n")
    (project / "nix" / "packages.py").write_text(textwrap.dedent(PACKAGES) + textwrap.dedent("""\

        from pathlib import Path

        def myapp(config):
            return mk_derivation(config, {
                "pname": "myapp", "version": "1", "src": Path(__file__).resolve().parents[1] / "myapp",
                "installPhase": 'install -Dm755 main.sh "$out/bin/myapp"',
            })

        def tarball(fetchurl):
            return fetchurl(url="https://example.invalid/t.tar.gz", hash="sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
    """))
    (project / "cudapkgs.toml").write_text(textwrap.dedent(PROJECT).replace('"cuda_nvcc", "libcublas", "hello"',
                                                                             '"myapp", "tarball"'))
    clear_cache()
    allow(project)
    assert run(capsys, "lock")[0] == 0
    lock = read_lock(project / "cudapkgs.lock")
    assert lock["packages"]["myapp"]["own"] is True and "drv" not in lock["packages"]["myapp"]
    assert lock["packages"]["tarball"]["drv"] in lock["derivations"]  # pinned by its hash
    (project / "myapp" / "main.sh").write_text("echo two\n")
    clear_cache()
    code, out, err = run(capsys, "lock", "--check")
    assert code == 0 and "up to date" in out, err
    # Another hash for the fetched source is a difference, reported at the fetcher.
    packages = project / "nix" / "packages.py"
    # (a line more: an edit of the same size within the file system's time resolution reads as the same file)
    packages.write_text(packages.read_text().replace("sha256-47DEQ", "sha256-57DEQ") + "# another hash\n")
    clear_cache()
    allow(project)
    code, _, err = run(capsys, "lock", "--check")
    assert code == 1 and "derivation t.tar.gz: " in err and "outputHash: locked" in err and "as a result: tarball" in err, err


def test_store_directory_and_local_settings(project, capsys, monkeypatch, tmp_path):
    assert run(capsys, "lock")[0] == 0
    # Where things are fetched from is this machine's business: not a difference.
    assert run(capsys, "lock", "--check", "--set", 'sourceMirrors=["/srv/sources"]')[0] == 0
    # Nor is where the store is (before: "store directory: locked …", so a teammate needed the same
    # directory, and the lock held an absolute path under $HOME).
    text = (project / "cudapkgs.lock").read_text()
    assert str(tmp_path) not in text and "storeDir" not in text
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "elsewhere"))
    clear_cache()
    code, out, err = run(capsys, "lock", "--check")
    assert code == 0 and "up to date" in out, err


@needs_bash
def test_shell_without_packages_uses_the_project_and_its_lock(project, capsys, tmp_path):
    (project / "cudapkgs.toml").write_text(textwrap.dedent(PROJECT).replace('"cuda_nvcc", "libcublas", ', ""))
    allow(project)
    assert run(capsys, "lock")[0] == 0
    out_file = tmp_path / "out.txt"
    code, _, err = run(capsys, "shell", "--command", "sh", "-c", f"hello > {out_file}")
    assert code == 0, err
    assert out_file.read_text() == "hello 1.12.8\n"
    # Another configuration than the lock's: refused, saying what differs.
    code, _, err = run(capsys, "shell", "--set", "driverLibDir=/opt/driver", "--command", "true")
    assert code == 1 and "does not reproduce" in err and "driverLibDir" in err and "cudapkgs lock" in err
    code, _, err = run(capsys, "shell", "--ignore-lock", "--set", "driverLibDir=/opt/driver", "--command", "true")
    assert code == 0 and "differs from" in err
    # `cudapkgs build` with no packages builds the project's, links included.
    code, out, err = run(capsys, "build", "-o", str(tmp_path / "env"))
    assert code == 0, err
    assert (tmp_path / "env" / "bin" / "hello").exists()


def test_bad_project_files(project, capsys, tmp_path):
    (project / "cudapkgs.toml").write_text('packges = ["x"]\n')
    with pytest.raises(ConfigError, match='unknown key "packges".*did you mean "packages"'):
        load_project(project / "cudapkgs.toml")
    (project / "cudapkgs.toml").write_text('packages = ["cuda_nvcc"]\nset = "cudaPackages_99"\n')
    allow(project)
    code, _, err = run(capsys, "lock")
    assert code == 1 and "no package set 'cudaPackages_99'" in err
    (project / "cudapkgs.toml").write_text('packages = ["libcublass"]\n')
    allow(project)
    code, _, err = run(capsys, "lock")
    assert code == 1 and "packages: libcublass" in err and "libcublas" in err
    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    code, _, err = run(capsys, "lock", "--project", str(elsewhere))
    assert code == 2 and "no cudapkgs.toml" in err
    (project / "cudapkgs.toml").write_text('packages = ["cuda_nvcc"]\n[config]\nallowUnfree = true\n')
    allow(project)
    (project / "cudapkgs.lock").write_text("{not json")
    code, _, err = run(capsys, "lock", "--check")
    assert code == 1 and "not a cudapkgs lock" in err
    for hostile in ('{"version": 2, "packages": []}', '{"version": 2, "packages": {"x": 3}}',
                    '{"version": 2, "packages": {"x": {"drv": 1}}}', '{"version": 1, "packages": {}}',
                    '{"version": 2, "packages": {}, "derivations": {"a": {"fields": []}}}', "[1]"):
        (project / "cudapkgs.lock").write_text(hostile)
        code, _, err = run(capsys, "lock", "--check")
        assert code == 1 and "not a cudapkgs lock" in err and "internal error" not in err


def test_check_lock_is_silent_for_equal_data():
    data = {"version": 2, "system": "x86_64-linux", "set": "cudaPackages", "packages": {},
            "configuration": {"cudaSupport": True}, "manifests": {}, "derivations": {}}
    assert check_lock(data, json.loads(json.dumps(data))) == []
    other = {**data, "configuration": {"cudaSupport": False}}
    assert check_lock(data, other) == ["configuration cudaSupport: locked true, here false"]
