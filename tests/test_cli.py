"""The command line, through a subprocess as users run it."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MANIFESTS


def run(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "CUDAPKGS_MANIFESTS": str(MANIFESTS), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "cudapkgs", *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120
    )


def ok(*args: str, **kw) -> str:
    result = run(*args, **kw)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_default_set_version():
    assert ok("eval", "cudaPackages.cudaMajorMinorVersion") == '"12.9"\n'


def test_issue_examples_as_json():
    assert json.loads(ok("eval", "--json", "cudaPackages_12_8.cudnn.version")) == "9.22.0.52"
    flags = json.loads(ok("eval", "--json", "pkgsForCudaArch.sm_90a.cudaPackages.flags"))
    assert flags["gencode"] == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert flags["cudaForwardCompat"] is False and flags["archNames"] == ["Hopper"]
    gencode = json.loads(
        ok("eval", "--json", "--set", 'cudaCapabilities=["8.9","9.0"]', "--set", "cudaForwardCompat=false",
           "cudaPackages_13_0.flags.gencode")
    )
    assert gencode == ["-gencode=arch=compute_89,code=sm_89", "-gencode=arch=compute_90,code=sm_90"]
    redist = ok("eval", "--json", "--system", "aarch64-linux", "--set", 'cudaCapabilities=["8.7"]',
                "cudaPackages_12_6.backendStdenv.hostRedistSystem")
    assert json.loads(redist) == "linux-aarch64"


def test_config_file_allows_unfree_src(tmp_path):
    config = tmp_path / "cudapkgs.toml"
    config.write_text('allowUnfreePredicate = "cuda"\n')
    src = json.loads(ok("eval", "--json", "--config", str(config), "cudaPackages_13_0.libcublas.src"))
    raw = json.loads((MANIFESTS / "cuda" / "redistrib_13.0.3.json").read_text())["libcublas"]["linux-x86_64"]
    assert src["sha256"] == raw["sha256"]
    assert src["url"].endswith(raw["relative_path"])


def test_cudapkgs_config_env_is_read(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('cudaCapabilities = ["8.6"]\ncudaForwardCompat = false\n')
    out = ok("eval", "--json", "cudaPackages.flags.arches", env={"CUDAPKGS_CONFIG": str(config)})
    assert json.loads(out) == ["sm_86"]


def test_unfree_without_permission_is_a_one_line_error():
    result = run("eval", "cudaPackages_13_0.libcublas.src")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "unfree license" in result.stderr and "allowUnfreePredicate" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("eval", "cudaPackages_12_8.cudnnn"), 1, 'did you mean "cudnn"'),
        (("eval", "cudaPackages_12_7.cudnn"), 1, "cudaPackages_12_8"),
        (("eval", "--set", "cudaCapabilites=[]", "cudaPackages"), 1, 'did you mean "cudaCapabilities"'),
        (("eval", "--set", "cudaForwardCompat=yes", "cudaPackages"), 1, "cudaForwardCompat"),
        (("eval", "--set", 'cudaCapabilities=["sm_89"]', "cudaPackages"), 1, '"8.9"'),
        (("eval", "--set", "novalue", "cudaPackages"), 2, "KEY=VALUE"),
        (("eval", "--system", "x86_64-linu", "cudaPackages"), 2, "x86_64-linux"),
        (("eval", "cudaPackages.flags..x"), 2, ""),
        (("capabilities", "--cuda", "12.7"), 1, "no package set for CUDA 12.7"),
        (("eval", "--set", 'cudaCapabilities=["7.7"]', "cudaPackages_12_8.flags"), 1,
         'Requested unrecognized CUDA capabilities: ["7.7"]'),
        (("frobnicate",), 2, 'no command "frobnicate"; `cudapkgs --help` lists them'),
        (("shel", "--set", "allowUnfree=true"), 2, 'no command "shel" (did you mean "shell"?)'),  # was argparse's list of 28
    ],
)
def test_errors_exit_codes_and_messages(args, code, needle):
    result = run(*args)
    assert result.returncode == code, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_manifest_names_file_and_field(tmp_path):
    broken = tmp_path / "cuda"
    broken.mkdir()
    text = (MANIFESTS / "cuda" / "redistrib_12.8.2.json").read_text()
    (broken / "redistrib_12.8.2.json").write_text(text[: len(text) // 2])
    result = run("eval", "cudaPackages_12_8.cuda_nvcc.version", env={"CUDAPKGS_MANIFESTS": str(tmp_path)})
    assert result.returncode == 1
    assert "redistrib_12.8.2.json" in result.stderr and "not valid JSON" in result.stderr


def test_list_shows_versions_licenses_and_reasons():
    rows = json.loads(ok("list", "--json", "cudaPackages_12_6"))
    by_name = {r["pname"]: r for r in rows}
    assert by_name["cuda_nvcc"]["version"] == "12.6.85"
    assert by_name["cuda_cudart"]["outputs"] == ["out", "dev", "include", "lib", "static", "stubs"]
    assert by_name["cuda_nvcc"]["available"] is False and "unfree" in by_name["cuda_nvcc"]["status"]
    assert by_name["cuda_compat"]["status"] == "not for linux-x86_64 (available: linux-aarch64)"
    allowed = json.loads(ok("list", "--json", "--set", "allowUnfree=true", "cudaPackages_12_6"))
    assert {r["pname"]: r for r in allowed}["cuda_nvcc"]["available"] is True
    table = ok("list")
    assert table.startswith("cudaPackages_12_9 (CUDA 12.9.1")


def test_list_says_a_broken_assertion_failed():
    """brokenAssertions' messages say what should hold; the status must not read as if it held."""
    rows = {r["pname"]: r for r in json.loads(ok("list", "--json", "cudaPackages_12_9"))}
    status = rows["collectx_bringup"]["status"]
    assert status.startswith("broken: failed assertions: ") and "libssl.so.1.1 is available" in status, status
    assert rows["mft"]["status"].startswith("broken: failed assertion: "), rows["mft"]["status"]


