"""`cudapkgs build` and `cudapkgs log`: dry runs on real CUDA packages, bad input, result links, logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_scheduler import EVENTS, _fake_builder, mk  # noqa: F401  (the fixture registers the fake builder)

from cudapkgs.cli.build import realise_and_link
from cudapkgs.cli.installables import Installable
from cudapkgs.realise.realise import log_path
from cudapkgs.cli import main
from cudapkgs.errors import CudapkgsError
from cudapkgs.store.store import Store

NVCC = "cudaPackages_13_0.cuda_nvcc"


def cudapkgs(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudapkgs", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=120)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("cudapkgs: error: ")
    return result.stderr


@pytest.fixture
def store_env(tmp_path, monkeypatch):
    store_dir = tmp_path / "store"
    monkeypatch.setenv("CUDAPKGS_STORE", str(store_dir))
    return {"CUDAPKGS_STORE": str(store_dir)}


# -- real packages, without network ----------------------------------------------------------


def test_dry_run_prints_what_would_be_fetched_with_sizes(manifests_dir, store_env, tmp_path):
    result = cudapkgs("build", "--dry-run", "--set", "allowUnfree=true", NVCC, env=store_env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # No promise from a host the plan never contacted (NVIDIA's server is not tried by a dry run).
    # cuda_nvcc's nvcc.profile names the set's cudart (ef906e2, Nixpkgs' cuda_nvcc/package.nix): 5 sources.
    assert lines[0] == "these 5 sources will be fetched (69.5 MiB to download; all of it from hosts not tried):"
    row = next(l.split() for l in lines if "cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz" in l)
    assert row == ["cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz", "redist", "25.4", "MiB"]
    untried = [l.strip() for l in lines if l.strip().startswith("not tried:")]
    assert untried and untried[0].startswith("not tried: developer.download.nvidia.com (redist: these 5 files, 69.5 MiB)")
    assert "these 5 derivations will be built:" in lines
    assert lines[-1].endswith("-cuda13.0-cuda_nvcc-13.0.88.drv")
    assert not (tmp_path / "store").exists()  # a dry run creates nothing


def test_dry_run_json(manifests_dir, store_env):
    result = cudapkgs("build", "--dry-run", "--json", "--set", "allowUnfree=true", NVCC, env=store_env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    sizes = {f["name"]: f["size"] for f in data["fetch"]}
    assert sizes["cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz"] == 26657716
    assert data["downloadSize"] == sum(sizes.values())
    assert {f["source"]["fetcher"] for f in data["fetch"]} == {"redist"}
    assert not any(f["cached"] for f in data["fetch"])
    assert [p.rsplit("-cuda13.0-", 1)[1] for p in data["build"]] == [
        "cuda_crt-13.0.88.drv", "cuda_cccl-13.0.85.drv", "cuda_cudart-13.0.96.drv", "libnvvm-13.0.88.drv",
        "cuda_nvcc-13.0.88.drv",
    ]


def _simple_index(server_files: dict[str, bytes], project: str, filename: str, size: int) -> None:
    """A PEP 691 JSON page for ``project`` listing one wheel with its size (PEP 700)."""
    page = {"meta": {"api-version": "1.1"}, "name": project, "files": [
        {"filename": filename, "url": filename, "hashes": {"sha256": "0" * 64}, "size": size},
        {"filename": filename.replace("x86_64", "aarch64"), "url": "x", "hashes": {}, "size": 1},
    ]}
    server_files[f"/simple/{project}/"] = json.dumps(page).encode()


def test_dry_run_names_the_fetcher_its_size_and_the_cache(manifests_dir, store_env, tmp_path, monkeypatch):
    """fetchers = ["wheels"]: wheel sizes from the index (not the archives'), cached wheels cost nothing."""
    import hashlib

    from loopback_server import serve

    cache = tmp_path / "xdg-cache" / "cudapkgs" / "wheels"
    cache.mkdir(parents=True)
    cached = cache / "nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    cached.write_bytes(b"PK" + b"0" * 998)
    (cache / (cached.name + ".sha256")).write_text(hashlib.sha256(cached.read_bytes()).hexdigest() + "\n")
    serving = serve()
    server = next(serving)
    try:
        sizes = {"nvidia-cuda-nvcc": 37_000_000, "nvidia-cuda-cccl": 3_100_000, "nvidia-nvvm": 61_000_000,
                 "nvidia-cuda-runtime": 3_500_000}
        for project, size in sizes.items():
            wheel_version = {"nvidia-cuda-cccl": "13.0.85", "nvidia-cuda-runtime": "13.0.96"}.get(project, "13.0.88")
            stem = project.replace("-", "_")
            _simple_index(server.files, project, f"{stem}-{wheel_version}-py3-none-manylinux2014_x86_64.whl", size)
        env = {**store_env, "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"), "CUDAPKGS_PYPI_SIMPLE": server.url + "/simple"}
        result = cudapkgs("build", "--dry-run", "--json", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]', NVCC, env=env)
        text = cudapkgs("build", "--dry-run", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]', NVCC, env=env)
    finally:
        serving.close()
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    by_name = {f["name"].split("-linux-")[0]: f for f in data["fetch"]}
    assert by_name["cuda_crt"]["cached"] is True and by_name["cuda_crt"]["downloadSize"] == 0
    assert by_name["cuda_crt"]["source"] == {"fetcher": "wheels", "file": cached.name, "size": 1000, "cached": "wheel cache",
                                             "passedOver": [], "untried": None}
    assert by_name["cuda_nvcc"]["source"]["untried"] is None  # the index answered with its size
    assert by_name["cuda_nvcc"]["source"]["file"] == "nvidia-cuda-nvcc==13.0.88"
    assert by_name["cuda_nvcc"]["downloadSize"] == 37_000_000 != by_name["cuda_nvcc"]["size"]  # the wheel's, not the archive's
    assert data["downloadSize"] == sum(sizes.values())
    lines = text.stdout.splitlines()
    assert lines[0] == "these 5 sources will be fetched (99.8 MiB to download; 1 already cached):"
    assert any(l.split() == [cached.name, "wheels", "cached", "(wheel", "cache,", "1000", "B)"] for l in lines)  # with its size
    assert any(l.split() == ["nvidia-nvvm==13.0.88", "wheels", "58.2", "MiB"] for l in lines)


