"""The `cudapkgs cdi` commands, run through the real command line."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import cdi_fakes as fakes
import pytest
import yaml

from cudapkgs.cli import main


@pytest.fixture
def machine(tmp_path):
    return fakes.golden_machine(tmp_path)


def _gen(machine, *extra) -> list[str]:
    return ["cdi", "generate", *machine.cli_args(), "--gpu-discovery", "proc", *extra]


def test_generate_to_stdout_is_the_spec(machine, capsys):
    assert main(_gen(machine, "--device-name-strategy", "index,uuid")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in doc["devices"]] == ["0", fakes.GPU0_UUID, "all"]


def test_generate_writes_atomically_with_mode_0644(machine, tmp_path, capsys):
    out = tmp_path / "cdi" / "nvidia.json"
    assert main(_gen(machine, "--output", str(out))) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert not out.read_text().endswith("\n") and json.loads(out.read_text())["cdiVersion"] == "0.5.0"
    assert [p.name for p in out.parent.iterdir()] == ["nvidia.json"]  # no temporary file left
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize("shape", ["trailing-slash", "existing-directory"])
def test_generate_output_naming_a_directory_is_one_line_and_writes_nothing(machine, tmp_path, capsys, shape):
    target = tmp_path / "specs.json"
    if shape == "existing-directory":
        target.mkdir()
    output = str(target) + ("/" if shape == "trailing-slash" else "")
    assert main(_gen(machine, "--output", output)) != 0
    err = capsys.readouterr().err
    assert "names a directory" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "specs.json.json").exists()
    assert not target.exists() or list(target.iterdir()) == []


def test_generate_yaml_by_extension_and_yml_gets_yaml_appended(machine, tmp_path, capsys):
    assert main(_gen(machine, "-o", str(tmp_path / "nvidia.yml"))) == 0
    written = tmp_path / "nvidia.yml.yaml"
    assert written.read_text().startswith("---\n")
    assert yaml.safe_load(written.read_text())["kind"] == "nvidia.com/gpu"
    assert "only read *.json and *.yaml" in capsys.readouterr().err


def test_no_gpu_exits_non_zero_without_writing(tmp_path, capsys):
    out = tmp_path / "nvidia.json"
    empty = ["--driver-root", str(tmp_path), "--procfs-root", str(tmp_path / "proc"), "--sysfs-root", str(tmp_path / "sys")]
    env_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(tmp_path)  # no nvidia-smi either
    try:
        status = main(["cdi", "generate", *empty, "--gpu-discovery", "proc", "-o", str(out)])
    finally:
        os.environ["PATH"] = env_path
    assert status == 1 and not out.exists()
    err = capsys.readouterr().err
    assert err.startswith("cudapkgs: error: no NVIDIA GPU or driver was found") and "Traceback" not in err


def test_bad_vendor_is_a_one_line_error(machine, capsys):
    assert main(_gen(machine, "--vendor=-bad")) == 1
    assert capsys.readouterr().err.startswith("cudapkgs: error: invalid vendor '-bad'")


def test_validate_good_and_bad(machine, tmp_path, capsys):
    good = tmp_path / "good.json"
    main(_gen(machine, "-o", str(good)))
    bad = tmp_path / "bad.json"
    doc = json.loads(good.read_text())
    doc["devices"][0]["name"] = "bad name"
    bad.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["cdi", "validate", str(good)]) == 0
    assert "valid CDI spec (cdiVersion 0.5.0, 3 devices)" in capsys.readouterr().out
    assert main(["cdi", "validate", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}: $.devices[0].name: invalid device name 'bad name'" in out
    assert main(["cdi", "validate", "--json", str(bad)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report[0]["valid"] is False and report[0]["problems"][0]["path"] == "$.devices[0].name"


def test_validate_check_host(machine, tmp_path, capsys):
    spec = tmp_path / "nvidia.json"
    main(_gen(machine, "-o", str(spec), "--hook-path", sys.executable))
    capsys.readouterr()
    # The fake machine's device nodes are regular files: --check-host says so, path by path.
    assert main(["cdi", "validate", "--check-host", "--json", str(spec)]) == 1
    problems = json.loads(capsys.readouterr().out)[0]["problems"]
    assert problems and all(p["message"].endswith("is a regular file, not a device node") and ".deviceNodes[" in p["path"] for p in problems)
    # With real character devices behind them (and every mount source present) the spec passes.
    doc = json.loads(spec.read_text())
    for edits in [doc["containerEdits"]] + [d["containerEdits"] for d in doc["devices"]]:
        for node in edits.get("deviceNodes", []):
            node["hostPath"] = "/dev/null"
    spec.write_text(json.dumps(doc))
    assert main(["cdi", "validate", "--check-host", str(spec)]) == 0
    bad = tmp_path / "bad.json"
    doc["containerEdits"]["deviceNodes"][0].update(hostPath="/dev/null", type="b")
    bad.write_text(json.dumps(doc))
    assert main(["cdi", "validate", "--check-host", str(bad)]) == 1
    assert "$.containerEdits.deviceNodes[0].hostPath: /dev/null is a character device, but the spec says type 'b'" in capsys.readouterr().out


def test_validate_two_specs_claiming_one_device(tmp_path, capsys):
    (tmp_path / "a.json").write_text(_spec("nvidia.com/gpu", "0"))
    (tmp_path / "b.json").write_text(_spec("nvidia.com/gpu", "0", "1"))
    assert main(["cdi", "validate", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'a.json'}: $.devices[0].name: nvidia.com/gpu=0 is also defined by {tmp_path / 'b.json'}" in out
    assert f"{tmp_path / 'b.json'}: $.devices[0].name: nvidia.com/gpu=0 is also defined by {tmp_path / 'a.json'}" in out


def test_deep_and_hostile_specs_are_clean_errors_and_list_skips_them(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(_spec("nvidia.com/gpu", "0"))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep-object.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    (tmp_path / "deep.yaml").write_text("a:\n" + "".join("  " * i + "- \n" for i in range(1, 2000)))
    laughs = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
    (tmp_path / "laughs.yaml").write_text(laughs)
    (tmp_path / "latin1.json").write_bytes(b'{"kind": "\xff"}')
    os.mkfifo(tmp_path / "fifo.json")
    bad = ["deep.json", "deep-object.json", "deep.yaml", "laughs.yaml", "latin1.json", "fifo.json"]
    assert main(["cdi", "validate", *[str(tmp_path / n) for n in bad]]) == 1
    out = capsys.readouterr().out
    assert out.count("nested more than 32 levels deep") == 4 and "not a regular file" in out and "Traceback" not in out
    assert main(["cdi", "list", "--spec-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "nvidia.com/gpu=0\n"
    for name in ("deep.json", "deep-object.json", "deep.yaml", "laughs.yaml", "latin1.json"):
        assert f"{tmp_path / name} is ignored" in captured.err


def _spec(kind: str, *names: str) -> str:
    return json.dumps({"cdiVersion": "0.5.0", "kind": kind, "devices": [{"name": n, "containerEdits": {"env": [f"N={n}"]}} for n in names]})


def test_list_precedence_conflicts_and_ignored_files(tmp_path, capsys):
    static, dynamic = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    static.mkdir()
    dynamic.mkdir()
    (static / "nvidia.yaml").write_text(_spec("nvidia.com/gpu", "0", "1", "all"))
    (dynamic / "nvidia.json").write_text(_spec("nvidia.com/gpu", "0", "GPU-abc", "all"))
    (dynamic / "other.json").write_text(_spec("nvidia.com/gpu", "all"))  # same dir: conflict
    (dynamic / "ignored.yml").write_text(_spec("nvidia.com/gpu", "9"))
    (dynamic / "broken.json").write_text("{")
    (static / "vendor.json").write_text(_spec("example.com/net", "eth0"))
    assert main(["cdi", "list", "--spec-dir", str(static), "--spec-dir", str(dynamic)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["example.com/net=eth0", "nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=GPU-abc"]
    assert "nvidia.com/gpu=all is unusable" in captured.err and "broken.json is ignored" in captured.err
    assert main(["cdi", "list", "--json", "--spec-dir", str(static), "--spec-dir", str(dynamic)]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert {d["name"]: d["spec"] for d in listing["devices"]}["nvidia.com/gpu=0"] == str(dynamic / "nvidia.json")
    assert listing["unusable"][0]["name"] == "nvidia.com/gpu=all"


def test_list_with_no_spec_says_so_on_stderr_only(tmp_path, capsys):
    assert main(["cdi", "list", "--spec-dir", str(tmp_path / "none")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and f"no CDI devices in {tmp_path / 'none'}" in captured.err
    assert "cdi generate" in captured.err


def test_list_of_a_generated_spec(machine, tmp_path, capsys):
    main(_gen(machine, "-o", str(tmp_path / "cdi" / "nvidia.json")))
    capsys.readouterr()
    main(["cdi", "list", "--spec-dir", str(tmp_path / "cdi")])
    assert capsys.readouterr().out.splitlines() == ["nvidia.com/gpu=0", f"nvidia.com/gpu={fakes.GPU0_UUID}", "nvidia.com/gpu=all"]


def test_snippets(capsys, tmp_path, monkeypatch):
    import cudapkgs.containers.registry as registry

    monkeypatch.setattr(registry, "DEFAULT_SPEC_DIRS", (str(tmp_path / "none"),))  # this machine's specs do not count
    assert main(["cdi", "snippet", "docker"]) == 0
    assert capsys.readouterr().out == "--device nvidia.com/gpu=all\n"
    assert main(["cdi", "snippet", "podman", "--device", "0", "--device", "nvidia.com/gpu=GPU-abc"]) == 0
    assert capsys.readouterr().out == "--device nvidia.com/gpu=0 --device nvidia.com/gpu=GPU-abc\n"
    assert main(["cdi", "snippet", "compose", "--device", "0,1", "--service", "app"]) == 0
    compose = yaml.safe_load(capsys.readouterr().out)
    assert compose["services"]["app"]["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "cdi", "capabilities": ["gpu"], "device_ids": ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]}
    ]
    assert main(["cdi", "snippet", "docker", "--device", "bad/name"]) == 1


def test_snippet_device_names_are_checked(capsys, tmp_path, monkeypatch, machine):
    """Before, `cdi snippet docker --device bogus` printed `--device nvidia.com/gpu=bogus` unchecked."""
    import cudapkgs.containers.registry as registry

    monkeypatch.setattr(registry, "DEFAULT_SPEC_DIRS", (str(tmp_path / "none"),))
    assert main(["cdi", "snippet", "docker", "--device", "bogus"]) == 1
    err = capsys.readouterr().err
    assert "nvidia.com/gpu=bogus: not a name `cdi generate` gives nvidia.com/gpu devices (all, an index" in err
    assert main(["cdi", "snippet", "docker", "--device", "gpu3,mig0:1,MIG-4a2b-77"]) == 0  # the kind's syntax
    assert main(["cdi", "snippet", "docker", "--device", "example.com/fpga=bogus"]) == 0  # a kind of unknown syntax
    assert main(["cdi", "snippet", "docker", "--device", "bogus", "--no-check"]) == 0
    capsys.readouterr()
    # against a spec: only what it defines
    main(_gen(machine, "-o", str(tmp_path / "cdi" / "nvidia.json")))
    capsys.readouterr()
    spec = ["--spec-dir", str(tmp_path / "cdi")]
    assert main(["cdi", "snippet", "docker", "--device", "0", *spec]) == 0
    assert capsys.readouterr().out == "--device nvidia.com/gpu=0\n"
    assert main(["cdi", "snippet", "docker", "--device", "3", *spec]) == 1
    assert "nvidia.com/gpu=3: no CDI spec here defines it (defined: nvidia.com/gpu=0" in capsys.readouterr().err


def test_install_service_print_and_install(tmp_path, capsys):
    args = ["--device-name-strategy", "index", "--disable-hook", "create-symlinks", "--library-search-path", "/run/opengl-driver/lib"]
    assert main(["cdi", "install-service", "--print", *args]) == 0
    printed = capsys.readouterr().out
    exec_start = next(line for line in printed.splitlines() if line.startswith("ExecStart="))
    assert "cdi generate --format json --output /run/cdi/nvidia-container-toolkit.json" in exec_start
    assert exec_start.endswith("--device-name-strategy index --library-search-path /run/opengl-driver/lib --disable-hook create-symlinks")
    assert "Type=oneshot" in printed and "RuntimeDirectory=cdi" in printed and 'KERNEL=="nvidia"' in printed
    # every trigger reruns the service: no RemainAfterExit; a removed driver removes the spec
    assert "RemainAfterExit" not in printed and "--if-no-gpu remove" in exec_start
    assert "PathChanged=/lib/modules/%v/modules.dep\n" in printed and "PathChanged=/run/opengl-driver/lib\n" in printed
    units, rules = tmp_path / "units", tmp_path / "rules"
    assert main(["cdi", "install-service", *args, "--unit-dir", str(units), "--udev-dir", str(rules)]) == 0
    unit = (units / "cudapkgs-cdi-generator.service").read_text()
    assert exec_start in unit and "WantedBy=multi-user.target" in unit
    assert "restart cudapkgs-cdi-generator.service" in (rules / "71-cudapkgs-cdi.rules").read_text()
    assert "Unit=cudapkgs-cdi-generator.service" in (units / "cudapkgs-cdi-generator.path").read_text()


def test_installed_units_pass_systemd_analyze_verify(tmp_path, capsys):
    import shutil

    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed here (apt-get install systemd)")
    units = tmp_path / "units"
    assert main(["cdi", "install-service", "--library-search-path", str(tmp_path), "--unit-dir", str(units), "--udev-dir", str(tmp_path / "rules")]) == 0
    files = sorted(str(p) for p in units.iterdir())
    assert [os.path.basename(f) for f in files] == ["cudapkgs-cdi-generator.path", "cudapkgs-cdi-generator.service"]
    done = subprocess.run([analyze, "verify", "--man=no", *files], capture_output=True, text=True, check=False)
    if done.returncode != 0 and ("Failed to initialize" in done.stderr or "System has not been booted" in done.stderr):
        pytest.skip(f"systemd-analyze cannot run here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    # and it does catch a broken unit, so the check above means something
    bad = units / "cudapkgs-cdi-generator.service"
    bad.write_text(bad.read_text().replace("ExecStart=/", "ExecStart=no-such-dir/"))
    assert subprocess.run([analyze, "verify", "--man=no", str(bad)], capture_output=True, text=True, check=False).returncode != 0


def test_generate_if_no_gpu_remove_deletes_the_stale_spec(tmp_path, capsys):
    empty = tmp_path / "empty"
    (empty / "proc").mkdir(parents=True)
    (empty / "sys").mkdir()
    out = tmp_path / "cdi" / "nvidia.json"
    out.parent.mkdir()
    out.write_text('{"stale": "names /usr/lib/x86_64-linux-gnu/libcuda.so.550.1.2"}')
    base = ["cdi", "generate", "--driver-root", str(empty), "--procfs-root", str(empty / "proc"), "--sysfs-root", str(empty / "sys"), "--gpu-discovery", "proc", "-o", str(out)]
    assert main(base) == 1 and out.exists()  # default: fail, leave it
    assert main([*base, "--if-no-gpu", "remove"]) == 0
    assert not out.exists() and "removed the stale spec" in capsys.readouterr().err
    assert main([*base, "--if-no-gpu", "remove"]) == 0  # nothing to remove: still fine


def test_generate_if_no_gpu_remove_of_an_unremovable_spec_is_one_line(tmp_path, capsys):
    """Review r1: a stale "spec" that is a directory ended --if-no-gpu remove with exit 70."""
    empty = tmp_path / "empty"
    (empty / "proc").mkdir(parents=True)
    (empty / "sys").mkdir()
    out = tmp_path / "cdi" / "nvidia.json"
    (out / "inside").mkdir(parents=True)
    assert main(["cdi", "generate", "--driver-root", str(empty), "--procfs-root", str(empty / "proc"), "--sysfs-root",
                 str(empty / "sys"), "--gpu-discovery", "proc", "-o", str(out), "--if-no-gpu", "remove"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output {out} names a directory" in err, err
    assert (out / "inside").is_dir()


def test_install_service_refuses_bad_options(capsys):
    assert main(["cdi", "install-service", "--print", "--disable-hook", "nope"]) == 1
    assert "unknown hook 'nope'" in capsys.readouterr().err


def test_systemd_quoting():
    from cudapkgs.containers.service import systemd_quote

    assert systemd_quote("/a/b") == "/a/b"
    assert systemd_quote("/with space/%h$x") == '"/with space/%%h$$x"'


def test_install_service_values_a_unit_cannot_carry(tmp_path, capsys, monkeypatch):
    """Review r1: a line break in --output or a library directory ended the ExecStart= line and
    started a directive of its own; PathChanged= was quoted, which systemd does not unquote
    (load-fragment.c config_parse_path_spec: specifiers, then path_is_absolute), so a
    directory with a space was never watched; a relative --output named a file under / (the
    unit's working directory)."""
    units, udev = tmp_path / "units", tmp_path / "udev"
    base = ["cdi", "install-service", "--unit-dir", str(units), "--udev-dir", str(udev)]
    assert main([*base, "--output", "/run/cdi/a\nExecStartPost=/bin/evil.json"]) == 1
    assert main([*base, "--library-search-path", "/opt/lib\nExecStart=/bin/evil"]) == 1
    err = capsys.readouterr().err
    assert err.count("holds a control character") == 2 and "internal error" not in err
    assert not units.exists() and not udev.exists()
    assert main([*base, "--library-search-path", "/opt/my libs/100%", "--print"]) == 0
    printed = capsys.readouterr().out
    assert "PathChanged=/opt/my libs/100%%\n" in printed
    monkeypatch.chdir(tmp_path)
    assert main([*base, "--output", "specs/nvidia.json", "--print"]) == 0
    printed = capsys.readouterr().out
    assert f"--output {tmp_path}/specs/nvidia.json " in printed


def test_cli_module_imports_only_argparse():
    code = "import sys, cudapkgs.cli.containers; print(sorted(m for m in sys.modules if m.startswith('cudapkgs.containers.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_teaches(capsys):
    with pytest.raises(SystemExit):
        main(["cdi", "generate", "--help"])
    text = capsys.readouterr().out
    assert "--device-name-strategy" in text and "examples:" in text and "MIG" in text


def test_whole_process_generate_and_validate(machine, tmp_path):
    out = tmp_path / "run" / "nvidia.json"
    cmd = [sys.executable, "-m", "cudapkgs", *_gen(machine, "-o", str(out))]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "cudapkgs", "cdi", "validate", str(out)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "valid CDI spec" in done.stdout


def test_management_mode(machine, tmp_path, capsys):
    """nvidia-ctk --mode management (pkg/nvcdi/management.go, v1.20): kind management.nvidia.com/gpu,
    one device "all" with every NVIDIA node except nvidia-fs*/nvswitch*/nvlink*; the driver's files common."""
    for extra in ("dev/nvidia-uvm", "dev/nvidia-caps/nvidia-cap1", "dev/nvidia-nvswitch0", "dev/nvidia-fs0"):
        path = machine.root / extra
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert main(_gen(machine, "--mode", "management")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "management.nvidia.com/gpu"
    assert [d["name"] for d in doc["devices"]] == ["all"]
    nodes = [n["path"] for n in doc["devices"][0]["containerEdits"]["deviceNodes"]]
    assert sorted(nodes) == ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]
    assert "deviceNodes" not in doc["containerEdits"]
    assert any(m["containerPath"].endswith(f"libcuda.so.{fakes.GOLDEN_VERSION}") for m in doc["containerEdits"]["mounts"])
    assert main(_gen(machine, "--mode", "management", "--vendor", "example.com")) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "example.com/gpu"


def test_csv_mode_is_a_documented_non_goal(machine, capsys):
    assert main(_gen(machine, "--mode", "csv")) == 1
    err = capsys.readouterr().err
    assert "--mode csv is not supported by cudapkgs" in err and err.count("\n") == 1


def test_several_strategies_at_once(machine, capsys):
    assert main(_gen(machine, "--device-name-strategy", "index", "--device-name-strategy", "uuid,type-index")) == 0
    names = [d["name"] for d in json.loads(capsys.readouterr().out)["devices"]]
    assert names == ["0", fakes.GPU0_UUID, "all", "gpu0"]


def test_hook_program_never_depends_on_path(tmp_path, monkeypatch):
    """Runtimes start hooks with the spec's env only (no PATH): seen failing on the H200 when the
    hook was `python3.12 -m cudapkgs` with a bare argv[0] (docs/cdi-podman.md)."""
    from cudapkgs.containers import generate

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no cudapkgs on PATH
    python = tmp_path / "venv" / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text("")
    monkeypatch.setattr(generate.sys, "executable", str(python))
    program = generate.HookProgram.at(None)
    assert program.path == str(python) and program.prefix[0] == str(python)  # full path as argv[0]
    script = python.parent / "cudapkgs"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    program = generate.HookProgram.at(None)
    assert program.path == str(script) and program.prefix == ("cudapkgs", "cdi", "hook")


def test_list_skips_specs_with_missing_or_mistyped_fields(tmp_path, capsys):
    """Review r1: `cdi list` crashed with exit 70 (KeyError) on a spec without `devices`."""
    (tmp_path / "good.json").write_text(_spec("nvidia.com/gpu", "0"))
    hostile = {
        "no-devices.json": {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu"},
        "no-kind.json": {"cdiVersion": "0.5.0", "devices": [{"name": "1", "containerEdits": {"env": ["A=1"]}}]},
        "devices-dict.json": {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": {"name": "2"}},
        "device-str.json": {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": ["3"]},
        "no-name.json": {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"containerEdits": {"env": ["A=1"]}}]},
        "kind-int.json": {"cdiVersion": "0.5.0", "kind": 5, "devices": [{"name": "4", "containerEdits": {"env": ["A=1"]}}]},
        "empty.json": {},
        "list.json": [],
    }
    for name, doc in hostile.items():
        (tmp_path / name).write_text(json.dumps(doc))
    assert main(["cdi", "list", "--spec-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "nvidia.com/gpu=0\n"
    for name in hostile:
        assert f"{tmp_path / name} is ignored" in captured.err
    assert main(["cdi", "list", "--json", "--spec-dir", str(tmp_path)]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert sorted(Path(i["spec"]).name for i in listing["invalid_specs"]) == sorted(hostile)


def test_a_nul_byte_in_a_spec_is_a_problem_everywhere(tmp_path, capsys):
    """Review r1: a NUL byte in a device node, mount or hook path passed the loader checks, so
    `cdi validate --check-host` and `cdi inject` ended with exit 70 (ValueError) and `cdi list`
    offered the device."""
    edits = {"deviceNodes": [{"path": "/dev/nu\0ll"}], "hooks": [{"hookName": "createContainer", "path": "/bin/tr\0ue"}],
             "env": ["A=\0"]}
    spec = tmp_path / "specs" / "nul.json"
    spec.parent.mkdir()
    spec.write_text(json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": edits}]}))
    assert main(["cdi", "validate", "--check-host", str(spec)]) == 1
    out = capsys.readouterr().out
    for where in ("deviceNodes[0].path", "hooks[0].path", "env[0]"):
        assert f"$.devices[0].containerEdits.{where}: holds a NUL byte" in out, out
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    assert main(["cdi", "inject", str(spec), "nvidia.com/gpu=0", "--bundle", str(bundle)]) == 1
    assert "holds a NUL byte" in capsys.readouterr().err
    assert main(["cdi", "list", "--spec-dir", str(spec.parent)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and f"{spec} is ignored" in captured.err


def test_an_empty_path_finds_no_hook_program_in_the_working_directory(tmp_path, monkeypatch):
    """review r1 (session 3): `_on_path` replaced `shutil.which`, but with PATH set and empty it
    searched the working directory (which finds nothing then): a file named cudapkgs there became
    the program every container's hooks run."""
    import shutil

    from cudapkgs.containers import generate

    planted = tmp_path / "cudapkgs"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(generate.sys, "executable", str(tmp_path / "elsewhere" / "python3"))
    for value in ("", "/nonexistent-dir"):
        monkeypatch.setenv("PATH", value)
        assert generate._on_path("cudapkgs") == shutil.which("cudapkgs") is None
        assert generate.HookProgram.at(None).path != str(planted)
    monkeypatch.delenv("PATH")
    assert generate._on_path("sh") == shutil.which("sh")  # no PATH: the default search path, as which


def test_the_service_answers_to_the_name_nixos_and_the_seed_guide_use(tmp_path):
    # seed guide: `systemctl status nvidia-container-toolkit-cdi-generator.service`; systemd links an
    # [Install] Alias= when the unit is enabled (systemd.unit(5))
    from cudapkgs.containers.service import render

    unit = render([], unit_dir=str(tmp_path / "units"), udev_dir=str(tmp_path / "rules")).unit
    install = unit.split("[Install]", 1)[1]
    assert "\nAlias=nvidia-container-toolkit-cdi-generator.service\n" in install
    assert unit.count("Alias=") == 1
