"""`cudapkgs list` and `cudapkgs search`, and the messages for mistyped set names."""

from __future__ import annotations

import json

import pytest

from cudapkgs.cli import main
from cudapkgs.table import fit_table


def test_list_says_why_in_words_and_fits_the_terminal(manifests_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "132")  # the fetcher and size columns take 20 of them
    assert main(["list", "cudaPackages_12_6", "--set", "allowUnfree=true"]) == 0
    out, err = capsys.readouterr()
    assert "Warning" not in err  # aliases are left out, without their deprecation warnings
    lines = out.splitlines()
    assert all(len(line) <= 132 for line in lines)
    rows = {line.split()[0]: line for line in lines[3:]}
    assert "cusparselt" not in rows  # an alias of libcusparse_lt
    assert rows["collectx_bringup"].endswith("absent from the cuda 12.6.3 manifest")
    assert "not for linux-x86_64 (available: linux-aarch64)" in rows["cuda_compat"]
    assert rows["cuda_cudart"].endswith("available")
    assert main(["list", "cudaPackages_13_0"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[3:]}
    # the remedy once under the table, not on each of 50 rows (it made them 240 characters wide)
    assert rows["cuda_cudart"].endswith("unfree (CUDA EULA)")
    remedies = [line for line in out.splitlines() if "allowUnfree" in line]
    assert remedies == [out.splitlines()[-1]] and "--set allowUnfree=true" in remedies[0]
    assert main(["list", "cudaPackages_13_0", "--json"]) == 0  # JSON keeps each row's whole text
    rows = {r["pname"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["cuda_cudart"]["status"] == "unfree (CUDA EULA; allowUnfree or allowUnfreePredicate allows it)"


def test_list_all_keeps_each_package_on_one_row(manifests_dir, capsys):
    # a multi-line meta.problems message ("...failed assertions:\n- a\n- b") broke the table's rows
    assert main(["list", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and not any(line.startswith("- ") for line in lines)
    frontend = next(line for line in lines if line.startswith("cudaPackages.cudnn-frontend "))
    assert "is marked as broken due to the following failed assertions: " in frontend


def test_list_all_says_unfree_before_broken_and_draws_a_short_last_rule(manifests_dir, capsys):
    # Nixpkgs' check-meta reports an unfree license before a broken assertion: torch-bin (itself
    # unfree) read "broken: ..." with one "(it is not: its license is unfree ...)" per CUDA library,
    # and the header rule of that last column was as long as the longest such text (3,000 characters)
    assert main(["list", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    torch_bin = next(line for line in lines if line.startswith("python3Packages.torch-bin "))
    assert torch_bin.endswith("unfree (issl, unfreeRedistributable)") and "broken" not in torch_bin
    assert "--set allowUnfree=true" in lines[-1]
    rule = lines[2]
    assert set(rule) <= {"-", " "} and rule.endswith("-" * 40) and not rule.endswith("-" * 41)
    assert max(len(line) for line in lines) > len(rule)  # the long status texts are still whole


def test_list_all_with_unfree_allowed_says_why_a_package_is_broken(manifests_dir, capsys):
    assert main(["list", "--all", "--set", "allowUnfree=true"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the default set is CUDA 12.9: JAX's CUDA 13 plugin is broken there (CuPy has its CUDA 12 wheel since issue 31)
    plugin = next(line for line in lines if line.startswith("python3Packages.jax-cuda13-plugin "))
    assert "broken: " in plugin and "is a CUDA 13 build" in plugin
    cupy = next(line for line in lines if line.startswith("python3Packages.cupy "))
    assert cupy.endswith("available")


def test_list_json_marks_what_is_built(manifests_dir, capsys, tmp_path, monkeypatch):
    from cudapkgs.store.store import Store

    import cudapkgs

    store_dir = tmp_path / "store"
    monkeypatch.setenv("CUDAPKGS_STORE", str(store_dir))
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True})
    cccl = pkgs.cudaPackages_13_0.cuda_cccl.derivation
    def build(dirs):
        for directory in dirs.values():
            (directory / "include").mkdir(parents=True)

    with Store.open(store_dir) as store:  # cuda_cccl's outputs made valid by hand
        store.add_outputs(list(cccl.outputs.values()), build)
    assert main(["list", "cudaPackages_13_0", "--set", "allowUnfree=true", "--json"]) == 0
    rows = {r["pname"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["cuda_cccl"]["built"] is True and rows["cuda_cccl"]["status"] == "built"
    assert rows["cuda_nvcc"]["built"] is False


def test_fit_table_cuts_the_named_columns_first():
    rows = [["a", "x" * 50, "y" * 50]]
    text = fit_table(["n", "long", "reason"], rows, width=70, shrink=(1, 2, 0))
    assert all(len(line) <= 70 for line in text.splitlines())
    assert text.splitlines()[2].endswith("y" * 50)  # the reason kept whole
    assert "…" in text.splitlines()[2]


def test_set_name_messages(manifests_dir, capsys):
    assert main(["eval", "cudaPackages_13.0.libcublas.version"]) == 1
    err = capsys.readouterr().err
    assert "cudaPackages_13_0 (not cudaPackages_13.0)" in err and err.count("\n") == 1
    assert main(["eval", "cudaPackages_11_8.cuda_nvcc"]) == 1
    err = capsys.readouterr().err
    assert "there is no package set cudaPackages_11_8; the sets are cudaPackages_12_6, cudaPackages_12_8" in err
    assert "aliases cudaPackages_12, cudaPackages_13, cudaPackages" in err


def test_search_across_sets(manifests_dir, capsys):
    assert main(["search", "--json", "sparse"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"libcusparse", "libcusparse_lt"} <= set(rows)
    lt = rows["libcusparse_lt"]["sets"]
    assert lt["cudaPackages_12_6"] == "0.6.3.2" and lt["cudaPackages_12_8"] == "0.7.1.0"
    assert lt["cudaPackages_12_9"] == "0.8.1.1" and lt["cudaPackages_13_0"] == "0.10.0.12"
    assert main(["search", "saxpy"]) == 0
    assert "1.0 (top level)" in capsys.readouterr().out  # a top-level package's version, not only where it is
    assert main(["search", "--json", "torch"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    # the stand-in without cudaSupport names the version pkgsCuda gives (the default set's torch-bin), not 13.0's
    assert rows["python3Packages.torch"]["version"] == rows["python3Packages.torch-bin"]["version"] == "2.9.1"
    assert main(["search", "CUDA", "nvcc"]) == 0  # every word must match
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert "cuda_nvcc" in names and "libcublas" not in names
    assert main(["search", "no-such-thing-xyz"]) == 1
    assert "no package matches" in capsys.readouterr().err


def test_search_lists_each_sets_torch_without_allow_unfree(manifests_dir, capsys):
    """Before, `cudapkgs search torchvision` without allowUnfree said "0.24.1 (top level)" only: each
    set's torchvision is meta.broken there (its CUDA libraries are unfree), so the 13.x sets' 0.29.1
    and the 12.x sets' 0.24.1 were left out, as if no set had it.  Reading a version builds nothing,
    and `nix search` lists unfree packages too."""
    assert main(["search", "--json", "torchvision"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    sets = rows["python3Packages.torchvision"]["sets"]
    assert sets["cudaPackages_13_0"] == "0.29.1" and sets["cudaPackages_12_9"] == "0.24.1"
    assert "cudaPackages_12_6" not in sets  # still left out where it is broken for another reason (torch 2.9.1 needs 12.8)
    assert main(["search", "--json", "--set", "allowUnfree=true", "torchvision"]) == 0
    assert {r["name"]: r for r in json.loads(capsys.readouterr().out)}["python3Packages.torchvision"]["sets"] == sets


def test_search_finds_the_packages_sets_build_from_source(manifests_dir, capsys):
    # nccl is no manifest component and not at the top level: each set builds it from source.
    assert main(["search", "--json", "nccl"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"nccl", "nccl-tests"} <= set(rows)
    assert rows["nccl"]["sets"]["cudaPackages_13_0"] == "2.30.7-1"
    assert "collective communication" in rows["nccl"]["description"]
    assert main(["search", "collective", "communication"]) == 0  # by description, as a table
    out = capsys.readouterr().out
    assert out.splitlines()[2].split()[0] == "nccl" and "13.0" in out



def test_search_finds_python3packages_members_and_says_why_one_is_not_evaluated(manifests_dir, capsys):
    """Before, `cudapkgs search pycuda` said "no package matches 'pycuda'": python3Packages was not
    searched, though README and docs/pycuda-status.md build `python3Packages.pycuda`."""
    assert main(["search", "--json", "--set", "allowUnfree=true", "pycuda"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert list(rows) == ["python3Packages.pycuda"]
    assert "CUDA driver API for Python" in rows["python3Packages.pycuda"]["description"]
    # Without allowUnfree pycuda (MIT) still evaluates its meta: only its derivation reads cudart's outputs.
    assert main(["search", "--json", "pycuda"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "python3Packages.pycuda" and "CUDA driver API for Python" in row["description"]
    assert main(["search", "--json", "numpy"]) == 0  # a pinned wheel, by name (and those whose descriptions name it)
    found = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert "python3Packages.numpy" in found and all(name.startswith("python3Packages.") for name in found)


def test_list_and_search_say_which_fetcher_serves_each_component(manifests_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # an empty wheel cache
    wheels = ["--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]']
    assert main(["list", "cudaPackages_13_2", *wheels, "--json"]) == 0
    rows = {r["pname"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["cuda_cudart"]["source"] == {"fetcher": "wheels", "file": "nvidia-cuda-runtime==13.2.86", "size": None,
                                             "cached": None, "untried": "pypi.org", "reason": None}
    assert rows["cuda_compat"]["available"] is False and rows["cuda_compat"]["source"]["fetcher"] is None
    assert rows["cuda_compat"]["status"].startswith("no fetcher can supply it (could: redist, mirror): wheels: ")
    assert main(["list", "cudaPackages_13_2", "--set", "allowUnfree=true", "--json"]) == 0
    rows = {r["pname"]: r for r in json.loads(capsys.readouterr().out)}
    nvcc = rows["cuda_nvcc"]["source"]
    assert nvcc["fetcher"] == "redist" and nvcc["size"] > 0 and nvcc["untried"] == "developer.download.nvidia.com"
    assert main(["search", *wheels, "--json", "cccl"]) == 0
    (cccl,) = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "cccl"]
    assert cccl["fetchers"]["cudaPackages_13_4"] == "wheels" and cccl["fetchers"]["cudaPackages_12_6"] == "wheels"
    assert main(["search", *wheels, "--json", "compat"]) == 0
    (compat,) = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "cuda_compat"]
    assert compat["fetchers"]["cudaPackages_13_2"] == "" and compat["fetchers"]["cudaPackages_12_8"] is None
    assert main(["search", *wheels, "compat"]) == 0
    assert "no fetcher can supply it (13.1, 13.2, 13.3)" in capsys.readouterr().out


def test_search_and_list_descend_into_sets_marked_recurse_into_attrs(manifests_dir):
    """As Nixpkgs' lib.recurseIntoAttrs: the marker, not a list of names, says which sets are searched
    (python3Packages is marked in top_level, as all-packages.nix marks it); a member that does not
    evaluate is found, saying why."""
    import cudapkgs
    from cudapkgs.errors import EvalError
    from cudapkgs.inventory import list_all, search
    from cudapkgs.lib.fixpoint import AttrSet, lazy, recurse_into_attrs, recurses
    from cudapkgs.stdenv import mk_derivation

    def broken():
        raise EvalError("demo-broken needs something missing")

    def overlay(final, prev):
        demo = {"pname": "zzdemo", "version": "1", "stdenvCc": None, "dontUnpack": True,
                "meta": {"description": "a zzdemo package"}}
        members = {"zzdemo": lazy(lambda: mk_derivation(final.config, demo)), "zzbroken": lazy(broken)}
        return {"zzMarked": recurse_into_attrs(AttrSet(members, name="zzMarked")),
                "zzUnmarked": AttrSet(dict(members), name="zzUnmarked")}

    pkgs = cudapkgs.import_pkgs(config={}, overlays=[overlay])
    assert recurses(pkgs.python3Packages) and recurses(pkgs.zzMarked) and not recurses(pkgs.zzUnmarked)
    found = {r["name"]: r["description"] for r in search(["zz"], pkgs=pkgs)}
    assert set(found) == {"zzMarked.zzdemo", "zzMarked.zzbroken"}
    assert found["zzMarked.zzdemo"] == "a zzdemo package" and "something missing" in found["zzMarked.zzbroken"]
    listed = {r["attr"]: r for r in list_all(pkgs)}
    assert "zzMarked.zzdemo" in listed and "zzUnmarked.zzdemo" not in listed
    assert listed["zzMarked.zzbroken"]["status"].startswith("error:")
    assert "python3Packages.numpy" in listed and not any(a.startswith("cudaPackages_") for a in listed)



def test_search_says_a_component_in_no_manifest_is_in_no_set(manifests_dir, capsys):
    # libcal (cuBLASMp 0.10.0 ships none) read "top level" in the version column, as if one could use it
    assert main(["search", "libcal"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("libcal "))
    assert "in no set (absent from every cublasmp manifest)" in row and "top level" not in row
    assert main(["search", "saxpy"]) == 0  # the top level's own packages still say so
    assert any(line.startswith("saxpy ") and "(top level)" in line for line in capsys.readouterr().out.splitlines())


def test_search_with_no_match_suggests_close_names(manifests_dir, capsys):
    from cudapkgs.cli import main

    assert main(["search", "--no-eval-cache", "troch"]) == 1
    assert 'did you mean "torch"' in capsys.readouterr().err
    assert main(["search", "--no-eval-cache", "zzzqqq"]) == 1
    assert "did you mean" not in capsys.readouterr().err


def test_list_says_it_did_not_ask_whether_a_network_fetcher_answers(manifests_dir, capsys, monkeypatch):
    """Before, `cudapkgs list cudaPackages_13_0` on a machine reaching only PyPI showed "redist" as the
    fetcher of every component, with nothing saying that no host was asked (a build would take wheels)."""
    monkeypatch.setenv("COLUMNS", "132")
    assert main(["list", "cudaPackages_13_0", "--set", "allowUnfree=true"]) == 0
    [note] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("fetcher: ")]
    assert note.startswith("fetcher: the first configured one having it; redist: host not asked")
    assert "$CUDAPKGS_PROBE_HOSTS=0" in note and len(note) <= 132
    assert main(["list", "cudaPackages_13_0", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]']) == 0
    assert "host not asked" not in capsys.readouterr().out  # the index is asked when a wheel is fetched


def _refused_port() -> int:
    import socket

    with socket.socket() as sock:  # a port where nothing listens: connections are refused
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def probing(monkeypatch):
    from cudapkgs.fetch import reachability

    monkeypatch.delenv("CUDAPKGS_PROBE_HOSTS", raising=False)
    reachability.forget()
    yield
    reachability.forget()


def test_list_and_search_name_the_fetcher_a_build_would_use_when_a_host_is_silent(manifests_dir, capsys, monkeypatch,
                                                                                   probing):
    """Before, on a machine where NVIDIA's server does not answer, `list` and `search` said "redist" for
    libcublas though `plan` (and the build) took its wheel: they named the first configured fetcher
    having it, without asking whether its host answers. A dead URL mirror stands in for that host."""
    from cudapkgs.fetch import reachability

    dead = f"mirror:http://127.0.0.1:{_refused_port()}"
    asked: list[list[str]] = []
    real = reachability.probe
    monkeypatch.setattr(reachability, "probe", lambda urls, **kw: asked.append(list(urls)) or real(urls, **kw))
    fetchers = ["--set", f'fetchers=["{dead}", "wheels"]']
    assert main(["list", "--no-eval-cache", "cudaPackages_13_0", "--json", *fetchers]) == 0
    rows = {r["pname"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["libcublas"]["source"]["fetcher"] == "wheels"
    assert len(asked) == 1  # one probe for the whole listing, not one per row
    assert main(["list", "--no-eval-cache", "cudaPackages_13_0", *fetchers]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("libcublas "))
    assert " wheels " in row and "mirror:" not in row
    assert f"{dead} skipped: http://127.0.0.1:" in out and "does not answer" in out
    assert main(["search", "--no-eval-cache", "libcublas", *fetchers]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("libcublas "))
    assert "wheels (12.6" in row and "mirror:" not in row
    assert f"{dead} skipped" in out
    assert main(["search", "--no-eval-cache", "libcublas", "--json", *fetchers]) == 0
    [row] = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "libcublas"]
    assert set(row["fetchers"].values()) == {"wheels"}


def test_list_and_search_keep_a_network_fetcher_whose_host_answers(manifests_dir, capsys, probing):
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802 - the standard library's name
            self.send_response(404)  # any status is an answer: the server is there
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        live = f"mirror:http://127.0.0.1:{server.server_address[1]}"
        fetchers = ["--set", f'fetchers=["{live}", "wheels"]']
        assert main(["list", "--no-eval-cache", "cudaPackages_13_0", "--json", *fetchers]) == 0
        rows = {r["pname"]: r for r in json.loads(capsys.readouterr().out)}
        assert rows["libcublas"]["source"]["fetcher"] == live
        assert rows["libcublas"]["source"]["untried"] is None  # its host answered just now
        assert main(["search", "--no-eval-cache", "libcublas", *fetchers]) == 0
        out = capsys.readouterr().out
        assert f"{live} (12.6" in next(line for line in out.splitlines() if line.startswith("libcublas "))
        assert "skipped" not in out
    finally:
        server.shutdown()
        server.server_close()


def test_list_search_and_plan_show_no_password_of_a_mirror_fetcher(manifests_dir, capsys, monkeypatch, probing):
    """A mirror behind basic auth (``mirror:https://user:token@artifactory/nv``) was printed whole by `list` and
    `search` (the title, the header, the fetcher column, the notes under the table) and by `config`; shown with
    ``user:***@`` now (`errors.shown_cache_url`)."""
    dead = f"mirror:http://ci:s3cr3t@127.0.0.1:{_refused_port()}"
    fetchers = ["--set", f'fetchers=["{dead}", "wheels"]']
    for argv in (["list", "--no-eval-cache", "cudaPackages_13_0", *fetchers],
                 ["search", "--no-eval-cache", "libcublas", *fetchers], ["config", *fetchers]):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert "s3cr3t" not in out + err, argv
        assert "mirror:http://ci:***@127.0.0.1:" in out, argv
    for argv in (["list", "--no-eval-cache", "cudaPackages_13_0", "--json", *fetchers],
                 ["search", "--no-eval-cache", "libcublas", "--json", *fetchers]):
        monkeypatch.setenv("CUDAPKGS_PROBE_HOSTS", "0")  # the mirror kept as the rows' fetcher
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "s3cr3t" not in out and "mirror:http://ci:***@127.0.0.1:" in out, argv
    monkeypatch.setenv("CUDAPKGS_PROBE_HOSTS", "0")  # nothing asked: the note names the network fetcher
    assert main(["list", "--no-eval-cache", "cudaPackages_13_0", "--set", "allowUnfree=true", *fetchers]) == 0
    out, err = capsys.readouterr()
    assert "s3cr3t" not in out + err and "mirror:http://ci:***@127.0.0.1:" in out