def test_tarball_in_the_download_cache_is_not_downloaded_again(manifests_dir, store_env, tmp_path):
    from cudapkgs.fetch.planning import download_entry

    import cudapkgs as lib

    data = json.loads(cudapkgs("build", "--dry-run", "--json", "--set", "allowUnfree=true", NVCC, env=store_env).stdout)
    nvcc = next(f for f in data["fetch"] if f["name"].startswith("cuda_nvcc-"))
    src = lib.import_pkgs(config={"allowUnfree": True}).cudaPackages_13_0.cuda_nvcc.derivation.data["src"]
    entry = download_entry(tmp_path / "store", src["sha256"], src["relativePath"])
    entry.parent.mkdir(parents=True)
    with open(entry, "wb") as f:
        f.truncate(nvcc["size"])
    again = json.loads(cudapkgs("build", "--dry-run", "--json", "--set", "allowUnfree=true", NVCC, env=store_env).stdout)
    nvcc = next(f for f in again["fetch"] if f["name"].startswith("cuda_nvcc-"))
    assert nvcc["cached"] is True and nvcc["source"]["cached"] == "download cache"
    assert again["downloadSize"] == data["downloadSize"] - nvcc["size"]


def test_incomplete_or_missing_wheels_fail_at_plan_time(manifests_dir, store_env, tmp_path):
    """CUDA 12's nvcc wheel has no nvcc; cuda_gdb has no wheel: with fetchers = ["wheels"] both are
    unavailable (no configured fetcher can supply them), refused together, one line each, naming
    the fetchers that could, before any download."""
    result = cudapkgs("build", "--dry-run", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]',
                      "cudaPackages_12_8.cuda_nvcc", "cudaPackages_12_8.cuda_gdb", env=store_env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "cudapkgs: error: cannot build 2 packages:" and len(lines) == 3
    nvcc = next(l for l in lines if l.startswith("  cuda12.8-cuda_nvcc-12.8.93: "))
    assert "no configured fetcher can supply cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz" in nvcc
    assert "nvidia-cuda-nvcc-cu12 12.8.93 lacks bin/nvcc" in nvcc and '"redist"' in nvcc and '"mirror:' in nvcc
    gdb = next(l for l in lines if l.startswith("  cuda12.8-cuda_gdb-12.8.90: "))
    assert "no PyPI wheel of cuda_gdb for CUDA 12" in gdb
    built = cudapkgs("build", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]', "cudaPackages_12_8.cuda_nvcc", env=store_env)
    assert built.returncode == 1 and "lacks bin/nvcc" in built.stderr
    assert not (tmp_path / "store" / ".cache").exists()  # nothing fetched
    # A package that needs nvcc (saxpy compiled for a GPU) is refused for the same reason, naming nvcc.
    saxpy = cudapkgs("build", "--dry-run", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]', "--set",
                     "cudaSupport=true", "cudaPackages_12_8.pkgs.saxpy", env=store_env)
    assert saxpy.returncode == 1 and "cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz" in saxpy.stderr
    assert '"redist"' in saxpy.stderr