def test_capabilities_table():
    rows = json.loads(ok("capabilities", "--json", "--cuda", "12.8"))
    marks = {r["cudaCapability"]: (r["supported"], r["default"]) for r in rows}
    assert marks["12.0"] == (True, True) and marks["12.1"] == (False, False)
    assert marks["9.0a"] == (True, False) and marks["3.5"] == (False, False)
    assert "Hopper" in ok("capabilities")


def test_check_leakage_clean_set():
    out = ok("check-leakage", "cudaPackages_12_8.pkgs")
    assert out.startswith("no leakage") and "cudaPackages_12_8" in out


def test_help_teaches():
    out = ok("eval", "--help")
    assert "cudaPackages_12_8.cudnn.version" in out and "--set" in out and "CUDAPKGS_CONFIG" in out


def test_evaluation_help_names_every_configuration_key():
    import re

    from cudapkgs.config import OPTIONS
    from cudapkgs.cli.eval import CONFIG_HELP

    named = set(re.findall(r"[A-Za-z0-9]+", CONFIG_HELP))
    assert [key for key in OPTIONS if key not in named] == []  # e.g. python3Executable, for pycuda


def test_list_all_recurses_only_into_the_default_set():
    rows = json.loads(ok("list", "--all", "--json"))
    attrs = [r["attr"] for r in rows]
    assert "saxpy" in attrs and "cudaPackages.cuda_nvcc" in attrs
    assert not any(a.startswith(("cudaPackages_", "pkgs")) for a in attrs)
    nvcc = {r["attr"]: r for r in rows}["cudaPackages.cuda_nvcc"]
    assert nvcc["version"] == "12.9.86"
    assert {r["attr"]: r for r in rows}["saxpy"]["available"] is True


