"""mk_derivation and the generic builder: phases, steps, strictDeps, structured attrs, hashing, saxpy on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cudapkgs
from cudapkgs.realise.generic import attrs_sh
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import build_one, realise
from cudapkgs.config import load_config
from cudapkgs.derivation import Derivation
from cudapkgs.elf.read import read_elf
from cudapkgs.errors import EvalError
from cudapkgs.lib.fixpoint import lazy
from cudapkgs.stdenv import PHASES, mk_derivation
from cudapkgs.store.store import Store

needs_gcc = pytest.mark.skipif(shutil.which("gcc", path="/usr/bin:/bin") is None, reason="needs gcc in /usr/bin")


@pytest.fixture
def store_dir(tmp_path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def config(store_dir):
    return load_config(overrides={"storeDir": str(store_dir)})


@pytest.fixture
def store(store_dir):
    with Store.open(store_dir) as s:
        yield s


def build(store, *packages, **options) -> list[str]:
    return realise(store, [p.derivation for p in packages], **options)


# --- phases and steps ----------------------------------------------------------


def test_phases_run_in_order_with_hooks(config, store):
    steps: list[str] = []
    hooks = {}
    for phase in PHASES:
        cap = phase.capitalize()
        hooks[f"pre{cap}"] = f'echo pre{cap} >> "$out/order"'
        hooks[f"{phase}Phase"] = f'echo {phase}Phase >> "$out/order"'
        hooks[f"post{cap}"] = f'echo post{cap} >> "$out/order"'
    pkg = mk_derivation(config, {"pname": "order", "version": "1", "stdenvCc": None, **hooks})
    build_one(store, pkg.derivation, on_step=steps.append)
    assert steps == [f"{p}Phase" for p in PHASES]
    expected = [f"{kind}" for p in PHASES for kind in (f"pre{p.capitalize()}", f"{p}Phase", f"post{p.capitalize()}")]
    assert Path(pkg.out, "order").read_text().split() == expected


def test_dont_flags_skip_phases(config, store):
    pkg = mk_derivation(config, {
        "pname": "skip", "dontBuild": True,
        "buildPhase": "exit 1", "installPhase": 'touch "$out/installed"',
    })
    build(store, pkg)
    assert Path(pkg.out, "installed").exists()


def _record_cwd(attrs, env, work_dir, outputs):
    (outputs["out"] / "python-cwd").write_text(str(work_dir))
    env["FROM_PYTHON"] = attrs["greeting"] + "!"


def _write_outputs(attrs, env, work_dir, outputs):
    (outputs["lib"] / "marker").write_text(" ".join(sorted(attrs["outputs"])))


def test_shell_and_python_steps_share_env_and_outputs(config, store):
    pkg = mk_derivation(config, {
        "pname": "steps", "outputs": ["out", "lib"], "greeting": "hello",
        "buildPhase": _record_cwd,
        "installPhase": 'echo "$FROM_PYTHON" > "$out/shell"; pwd > "$out/shell-cwd"',
        "postInstall": _write_outputs,
    })
    build(store, pkg)
    assert Path(pkg.out, "shell").read_text() == "hello!\n"
    assert Path(pkg.out, "python-cwd").read_text() == Path(pkg.out, "shell-cwd").read_text().strip()
    assert Path(pkg.lib, "marker").read_text() == "lib out"
    assert pkg.lib.endswith("-steps-lib") and pkg.outPath == pkg.out


def _log_a_line(attrs, env, work_dir, outputs, log):
    log.write(f"step of {attrs['pname']} writes to the build log\n")
    (outputs["out"] / "done").write_text("")


def test_a_python_step_taking_a_log_writes_to_the_build_log(config, store):
    from cudapkgs.realise.realise import log_path

    pkg = mk_derivation(config, {"pname": "logs", "stdenvCc": None, "installPhase": _log_a_line})
    build(store, pkg)
    assert "step of logs writes to the build log" in log_path(store, pkg.derivation).read_text()


def test_python_step_records_name_and_source(config):
    pkg = mk_derivation(config, {"pname": "p", "buildPhase": _record_cwd})
    record = pkg.drvAttrs["buildPhase"]
    assert record["python"] == f"{__name__}:_record_cwd"
    assert record["source"].startswith("def _record_cwd(attrs, env, work_dir, outputs):")


def test_failing_phase_names_phase_and_last_lines(config, store):
    pkg = mk_derivation(config, {"pname": "fails", "buildPhase": "echo first line\necho about to fail >&2\nfalse\necho never"})
    with pytest.raises(BuildError) as info:
        build(store, pkg)
    message = str(info.value)
    assert "buildPhase failed with exit status 1" in message and "about to fail" in message
    assert "never" not in message
    assert not store.is_valid(pkg.out)


def _raises(attrs, env, work_dir, outputs):
    raise ValueError("bad input")


def test_failing_python_step_is_a_build_error(config, store):
    pkg = mk_derivation(config, {"pname": "pyfail", "installPhase": _raises})
    with pytest.raises(BuildError, match="installPhase .*_raises.* ValueError: bad input"):
        build(store, pkg)


# --- sources -----------------------------------------------------------------


def test_unpack_copies_a_directory_source_writable(config, store, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "data.txt").write_text("payload")
    os.chmod(src / "sub" / "data.txt", 0o444)
    pkg = mk_derivation(config, {
        "pname": "unpack", "src": src,
        "buildPhase": 'echo more >> sub/data.txt',
        "installPhase": 'cp sub/data.txt "$out/"',
    })
    assert pkg.derivation.data["src"]["type"] == "path"
    build(store, pkg)
    assert Path(pkg.out, "data.txt").read_text() == "payloadmore\n"


def test_custom_unpack_phase_and_source_root(config, store):
    pkg = mk_derivation(config, {
        "pname": "custom-unpack", "sourceRoot": "here/src",
        "unpackPhase": "mkdir -p here/src && echo made > here/src/file",
        "installPhase": 'cp file "$out/"; pwd > "$out/cwd"',
    })
    build(store, pkg)
    assert Path(pkg.out, "file").read_text() == "made\n"
    assert Path(pkg.out, "cwd").read_text().strip().endswith("/here/src")


def test_source_changed_after_evaluation_is_refused(config, store, tmp_path):
    src = tmp_path / "one.txt"
    src.write_text("a")
    pkg = mk_derivation(config, {"pname": "changed", "src": src, "installPhase": "true"})
    drv = pkg.derivation
    src.write_text("b")
    with pytest.raises(BuildError, match="changed since evaluation"):
        realise(store, [drv])


def test_source_content_not_location_is_hashed(config, tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "f.c").write_text("int x;")
    drvs = [mk_derivation(config, {"pname": "s", "src": tmp_path / d / "f.c"}).drvPath for d in ("a", "b")]
    assert drvs[0] == drvs[1]
    (tmp_path / "b" / "f.c").write_text("int y;")
    assert mk_derivation(config, {"pname": "s", "src": tmp_path / "b" / "f.c"}).drvPath != drvs[0]


def test_missing_source_is_an_eval_error(config, tmp_path):
    with pytest.raises(EvalError, match="does not exist"):
        mk_derivation(config, {"pname": "x", "src": tmp_path / "nope"}).drvPath


def test_patches_are_applied(config, store, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "greeting").write_text("hello\n")
    patch = tmp_path / "fix.patch"
    patch.write_text("--- a/greeting\n+++ b/greeting\n@@ -1 +1 @@\n-hello\n+hello, patched\n")
    pkg = mk_derivation(config, {"pname": "patched", "src": src, "patches": [patch],
                                 "installPhase": 'cp greeting "$out/"'})
    assert pkg.drvAttrs["patches"][0]["name"] == "fix.patch"
    build(store, pkg)
    assert Path(pkg.out, "greeting").read_text() == "hello, patched\n"


# --- environment and strictDeps ------------------------------------------------


def _dep(config, name: str):
    return mk_derivation(config, {
        "pname": name,
        "installPhase": f'mkdir -p $out/bin $out/include $out/lib; echo {name} > $out/include/{name}.h',
    })


def _env_dump(config, native, host, strict=True):
    return mk_derivation(config, {
        "pname": "envdump", "strictDeps": strict,
        "nativeBuildInputs": [native], "buildInputs": [host],
        "installPhase": 'env > "$out/env"',
    })


def _read_env(pkg) -> dict[str, str]:
    lines = Path(pkg.out, "env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_strict_deps_separates_native_and_host_inputs(config, store, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/inherited/lib")
    monkeypatch.setenv("LEAKY", "1")
    native, host = _dep(config, "tool"), _dep(config, "libfoo")
    pkg = _env_dump(config, native, host)
    cc = pkg.stdenvCc  # the host compiler in its wrapper: an implicit native input, as Nixpkgs' stdenv.cc
    assert set(pkg.derivation.deps) == {native.derivation, host.derivation, cc.derivation}
    assert pkg.derivation.data["inputs"] == {"tool.out": native.out, "libfoo.out": host.out, f"{cc.name}.out": cc.out}
    build(store, pkg)
    env = _read_env(pkg)
    assert env["PATH"].split(":")[:2] == [f"{cc.out}/bin", f"{native.out}/bin"]
    assert env["CC"] == f"{cc.out}/bin/cc" and env["CXX"] == f"{cc.out}/bin/c++"
    assert f"{host.out}/bin" not in env["PATH"] and "/usr/local/bin" not in env["PATH"].split(":")
    assert env["CPATH"] == f"{host.out}/include"
    assert env["LIBRARY_PATH"] == f"{host.out}/lib"
    assert env["NIX_LDFLAGS"] == f"-L{host.out}/lib"  # run paths come from the cc wrapper and autoPatchelf
    assert "LD_LIBRARY_PATH" not in env and "LEAKY" not in env
    assert env["out"] == pkg.out  # the final path (a link to the build directory while it runs)
    assert env["HOME"] == "/homeless-shelter"


def test_without_strict_deps_both_lists_go_everywhere(config, store):
    native, host = _dep(config, "tool"), _dep(config, "libfoo")
    pkg = _env_dump(config, native, host, strict=False)
    build(store, pkg)
    env = _read_env(pkg)
    for dep in (native, host):
        assert f"{dep.out}/bin" in env["PATH"].split(":")
        assert f"{dep.out}/include" in env["CPATH"].split(":")


def test_env_attribute_is_exported(config, store):
    pkg = mk_derivation(config, {"pname": "e", "env": {"GREETING": "hi there", "N": 3},
                                 "installPhase": 'echo "$GREETING/$N" > "$out/v"'})
    build(store, pkg)
    assert Path(pkg.out, "v").read_text() == "hi there/3\n"


# --- structured attributes ----------------------------------------------------


def test_structured_attrs_reach_the_builder_as_json_and_bash(config, store):
    dep = _dep(config, "dep")
    pkg = mk_derivation(config, {
        "pname": "sa", "version": "2",
        "flags": ["-O2", "a b", "$(no expansion)"],
        "settings": {"level": 3, "nested": {"deep": [1, None, True]}},
        "enable": True, "disable": False,
        "buildInputs": [dep],
        "installPhase": 'cp "$CUDAPKGS_ATTRS_JSON" "$out/attrs.json"; '
                        'printf "%s|" "${flags[@]}" "$enable" "$disable" "${settings[level]-unset}" > "$out/sh"',
    })
    build(store, pkg)
    attrs = json.loads(Path(pkg.out, "attrs.json").read_text())
    assert attrs["flags"] == ["-O2", "a b", "$(no expansion)"]
    assert attrs["settings"] == {"level": 3, "nested": {"deep": [1, None, True]}}
    assert attrs["buildInputs"] == [dep.out]
    assert attrs["outputPaths"] == {"out": pkg.out}
    assert set(attrs["outputs"]) == {"out"}
    assert attrs["name"] == "sa-2" and "meta" not in attrs
    # settings is nested, so it exists only in the JSON file.
    assert Path(pkg.out, "sh").read_text() == "-O2|a b|$(no expansion)|1||unset|"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
    st.one_of(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))),
              st.integers(-10**6, 10**6),
              st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                               max_size=8), max_size=4)),
    max_size=5,
))
def test_attrs_sh_quotes_any_value(attrs):
    script = attrs_sh(attrs) + "".join(
        f'for _v in "${{{k}[@]}}"; do printf "%s\\0" "$_v"; done\n' if isinstance(v, list) else f'printf "%s\\0" "${k}"\n'
        for k, v in sorted(attrs.items())
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    got = out.decode("utf-8", "surrogateescape").split("\0")[:-1] if out else []
    expected = [str(x) for _, v in sorted(attrs.items()) for x in (v if isinstance(v, list) else [v])]
    assert got == expected


def test_non_json_attributes_are_refused(config):
    with pytest.raises(EvalError, match="only allowed in a phase"):
        mk_derivation(config, {"pname": "x", "helper": len}).drvPath
    with pytest.raises(EvalError, match="only allowed in src and patches"):
        mk_derivation(config, {"pname": "x", "file": Path("/etc/hostname")}).drvPath
    with pytest.raises(EvalError, match="give either name, or pname"):
        mk_derivation(config, {}).name


def test_meta_and_passthru_are_not_hashed(config):
    a = mk_derivation(config, {"pname": "m"})
    b = mk_derivation(config, {"pname": "m", "meta": {"description": "x"}, "passthru": {"tests": len}})
    assert a.drvPath == b.drvPath


# --- hashing -----------------------------------------------------------------


def _python_a(attrs, env, work_dir, outputs):
    return 1


def _python_b(attrs, env, work_dir, outputs):
    return 2


def test_hash_changes_when_a_phase_changes(config):
    base = mk_derivation(config, {"pname": "h", "version": "1", "buildPhase": "make"})
    assert mk_derivation(config, {"pname": "h", "version": "1", "buildPhase": "make"}).drvPath == base.drvPath
    assert mk_derivation(config, {"pname": "h", "version": "1", "buildPhase": "make -j1"}).drvPath != base.drvPath
    assert base.override_attrs({"buildPhase": "make -j1"}).drvPath != base.drvPath
    py_a = mk_derivation(config, {"pname": "h", "version": "1", "buildPhase": _python_a})
    assert py_a.drvPath != base.drvPath
    assert mk_derivation(config, {"pname": "h", "version": "1", "buildPhase": _python_a}).drvPath == py_a.drvPath
    assert mk_derivation(config, {"pname": "h", "version": "1", "buildPhase": _python_b}).drvPath != py_a.drvPath


def test_input_change_changes_the_dependent(config):
    dep1 = mk_derivation(config, {"pname": "dep", "installPhase": "echo 1"})
    dep2 = dep1.override_attrs({"installPhase": "echo 2"})
    top1 = mk_derivation(config, {"pname": "top", "buildInputs": [dep1]})
    top2 = top1.override_attrs(lambda prev: {"buildInputs": [dep2]})
    assert top1.drvPath != top2.drvPath
    assert [d for d in top2.derivation.deps if d is not top2.stdenvCc.derivation] == [dep2.derivation]


def test_override_attrs_follows_through_final_attrs(config):
    pkg = mk_derivation(config, lambda final: {"pname": "f", "version": "1",
                                               "installPhase": lazy(lambda: f"echo {final.version}")})
    bumped = pkg.override_attrs({"version": "2", "outputs": ["out", "dev"]})
    assert bumped.name == "f-2" and bumped.drvAttrs["installPhase"] == "echo 2"
    assert bumped.dev.endswith("-f-2-dev") and "dev" not in pkg


# --- linking and fixup ---------------------------------------------------------


@needs_gcc
def test_fixup_points_runpaths_at_inputs_and_own_outputs(config, store, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "foo.c").write_text("int foo(void) { return 42; }\n")
    (src / "foo.h").write_text("int foo(void);\n")
    (src / "main.c").write_text('#include <stdio.h>\n#include <foo.h>\nint bar(void);\n'
                                'int main(void) { printf("%d\\n", foo() + bar()); return 0; }\n')
    (src / "bar.c").write_text("int bar(void) { return 1; }\n")
    libfoo = mk_derivation(config, {
        "pname": "libfoo", "src": src,
        "buildPhase": "gcc -shared -fPIC -o libfoo.so foo.c",
        "installPhase": 'install -Dm755 libfoo.so "$out/lib/libfoo.so"; install -Dm644 foo.h "$out/include/foo.h"',
    })
    app = mk_derivation(config, {
        "pname": "app", "src": src, "outputs": ["out", "lib"], "buildInputs": [libfoo],
        "buildPhase": "gcc -shared -fPIC -o libbar.so bar.c && gcc -o app main.c -L. -lfoo -lbar",
        "installPhase": 'install -Dm755 app "$out/bin/app"; install -Dm755 libbar.so "$lib/lib/libbar.so"',
    })
    build(store, app)
    runpath = read_elf(Path(app.out, "bin", "app")).runpath
    assert runpath == [f"{libfoo.out}/lib", f"{app.lib}/lib"]
    env = {"PATH": "/usr/bin:/bin"}
    assert subprocess.run([f"{app.out}/bin/app"], env=env, capture_output=True, text=True, check=True).stdout == "43\n"
    assert set(store.references(app.out)) == {libfoo.out, app.lib}
    assert store.closure([app.out]) == {app.out, app.lib, libfoo.out}


@needs_gcc
def test_unresolved_library_fails_fixup(config, store, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "x.c").write_text("int x(void) { return 0; }\n")
    pkg = mk_derivation(config, {
        "pname": "unresolved", "src": src,
        # a library built here but not installed: the installed binary needs it
        "buildPhase": "gcc -shared -fPIC -o libx.so x.c && echo 'int x(void); int main(void){return x();}' > m.c"
                      " && gcc -o m m.c -L. -lx",
        "installPhase": 'install -Dm755 m "$out/bin/m"',
    })
    with pytest.raises(BuildError, match="unresolved DT_NEEDED"):
        build(store, pkg)
    ignored = pkg.override_attrs({"autoPatchelfIgnoreMissingDeps": ["libx.so"]})
    build(store, ignored)


def test_remove_references_and_disallowed_references(config, store):
    tool = _dep(config, "tool")
    writes_ref = {"pname": "refs", "nativeBuildInputs": [tool],
                  "installPhase": f'echo "built by {tool.out}/bin" > "$out/note"'}
    kept = mk_derivation(config, writes_ref)
    build(store, kept)
    assert store.references(kept.out) == [tool.out]
    scrubbed = mk_derivation(config, {**writes_ref, "removeReferencesTo": [tool], "disallowedReferences": [tool]})
    build(store, scrubbed)
    note = Path(scrubbed.out, "note").read_text()
    assert "e" * 32 + tool.out[len(str(store.store_dir)) + 33:] in note and tool.out not in note
    assert store.references(scrubbed.out) == []
    refused = mk_derivation(config, {**writes_ref, "pname": "refused", "disallowedReferences": [tool]})
    with pytest.raises(BuildError, match="disallowedReferences"):
        build(store, refused)


# --- saxpy on the CPU ----------------------------------------------------------


@needs_gcc
def test_cpu_saxpy_builds_and_runs(store_dir, manifests_dir):
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    saxpy = pkgs.saxpy
    assert saxpy.cudaSupport is False and saxpy.name == "saxpy-1.0"
    assert saxpy.derivation.deps == (saxpy.stdenvCc.derivation,)  # only stdenv.cc
    with Store.open(store_dir) as store:
        assert build(store, saxpy) == [saxpy.out]
        assert store.closure([saxpy.out]) == {saxpy.out}
    exe = Path(saxpy.out, "bin", "saxpy")
    run = subprocess.run([exe, "100000"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "mode: cpu" in run.stdout and "PASS" in run.stdout
    assert subprocess.run([exe, "1000", "-", "-1"], capture_output=True).returncode == 1  # over tolerance


def test_cuda_saxpy_derivation_uses_nvcc_and_gencode(store_dir, manifests_dir):
    pkgs = cudapkgs.import_pkgs(config={
        "storeDir": str(store_dir), "allowUnfree": True, "cudaSupport": True,
        "cudaCapabilities": ["8.6", "9.0"], "cudaForwardCompat": False,
    })
    cuda = pkgs.cudaPackages_13_0
    saxpy = pkgs.saxpy.override(cudaPackages=cuda)
    attrs = saxpy.drvAttrs
    assert attrs["gencode"] == ["-gencode=arch=compute_86,code=sm_86", "-gencode=arch=compute_90,code=sm_90"]
    # Inputs contribute their dev output (else their first), as Nixpkgs' lib.getDev; the rest is propagated.
    nvcc_dev = cuda.cuda_nvcc.dev if "dev" in cuda.cuda_nvcc.outputs else cuda.cuda_nvcc.out
    assert attrs["nativeBuildInputs"] == [nvcc_dev]
    assert attrs["buildInputs"] == [cuda.cuda_cudart.dev, cuda.cuda_cccl.out]
    # stdenv.cc wraps the compiler nvcc was set up with.
    assert saxpy.stdenvCc.hostCompiler == cuda.cuda_nvcc.derivation.attrs["hostCompiler"]
    assert 'nvcc "${gencode[@]}"' in attrs["buildPhase"]
    assert attrs["removeReferencesTo"] == attrs["disallowedReferences"] == [cuda.cuda_nvcc.out]
    assert {d.name for d in saxpy.derivation.deps} == {
        cuda.cuda_nvcc.name, cuda.cuda_cudart.name, cuda.cuda_cccl.name, saxpy.stdenvCc.name}
    cpu = pkgs.saxpy.override(cudaSupport=False)
    assert cpu.drvPath != saxpy.drvPath and cpu.derivation.deps == (cpu.stdenvCc.derivation,)
    assert isinstance(saxpy.derivation, Derivation) and saxpy.derivation.builder == "mkDerivation"


def test_a_source_tarball_unpacks_confined_on_any_python_311(config, store, tmp_path):
    """The default unpack of a tarball `src`: its one top directory is the source root.  It used
    shutil.unpack_archive(filter="data"), which Python 3.11.2 (Debian 12's) lacks: TypeError."""
    import io
    import tarfile

    def tarball(name: str, members: dict[str, bytes]) -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as tar:
            for member, data in members.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    good = tarball("good-1.0.tar.gz", {"good-1.0/hello.txt": b"hi\n"})
    pkg = mk_derivation(config, {"pname": "good", "version": "1.0", "src": good,
                                 "installPhase": 'install -Dm644 hello.txt "$out/hello.txt"'})
    realise(store, [pkg.derivation])
    assert Path(pkg.out, "hello.txt").read_text() == "hi\n"
    evil = tarball("evil-1.0.tar.gz", {"../escaped.txt": b"x"})
    bad = mk_derivation(config, {"pname": "evil", "version": "1.0", "src": evil, "installPhase": 'mkdir "$out"'})
    with pytest.raises(BuildError, match="would land outside the tree"):
        realise(store, [bad.derivation])
    assert not (tmp_path / "escaped.txt").exists()


def test_an_input_that_cannot_be_used_names_the_packages_that_need_it(manifests_dir):
    # It said only 'Package "cuda13.0-cuda_nvcc-13.0.88" has an unfree license …': not whose input it was.
    from cudapkgs.errors import UnfreeLicenseError

    pkgs = cudapkgs.import_pkgs(config={"cudaSupport": True}, system="x86_64-linux")  # nothing unfree allowed
    with pytest.raises(UnfreeLicenseError) as raised:
        pkgs.cudaPackages_13_0.pkgs.saxpy.drvPath
    text = str(raised.value)
    assert text.startswith('Package "cuda13.0-cuda_nvcc-13.0.88" has an unfree license ("CUDA EULA")')
    assert text.endswith("(needed by saxpy-1.0)") and text.count("needed by") == 1, text


def test_passthru_attributes_are_read_at_the_top_level_as_nixpkgs_merges_them(config):
    """make-derivation.nix returns the derivation `// passthru`: `pkg.tests` is `pkg.passthru.tests`
    (it was "attribute 'tests' missing"); the package's own attributes win over a passthru name here,
    the drvPath does not change, and a name in neither is still missing, with passthru names suggested."""
    from cudapkgs.lib.attrpath import resolve

    plain = mk_derivation(config, {"pname": "p", "version": "1", "installPhase": 'mkdir "$out"'})
    pkg = mk_derivation(config, {"pname": "p", "version": "1", "installPhase": 'mkdir "$out"',
                                 "passthru": {"tests": {"run": "t"}, "version": "shadowed", "cudaPackages": "set"}})
    assert pkg.tests == {"run": "t"} and pkg["cudaPackages"] == "set"
    assert resolve({"p": pkg}, ["p", "tests", "run"]) == "t"
    assert pkg.version == "1"  # an attribute of the package itself is not replaced
    assert pkg.drvPath == plain.drvPath  # passthru never reaches the derivation
    with pytest.raises(EvalError):
        resolve({"p": pkg}, ["p", "nosuch"])
    assert "tests" in pkg.attribute_names() and "cudaPackages" in pkg.attribute_names()