def test_unfree_package_without_permission_fails_before_any_download(manifests_dir, store_env, tmp_path):
    error = one_line_error(cudapkgs("build", NVCC, env=store_env))
    assert "unfree license" in error and "allowUnfree" in error
    assert not (tmp_path / "store").exists()


def test_unavailable_package_fails_with_the_reason(manifests_dir, store_env, tmp_path):
    error = one_line_error(cudapkgs("build", "--set", "allowUnfree=true", NVCC, "cudaPackages_13_0.cuda_compat", env=store_env))
    assert "cuda_compat" in error and "unsupported on this platform" in error
    assert not (tmp_path / "store").exists()


def test_unknown_attribute_gets_did_you_mean(manifests_dir, store_env):
    error = one_line_error(cudapkgs("build", "--set", "allowUnfree=true", "cudaPackages_13_0.cuda_nvccc", env=store_env))
    assert 'did you mean "cuda_nvcc"' in error


def test_a_package_set_is_not_buildable(manifests_dir, store_env):
    assert "is not a package" in one_line_error(cudapkgs("build", "cudaPackages_13_0", env=store_env))


def test_a_store_path_not_in_the_store_says_so(manifests_dir, store_env, tmp_path):
    missing = f"{tmp_path}/store/{'a' * 32}-nothing"
    assert f"path '{missing}' is not valid in the store" in one_line_error(cudapkgs("build", missing, env=store_env))
    assert "is not in the store" in one_line_error(cudapkgs("build", "/etc/hostname", env=store_env))


def test_log_of_a_path_not_in_the_store(store_env, tmp_path):
    missing = f"{tmp_path}/store/{'a' * 32}-nothing"
    assert "is not in the store" in one_line_error(cudapkgs("log", missing, env=store_env))
    Store.open(tmp_path / "store").close()
    assert "is not valid in the store" in one_line_error(cudapkgs("log", missing, env=store_env))


def test_a_missing_result_link_is_said_to_be_missing(store_env, tmp_path):
    # Before any build, ./result does not exist: not "is not in the store" (it may be nowhere at all).
    Store.open(tmp_path / "store").close()
    for command in (["verify", "./result"], ["path-info", "./result"], ["why-depends", "./result", "./result"]):
        error = one_line_error(cudapkgs(*command, env=store_env, cwd=tmp_path))
        assert "path './result' does not exist" in error and "cudapkgs build" in error
    # A store path of another store keeps saying where it is not.
    error = one_line_error(cudapkgs("path-info", f"/nix/store/{'a' * 32}-x", env=store_env, cwd=tmp_path))
    assert "is not in the store" in error