def test_an_internal_error_is_one_line_without_traceback(tmp_path):
    # Whatever goes wrong inside (here: a command that raises a plain RuntimeError), the
    # user gets one line; the traceback only with CUDAPKGS_DEBUG.
    code = (
        "import sys, cudapkgs.cli as c\n"
        "def boom(args): raise RuntimeError('boom')\n"
        "p = c.build_parser\n"
        "def patched(*args):\n"
        "    parser = p(*args)\n"
        "    parser.set_defaults(func=boom)\n"
        "    return parser\n"
        "c.build_parser = patched\n"
        "sys.exit(c.main([]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 70
    assert "internal error: RuntimeError: boom" in result.stderr and "Traceback" not in result.stderr
    debug = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "CUDAPKGS_DEBUG": "1"})
    assert "Traceback" in debug.stderr


def test_config_shows_effective_values_and_marks_changes(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('cudaCapabilities = ["8.6"]\n')
    data = json.loads(ok("config", "--json", "--config", str(config), "--set", "allowUnfreePredicate=cuda"))
    assert data["cudaCapabilities"] == ["8.6"] and data["allowUnfreePredicate"] == "cuda"
    assert data["cudaForwardCompat"] is True
    table = ok("config", "--set", "cudaSupport=true")
    assert "cudaSupport*" in table and "rocmSupport*" not in table and "Enable CUDA code paths" in table


def test_config_never_prints_a_caches_password(tmp_path):
    """`cudapkgs config` printed substituters as written, `https://user:password@host` included (an
    attacker's note): on screen, in a CI log, in `--json`.  The password is shown as *** (the user
    name stays); a URL refused as no cache URL is shown so too."""
    config = tmp_path / "c.toml"
    config.write_text('substituters = ["https://ci:s3cret-token@cache.example/team", "file:///srv/cache"]\n')
    outputs = [ok("config", "--config", str(config)), ok("config", "--json", "--config", str(config)),
               ok("config", "--json", "--origins", "--config", str(config))]
    for out in outputs:
        assert "s3cret-token" not in out and "https://ci:***@cache.example/team" in out and "file:///srv/cache" in out
    assert json.loads(outputs[1])["substituters"] == ["https://ci:***@cache.example/team", "file:///srv/cache"]
    refused = run("config", "--set", 'substituters=["ftp://ci:s3cret-token@host/x"]')
    assert refused.returncode != 0 and "s3cret-token" not in refused.stderr + refused.stdout
    assert "ftp://ci:***@host/x" in refused.stderr


def test_shown_cache_url_keeps_everything_but_the_password():
    from cudapkgs.config import shown_cache_url

    assert shown_cache_url("https://u:p@h:8443/a/b?x=1") == "https://u:***@h:8443/a/b?x=1"
    assert shown_cache_url("https://u@h/a") == "https://u@h/a"  # no password: nothing hidden
    assert shown_cache_url("https://h/a@b") == "https://h/a@b"  # an @ in the path is no user information
    assert shown_cache_url("s3://b?endpoint=http://k:secret@minio:9000&region=x") == "s3://b?endpoint=http://k:***@minio:9000&region=x"
    assert shown_cache_url("file:///srv/cache") == "file:///srv/cache" and shown_cache_url("not a url") == "not a url"


def test_config_says_where_each_value_came_from(tmp_path):
    """Before, `config` showed values only; now default, which file, the environment or --set."""
    home = tmp_path / "xdg"
    (home / "cudapkgs").mkdir(parents=True)
    (home / "cudapkgs" / "config.toml").write_text("allowUnfree = true\ncudaSupport = true\n")
    from_env = tmp_path / "env.toml"
    from_env.write_text("allowAliases = false\n")
    explicit = tmp_path / "c.toml"
    explicit.write_text('cudaCapabilities = ["8.6"]\n')
    env = {"XDG_CONFIG_HOME": str(home), "CUDAPKGS_CONFIG": str(from_env), "CUDAPKGS_STORE": str(tmp_path / "s")}
    data = json.loads(ok("config", "--json", "--origins", "--config", str(explicit), "--set", "cudaSupport=false", env=env))
    origin = {key: entry["origin"] for key, entry in data.items()}
    assert origin["allowUnfree"] == f"file {home}/cudapkgs/config.toml"
    assert origin["allowAliases"] == f"environment: file {from_env} ($CUDAPKGS_CONFIG)"
    assert origin["cudaCapabilities"] == f"file {explicit} (--config)"
    assert origin["cudaSupport"] == "--set" and data["cudaSupport"]["value"] is False
    assert origin["storeDir"] == "environment ($CUDAPKGS_STORE)" and data["storeDir"]["value"] == str(tmp_path / "s")
    assert origin["rocmSupport"] == "default"
    table = ok("config", env=env)
    assert "environment ($CUDAPKGS_STORE)" in table and f"file {home}/cudapkgs/config.toml" in table
    # --store is named as typed (it was reported as "--set"), over --set storeDir too: it has the last word
    for extra in ([], ["--set", 'storeDir="/elsewhere"']):
        data = json.loads(ok("config", "--json", "--origins", *extra, "--store", str(tmp_path / "t"), env=env))
        assert data["storeDir"] == {"value": str(tmp_path / "t"), "origin": "--store"}
    assert re.search(r"^storeDir\*? +\S+ +--store ", ok("config", "--store", str(tmp_path / "t"), env=env), re.M)


def test_an_unknown_capability_is_one_line_naming_the_valid_ones():
    # Nixpkgs' message is a header and "- ..." lines (the library keeps it); the command prints one line
    # that says which capabilities the release supports and where to see them.
    result = run("eval", "--set", 'cudaCapabilities=["9.9"]', "cudaPackages_12_9.flags.gencode")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("cudapkgs: error: cudaPackages_12_9.backendStdenv has failed assertions: ")
    assert 'Requested unrecognized CUDA capabilities: ["9.9"]' in line
    assert "CUDA 12.9 supports the capabilities 5.0, " in line and " 9.0, " in line and "cudapkgs capabilities --cuda 12.9" in line
    # several failed assertions: one line too, separated by "; "
    result = run("eval", "--set", 'cudaCapabilities=["9.9", "3.5"]', "cudaPackages_12_9.flags.gencode")
    assert len(result.stderr.splitlines()) == 1 and '["9.9"]; Requested CUDA capabilities which are too old' in result.stderr


@pytest.mark.parametrize(
    ("argv", "usage", "unknown"),
    [
        (["build", "--sett", "x=1", "cudaPackages_13_0.cuda_nvcc"], "usage: cudapkgs build ", "--sett"),
        (["gc", "--max-freed", "1"], "usage: cudapkgs gc ", "--max-freed 1"),
        (["cdi", "generate", "--bogus"], "usage: cudapkgs cdi generate ", "--bogus"),
        (["--bogus"], "usage: cudapkgs [-h]", "--bogus"),
    ],
)
def test_an_unknown_option_shows_the_usage_of_its_command(argv, usage, unknown, capsys):
    # argparse's top level reported a sub-command's unknown option with its own usage
    # ("usage: cudapkgs [-h] [--version] COMMAND ..."), which does not say what the command takes.
    from cudapkgs.cli import main

    with pytest.raises(SystemExit) as caught:
        main(argv)
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.startswith(usage), err
    assert err.endswith(f": error: unrecognized arguments: {unknown}\n")


def test_a_removed_working_directory_is_a_one_line_error(tmp_path):
    """A directory removed under the shell (a `git checkout`), then a direnv hook's `cudapkgs shell` there:
    every command stopped with an internal error (exit 70, a traceback's last line)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    for argv in (["shell", "--print-env"], ["eval", "cudaPackages.cuda_cudart.version"], ["allow"]):
        script = f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" -m cudapkgs "$@"'
        done = subprocess.run(["sh", "-c", script, "sh", *argv], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
        gone.mkdir()
        assert done.returncode == 1 and done.stdout == "", (argv, done.stderr)
        assert done.stderr.startswith("cudapkgs: error: the current directory cannot be read")
        assert len(done.stderr.splitlines()) == 1


def test_copy_and_build_help_name_the_direct_writes_variable():
    """A new user found `CUDAPKGS_DIRECT_WRITES` nowhere in --help (only in docs/ and in an error message)."""
    for command in ("copy", "build"):
        text = ok(command, "--help")
        assert "CUDAPKGS_DIRECT_WRITES=auto|on|off" in text and "O_DIRECT" in text, command