def test_bad_jobs_is_a_usage_error(store_env):
    result = cudapkgs("build", "-j", "0", NVCC, env=store_env)
    assert result.returncode == 2 and "at least 1" in result.stderr


def test_importing_the_command_is_cheap():
    code = ("import sys, cudapkgs.cli as c; c.build_parser(); "
            "print(sorted(m for m in ('rich', 'sqlite3', 'cudapkgs.realise.scheduler', 'cudapkgs.store.store') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# -- building, links, logs (fake builder) ----------------------------------------------------


def test_build_links_every_output_as_a_gc_root(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    store_dir = str(tmp_path / "store")
    lib = mk(store_dir, "lib", outputs=("out", "dev"))
    app = mk(store_dir, "app", [lib], outputs=("out", "bin", "dev"))
    items = [Installable("lib", drv=lib), Installable("app", drv=app)]
    assert realise_and_link(store_dir, items, out_link="result", jobs=2) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [lib.outputs["out"], lib.outputs["dev"], app.outputs["out"], app.outputs["bin"], app.outputs["dev"]]
    links = {"result": lib.outputs["out"], "result-dev": lib.outputs["dev"], "result-2": app.outputs["out"],
             "result-2-bin": app.outputs["bin"], "result-2-dev": app.outputs["dev"]}
    for link, target in links.items():
        assert os.readlink(tmp_path / link) == target
    with Store.open(store_dir) as store:
        assert set(store.roots().values()) == set(links.values())
        assert store.gc().deleted == []
    # again: nothing is built; the links stay
    EVENTS.clear()
    assert realise_and_link(store_dir, items, out_link="result", as_json=True) == 0
    assert EVENTS == []
    data = json.loads(capsys.readouterr().out)
    assert data[1] == {"attrPath": "app", "drvPath": app.drv_path, "outputs": app.outputs}


def test_a_no_op_build_is_one_query_and_leaves_good_links_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    store_dir = str(tmp_path / "store")
    chain: list = []
    for i in range(50):
        chain.append(mk(store_dir, f"pkg{i}", chain[-2:], outputs=("out", "dev")))
    items = [Installable(d.name, drv=d) for d in chain]
    realise_and_link(store_dir, items, jobs=4)
    before = os.lstat(tmp_path / "result-50-dev").st_ino
    statements: list[str] = []
    real_open = Store.open.__func__

    def traced_open(cls, root=None):
        store = real_open(cls, root)
        store.db.conn.set_trace_callback(statements.append)
        return store

    monkeypatch.setattr(Store, "open", classmethod(traced_open))
    EVENTS.clear()
    realise_and_link(store_dir, items, jobs=4)
    assert EVENTS == []
    assert len(statements) == 1 and statements[0].startswith("SELECT path FROM ValidPaths WHERE path IN")
    assert os.lstat(tmp_path / "result-50-dev").st_ino == before
    # a link pointing elsewhere, or a lost root entry, is made again
    os.unlink(tmp_path / "result-2")
    os.symlink(chain[0].outputs["out"], tmp_path / "result-2")
    with Store.open(store_dir) as store:
        for entry in os.listdir(store.gcroots_dir / "auto"):
            if os.readlink(store.gcroots_dir / "auto" / entry) == str(tmp_path / "result-3"):
                os.unlink(store.gcroots_dir / "auto" / entry)
    realise_and_link(store_dir, items)
    assert os.readlink(tmp_path / "result-2") == chain[1].outputs["out"]
    with Store.open(store_dir) as store:
        assert str(tmp_path / "result-3") in store.roots()
    capsys.readouterr()


def test_no_link_and_store_paths_given_by_hand(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    store_dir = str(tmp_path / "store")
    drv = mk(store_dir, "thing")
    realise_and_link(store_dir, [Installable("thing", drv=drv)], out_link=None)
    assert not os.path.lexists(tmp_path / "result")
    capsys.readouterr()
    # a valid store path given by hand (even through a link) is linked as it is
    os.symlink(drv.outputs["out"], tmp_path / "mylink")
    realise_and_link(store_dir, [Installable("./mylink", path="./mylink")], out_link="out")
    assert os.readlink(tmp_path / "out") == drv.outputs["out"]
    assert capsys.readouterr().out == drv.outputs["out"] + "\n"


def test_a_failed_build_is_a_cli_error_and_links_nothing(tmp_path, monkeypatch, kept_builds_dir):
    monkeypatch.chdir(tmp_path)
    store_dir = str(tmp_path / "store")
    bad = mk(store_dir, "bad", fail="compiler exploded")
    with pytest.raises(CudapkgsError) as caught:
        realise_and_link(store_dir, [Installable("bad", drv=bad)], keep_failed=True)
    assert "compiler exploded" in str(caught.value) and "build directory kept at" in str(caught.value)
    # The message says where; that is under this test's directory, not /tmp (52 were left there).
    kept = str(caught.value).split("build directory kept at ")[1].split(")")[0]
    assert os.path.dirname(kept) == str(kept_builds_dir) and os.listdir(kept_builds_dir) == [os.path.basename(kept)]
    assert not os.path.lexists(tmp_path / "result")


def test_log_prints_the_build_log(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    store_dir = str(tmp_path / "store")
    drv = mk(store_dir, "logged", steps=["unpack"])
    realise_and_link(store_dir, [Installable("logged", drv=drv)])
    expected = "hello from logged\n@ unpack\n"
    with Store.open(store_dir) as store:
        assert log_path(store, drv).read_text() == expected
    env = {"CUDAPKGS_STORE": str(tmp_path / "elsewhere")}  # the store is found from the path itself
    for arg in (drv.outputs["out"], "./result", "result", drv.drv_path):
        result = cudapkgs("log", arg, env=env, cwd=tmp_path)
        assert (result.returncode, result.stdout) == (0, expected), (arg, result.stderr)
    # in-process, with --store
    assert main(["log", "--store", store_dir, drv.outputs["out"]]) == 0
    assert capsys.readouterr().out.endswith(expected)


def test_log_of_a_drv_never_built(tmp_path):
    Store.open(tmp_path / "store").close()
    drv = f"{tmp_path}/store/{'b' * 32}-never.drv"
    error = one_line_error(cudapkgs("log", drv))
    assert "no build log" in error


# -- end to end: the real buildRedist builder against a loopback mirror ----------------------


@pytest.fixture
def loopback_release(tmp_path_factory):
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    import redist_fixtures as rf

    release = rf.make_release(tmp_path_factory.mktemp("release"))
    for server in rf.serve():
        server.files.update(release.archives)
        yield rf, release, server


def test_build_real_packages_end_to_end(loopback_release, tmp_path):
    rf, release, server = loopback_release
    manifests = release.write_manifests(tmp_path / "manifests")
    sets = ["--set", "allowUnfree=true", "--set", f"manifestsDir={json.dumps(str(manifests))}",
            "--set", f"storeDir={json.dumps(str(tmp_path / 'store'))}",
            "--set", f"fetchers={json.dumps(['mirror:' + server.url])}"]
    attrs = [f"{rf.SET}.cuda_cudart", f"{rf.SET}.libcublas"]
    result = cudapkgs("build", "-j", "2", *sets, *attrs, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    err = result.stderr.splitlines()
    assert err[0].startswith("building 2 derivation(s) with 2 job(s), fetching 2 source(s) (")
    assert any(line.startswith(f"cuda13.0-cuda_cudart-{rf.CUDART_VERSION}: fetched ") for line in err)
    assert err[-1].startswith("[2/2] built ")
    printed = result.stdout.splitlines()
    links = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("result"))
    assert links[0] == "result" and "result-2" in links and len(links) == len(printed)
    assert os.readlink(tmp_path / "result") == printed[0]
    log = cudapkgs("log", "./result-2", cwd=tmp_path)
    assert log.returncode == 0 and "@ unpack" in log.stdout
    # again: a no-op, nothing fetched
    again = cudapkgs("build", *sets, *attrs, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == result.stdout and again.stderr == ""
    for pname in ("cuda_cudart", "libcublas"):
        assert server.hits("/cuda/redist/" + release.entries[pname][1]) == 1


def test_a_cache_hit_is_not_reported_as_fetched(loopback_release, tmp_path):
    """After gc (outputs gone, the download cache kept), the build says nothing was fetched and
    announces its fetch step once."""
    rf, release, server = loopback_release
    manifests = release.write_manifests(tmp_path / "manifests")
    sets = ["--set", "allowUnfree=true", "--set", f"manifestsDir={json.dumps(str(manifests))}",
            "--set", f"storeDir={json.dumps(str(tmp_path / 'store'))}",
            "--set", f"fetchers={json.dumps(['mirror:' + server.url])}"]
    attr = f"{rf.SET}.cuda_cudart"
    first = cudapkgs("build", "--no-link", "-j", "1", *sets, attr, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert any(": fetched " in line for line in first.stderr.splitlines())
    # Twice: the first gc keeps the outputs for reuse (cudapkgs.store.reuse), the second drops them.
    for _ in range(2):
        assert cudapkgs("gc", "--store", str(tmp_path / "store"), cwd=tmp_path).returncode == 0
    again = cudapkgs("build", "--no-link", "-j", "1", *sets, attr, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    lines = again.stderr.splitlines()
    assert "already cached" in lines[0]
    assert not any(": fetched " in line or ": fetching " in line for line in lines), lines
    assert sum(line.endswith(": fetch") for line in lines) == 1, lines
    assert server.hits("/cuda/redist/" + release.entries["cuda_cudart"][1]) == 1


def test_log_of_a_store_a_cloned_repository_carries(tmp_path, monkeypatch, capsys):
    """`cudapkgs log` finds the store from the path itself, and a cloned repository can carry one (a
    ``.meta/db.sqlite``, a ``.logs`` directory) with its own link or ``.drv`` path: a log linked to a FIFO
    hung the command, and a log's ESC sequences reached the terminal (OSC 52 writes the clipboard)."""
    repo = tmp_path / "repo"
    (repo / "fake" / ".meta").mkdir(parents=True)
    (repo / "fake" / ".meta" / "db.sqlite").write_bytes(b"")
    (repo / "fake" / ".logs").mkdir()
    drv = f"{repo}/fake/{'c' * 32}-x.drv"
    log = repo / "fake" / ".logs" / f"{'c' * 32}-x.log"
    os.mkfifo(tmp_path / "fifo")
    log.symlink_to(tmp_path / "fifo")
    assert "not a regular file" in one_line_error(cudapkgs("log", drv))  # at once (bounded: a child process)
    log.unlink()
    log.write_bytes("built \u00e9\n\x1b]52;c;cm0gLXJmIH4K\x07done\n".encode())
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["log", drv]) == 0
    assert capsys.readouterr().out == "built \u00e9\n\\x1b]52;c;cm0gLXJmIH4K\\x07done\n"


def test_dry_run_lists_a_file_two_builds_fetch_once(manifests_dir, store_env):
    """CUDA 12.9's cuda_crt and cuda_nvcc both unpack the nvcc archive: one download, so one row, counted
    once in the header and in "not tried" (it was two rows, "these 4 sources" and 157.1 MiB not tried
    for 79.7 MiB to download)."""
    env = {**store_env, "CUDAPKGS_PROBE_HOSTS": "0"}
    result = cudapkgs("build", "--dry-run", "--set", "allowUnfree=true", "--set", 'fetchers=["redist"]',
                      "cudaPackages_12_9.cuda_crt", "cudaPackages_12_9.cuda_nvcc", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum("cuda_nvcc-linux-x86_64-12.9.86-archive.tar.xz" in line for line in lines) == 1, result.stdout
    assert lines[0] == "these 3 sources will be fetched (79.7 MiB to download; all of it from hosts not tried):"
    (untried,) = [line.strip() for line in lines if line.strip().startswith("not tried:")]
    assert untried.startswith("not tried: developer.download.nvidia.com (redist: these 3 files, 79.7 MiB)")
