"""Project files are untrusted until allowed (issue 23, class 1): a cloned repository runs no code.

Each attack of the issue is reproduced first: on the code before `cudapkgs allow`, the
project's Python file ran under `shell --print-env` (the direnv form) and `lock --check`,
its storeDir put the store into the repository, and a project file in a parent directory
owned by someone else was used. Then: what allowing records, what an edit undoes, and
that an allowed project's substituters and keys work without lowering the signature checks.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import textwrap
from pathlib import Path

import pytest

from cudapkgs.cli import main
from cudapkgs.errors import ConfigError
from cudapkgs.project import check_allowed, load_project
from cudapkgs.top_level import clear_cache
from cudapkgs.trust import UntrustedProjectError, allowed_dir

needs_bash = pytest.mark.skipif(shutil.which("bash", path="/usr/bin:/bin") is None, reason="needs bash")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
NOBODY = 65534

EVIL = """\
    import os
    open(os.path.join(os.path.dirname(__file__), "RAN"), "w").write("the project's code ran")

    def hello():
        raise AssertionError("never called")
"""

HELLO = """\
    from cudapkgs.stdenv import mk_derivation

    def hello(config):
        return mk_derivation(config, {
            "pname": "hello", "version": "1.0",
            "installPhase": 'mkdir -p "$out/bin"; printf "#!/bin/sh\\\\necho hello\\\\n" > "$out/bin/hello"; '
                            'chmod +x "$out/bin/hello"',
        })
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cloned(tmp_path, monkeypatch, manifests_dir) -> Path:
    """A "cloned repository" whose cudapkgs.toml names a Python file that leaves RAN when imported;
    the current directory is a subdirectory of it (the file is found in a parent)."""
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["evil.py"]\n')
    (repo / "evil.py").write_text(textwrap.dedent(EVIL))
    monkeypatch.chdir(repo / "src")
    return repo


def _refused(code: int, out: str, err: str, repo: Path) -> None:
    """Refused without running anything, saying what to run and what the file would do."""
    assert code == 1, err
    assert not (repo / "RAN").exists(), "the project's Python file was imported"
    assert out == ""  # `eval "$(cudapkgs shell --print-env)"` evaluates nothing
    assert f"run: cudapkgs allow {repo / 'cudapkgs.toml'}" in err
    assert f"(found in {repo}, a parent of the current directory)" in err
    assert "internal error" not in err and "Traceback" not in err


def test_print_env_of_a_cloned_repository_runs_none_of_its_code(cloned, capsys):
    code, out, err = run(capsys, "shell", "--print-env")
    _refused(code, out, err, cloned)
    assert "not allowed" in err and "run the Python files evil.py" in err and "provide the packages hello" in err


def test_lock_check_runs_none_of_its_code(cloned, capsys):
    (cloned / "cudapkgs.lock").write_text("{}")
    _refused(*run(capsys, "lock", "--check"), cloned)
    _refused(*run(capsys, "lock"), cloned)
    assert (cloned / "cudapkgs.lock").read_text() == "{}"
    _refused(*run(capsys, "build", "--dry-run"), cloned)


def test_an_overlay_in_the_project_config_is_a_python_file_too(cloned, capsys):
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\noverlays = ["evil.py"]\n')
    code, out, err = run(capsys, "shell", "--print-env")
    _refused(code, out, err, cloned)
    assert "run the Python files evil.py" in err


def test_a_store_directory_in_the_repository_is_refused(cloned, capsys):
    # No Python at all: storeDir alone would put the store (and the shell's PATH) into the repository;
    # allowed, a later git pull changed what the shell ran with no new allow (issue 30, item 8).
    (cloned / "evil.py").unlink()
    (cloned / "cudapkgs.toml").write_text('packages = ["cuda_cudart"]\n[config]\nstoreDir = "store"\n'
                                          'allowUnfreePredicate = "cuda"\n')
    for argv in (("shell", "--command", "sh", "-c", f"touch {cloned}/RAN"), ("allow", str(cloned))):
        code, out, err = run(capsys, *argv)
        assert code == 1 and out == "" and not (cloned / "RAN").exists()
        assert f"storeDir: {cloned / 'store'} is inside the project" in err and "own configuration" in err
        assert not (cloned / "store").exists() and not allowed_dir().exists()


def test_allow_records_the_exact_contents_outside_the_project(cloned, capsys):
    (cloned / "evil.py").write_text(textwrap.dedent(HELLO))
    code, out, err = run(capsys, "allow")  # found from the subdirectory, as the other commands find it
    assert code == 0, err
    assert f"allowed {cloned / 'cudapkgs.toml'}" in out and "run the Python files evil.py" in out
    records = list(allowed_dir().iterdir())
    assert len(records) == 1 and not records[0].name.startswith(".")  # no temporary left behind
    assert stat.S_IMODE(allowed_dir().stat().st_mode) == 0o700
    assert not records[0].is_relative_to(cloned)
    record = json.loads(records[0].read_text())
    assert record["path"] == str(cloned / "cudapkgs.toml") and set(record["files"]) == {"evil.py"}
    project = load_project(cloned / "cudapkgs.toml")
    check_allowed(project)  # no error
    # An edit of the Python file (a `git pull`) needs a new allow, and so does one of the project file.
    (cloned / "evil.py").write_text(textwrap.dedent(EVIL))
    with pytest.raises(UntrustedProjectError, match=r"changed since you allowed it \(evil\.py\)"):
        check_allowed(load_project(cloned / "cudapkgs.toml"))
    _refused(*run(capsys, "shell", "--print-env"), cloned)
    (cloned / "evil.py").write_text(textwrap.dedent(HELLO))
    check_allowed(load_project(cloned / "cudapkgs.toml"))
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["evil.py"]\n[config]\ncudaSupport = true\n')
    with pytest.raises(UntrustedProjectError, match=r"changed since you allowed it \(the project file\)"):
        check_allowed(load_project(cloned / "cudapkgs.toml"))
    # deny forgets it.
    assert run(capsys, "allow", str(cloned))[0] == 0
    check_allowed(load_project(cloned / "cudapkgs.toml"))
    code, out, _ = run(capsys, "deny")
    assert code == 0 and "denied" in out
    with pytest.raises(UntrustedProjectError, match="not allowed"):
        check_allowed(load_project(cloned / "cudapkgs.toml"))
    # A damaged record is no allow at all.
    assert run(capsys, "allow", str(cloned))[0] == 0
    records = list(allowed_dir().iterdir())
    records[0].write_text('{"version": 1, "path": [], "digest": 3}')
    with pytest.raises(UntrustedProjectError, match="not allowed"):
        check_allowed(load_project(cloned / "cudapkgs.toml"))


def test_an_allowed_project_does_not_allow_the_same_contents_elsewhere(cloned, tmp_path, capsys):
    (cloned / "evil.py").write_text(textwrap.dedent(HELLO))
    assert run(capsys, "allow", str(cloned))[0] == 0
    copy = tmp_path / "copy"
    shutil.copytree(cloned, copy)
    with pytest.raises(UntrustedProjectError, match="not allowed"):
        check_allowed(load_project(copy / "cudapkgs.toml"))


def test_a_link_to_an_allowed_project_file_is_another_project(cloned, tmp_path, capsys):
    """A repository holding `cudapkgs.toml -> ~/work/cudapkgs.toml` (an allowed project) and a copy
    of its Python file: the allow was looked up by the link's target, so the repository was used as
    allowed while every relative path (files, driverLibDir, storeDir, ...) was read from it."""
    (cloned / "evil.py").write_text(textwrap.dedent(HELLO))
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["evil.py"]\n[config]\ndriverLibDir = "../drv"\n')
    assert run(capsys, "allow", str(cloned))[0] == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "cudapkgs.toml").symlink_to(cloned / "cudapkgs.toml")
    shutil.copy(cloned / "evil.py", other / "evil.py")
    with pytest.raises(UntrustedProjectError, match="not allowed"):
        check_allowed(load_project(other / "cudapkgs.toml"))
    # Allowed where it is found, it is its own project; the first stays allowed, and a link to
    # the project's directory is the same project.
    assert run(capsys, "allow", str(other))[0] == 0
    check_allowed(load_project(other / "cudapkgs.toml"))
    check_allowed(load_project(cloned / "cudapkgs.toml"))
    (tmp_path / "via").symlink_to(cloned)
    check_allowed(load_project(tmp_path / "via" / "cudapkgs.toml"))
    assert run(capsys, "deny", str(other))[0] == 0
    check_allowed(load_project(cloned / "cudapkgs.toml"))


def test_a_python3_executable_inside_the_project_is_part_of_what_is_allowed(cloned, capsys):
    """It is run by every evaluation (`--version`): before, a git pull could replace it after the allow."""
    (cloned / "evil.py").unlink()
    tools = cloned / "tools"
    tools.mkdir()
    (tools / "python").write_text("#!/bin/sh\necho Python 3.11.2\n")
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\npython3Executable = "tools/python"\n')
    assert run(capsys, "allow", str(cloned))[0] == 0
    check_allowed(load_project(cloned / "cudapkgs.toml"))
    (tools / "python").write_text(f"#!/bin/sh\ntouch {cloned}/RAN\necho Python 3.11.2\n")
    with pytest.raises(UntrustedProjectError, match=r"changed since you allowed it \(python3Executable \(tools/python\)\)"):
        check_allowed(load_project(cloned / "cudapkgs.toml"))
    # A link inside the project counts by what it reaches; a host interpreter outside it is the host's.
    (tools / "python").unlink()
    (tools / "python").symlink_to("/usr/bin/env")
    assert load_project(cloned / "cudapkgs.toml").programs == {"python3Executable (tools/python)": tools / "python"}
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\npython3Executable = "/usr/bin/env"\n')
    assert load_project(cloned / "cudapkgs.toml").programs == {}


def test_a_named_directory_is_not_searched_upwards(cloned, capsys):
    code, _, err = run(capsys, "allow", str(cloned / "src"))
    assert code == 2 and f"no cudapkgs.toml in {cloned / 'src'}" in err
    assert not allowed_dir().exists()


def test_a_project_cannot_set_the_users_own_policy(cloned, capsys):
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\nsafeDirectories = ["*"]\n')
    with pytest.raises(ConfigError, match="safeDirectories can be set only in your own configuration"):
        load_project(cloned / "cudapkgs.toml")
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\nrequireSigs = false\n')
    code, _, err = run(capsys, "allow", str(cloned))
    assert code == 1 and "a project cannot turn signature checks off" in err


def test_a_world_writable_directory_without_the_sticky_bit_is_refused(cloned, capsys):
    (cloned / "evil.py").write_text(textwrap.dedent(HELLO))
    os.chmod(cloned, 0o777)
    code, _, err = run(capsys, "allow", str(cloned))
    assert code == 1 and "writable by every user (and not sticky)" in err and "safeDirectories" in err
    code, out, err = run(capsys, "shell", "--print-env")
    assert code == 1 and out == "" and "someone else controls" in err
    os.chmod(cloned, 0o777 | stat.S_ISVTX)  # as /tmp: others cannot replace the file
    assert run(capsys, "allow", str(cloned))[0] == 0
    os.chmod(cloned, 0o755)


@as_root
def test_a_project_file_owned_by_someone_else_in_a_parent_is_refused(cloned, capsys, tmp_path):
    # git's CVE-2022-24765: another user's file in a directory above the one you work in.
    (cloned / "evil.py").write_text(textwrap.dedent(HELLO))
    os.chown(cloned / "cudapkgs.toml", NOBODY, NOBODY)
    code, out, err = run(capsys, "shell", "--print-env")
    assert code == 1 and out == "" and not (cloned / "RAN").exists()
    assert f"{cloned / 'cudapkgs.toml'} is owned by" in err and "not by you" in err
    assert f"(found in {cloned}, a parent of the current directory)" in err
    code, _, err = run(capsys, "allow", str(cloned))  # allowing is refused too
    assert code == 1 and "safeDirectories" in err
    # The directory, or a Python file it names, owned by someone else: the same.
    os.chown(cloned / "cudapkgs.toml", 0, 0)
    os.chown(cloned, NOBODY, NOBODY)
    with pytest.raises(UntrustedProjectError, match="its directory .* is owned by"):
        check_allowed(load_project(cloned / "cudapkgs.toml"))
    os.chown(cloned, 0, 0)
    os.chown(cloned / "evil.py", NOBODY, NOBODY)
    with pytest.raises(UntrustedProjectError, match=r"evil\.py is owned by"):
        check_allowed(load_project(cloned / "cudapkgs.toml"))
    os.chown(cloned / "evil.py", 0, 0)
    # A link to someone else's file: the file's owner and real directory are what count, and named.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "real.toml").write_text('packages = ["hello"]\n')
    os.chown(elsewhere / "real.toml", NOBODY, NOBODY)
    (cloned / "cudapkgs.toml").unlink()
    (cloned / "cudapkgs.toml").symlink_to(elsewhere / "real.toml")
    with pytest.raises(UntrustedProjectError, match=f'real.toml is owned by .*safeDirectories = \\["{elsewhere}"\\]'):
        check_allowed(load_project(cloned / "cudapkgs.toml"))
    (cloned / "cudapkgs.toml").unlink()
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["evil.py"]\n')
    # Your own configuration can name the directory safe (as git's safe.directory); it must still be allowed.
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "cudapkgs" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'safeDirectories = ["{cloned}"]\n')
    code, out, err = run(capsys, "allow", str(cloned))
    assert code == 0, err
    check_allowed(load_project(cloned / "cudapkgs.toml"), safe_directories=[str(cloned)])
    (cloned / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["evil.py"]\n\n')
    with pytest.raises(UntrustedProjectError, match="changed since you allowed it"):  # safe, but not these contents
        check_allowed(load_project(cloned / "cudapkgs.toml"), safe_directories=[str(cloned)])


@as_root
def test_under_sudo_the_invoking_users_project_is_theirs(cloned, capsys, monkeypatch):
    (cloned / "evil.py").write_text(textwrap.dedent(HELLO))
    for path in (cloned, cloned / "cudapkgs.toml", cloned / "evil.py"):
        os.chown(path, NOBODY, NOBODY)
    assert run(capsys, "allow", str(cloned))[0] == 1
    monkeypatch.setenv("SUDO_UID", str(NOBODY))  # git's rule for root under sudo
    code, _, err = run(capsys, "allow", str(cloned))
    assert code == 0, err


def test_a_fifo_as_the_lock_is_refused_not_waited_on(cloned, capsys):
    (cloned / "evil.py").write_text(textwrap.dedent(HELLO))
    assert run(capsys, "allow", str(cloned))[0] == 0
    os.mkfifo(cloned / "cudapkgs.lock")
    code, _, err = run(capsys, "lock", "--check")
    assert code == 1 and "cannot read the lock: is a FIFO" in err


def test_malformed_project_files_are_one_line_errors(tmp_path):
    cases = {
        "not UTF-8": b'packages = ["x"]\n\xff = 1\n',
        "nested too deeply": b'packages = ["x"]\nq = ' + b"[" * 3000 + b"]" * 3000 + b"\n",
        "invalid TOML": b"packages = [\n",
    }
    for reason, data in cases.items():
        (tmp_path / "cudapkgs.toml").write_bytes(data)
        with pytest.raises(ConfigError) as caught:
            load_project(tmp_path / "cudapkgs.toml")
        assert str(caught.value).startswith(str(tmp_path / "cudapkgs.toml")) and reason in str(caught.value)
        assert "\n" not in str(caught.value)
    os.mkfifo(tmp_path / "fifo.toml")  # a FIFO is refused at once, not waited on
    with pytest.raises(ConfigError, match="not a regular file"):
        load_project(tmp_path / "fifo.toml")
    from cudapkgs.project import find_project

    assert find_project(tmp_path / "fifo.toml") == tmp_path / "fifo.toml"  # named: refused as what it is
    (tmp_path / "big.toml").write_bytes(b"#" * (2 << 20))
    with pytest.raises(ConfigError, match="larger than"):
        load_project(tmp_path / "big.toml")


# --- an allowed project's substituters and keys -----------------------------------------------


@pytest.fixture
def cache_of_hello(tmp_path, monkeypatch, manifests_dir):
    """A project building `hello`, built once, its output uploaded to a file:// cache signed by a
    new key, then the store emptied: (repo, cache URL, the key)."""
    from cudapkgs.store.caches import open_cache
    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    clear_cache()
    store_dir = tmp_path / "store"
    monkeypatch.setenv("CUDAPKGS_STORE", str(store_dir))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pkgs.py").write_text(textwrap.dedent(HELLO))
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["pkgs.py"]\n')
    monkeypatch.chdir(repo)
    assert main(["allow"]) == 0
    assert main(["build", "--no-link"]) == 0
    key = generate("project-1")
    url = f"file://{tmp_path}/cache"
    with Store.open(store_dir) as store:
        paths = [p for p in store.all_paths() if p.endswith("-hello-1.0")]
        open_cache(url).upload_closure(store, paths, secret_key=key)
    for dirpath, _, _ in os.walk(store_dir):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(store_dir)
    clear_cache()
    return repo, url, key


def _plan(capsys) -> str:
    code, out, err = run(capsys, "build", "--dry-run")
    assert code == 0, err
    return out + err


@needs_bash
def test_an_allowed_projects_substituters_and_keys_are_used(cache_of_hello, capsys):
    repo, url, key = cache_of_hello
    (repo / "cudapkgs.toml").write_text(f'packages = ["hello"]\nfiles = ["pkgs.py"]\n[config]\n'
                                        f'substituters = ["{url}"]\ntrustedPublicKeys = ["{key.public}"]\n')
    assert "changed since you allowed it (the project file)" in run(capsys, "build", "--dry-run")[2]
    assert main(["allow"]) == 0
    capsys.readouterr()
    plan = _plan(capsys)
    assert "will be substituted" in plan and url in plan and "nothing will be built" in plan  # ignored before
    code, _, err = run(capsys, "build", "--no-link")
    assert code == 0 and "substitut" in err


@needs_bash
def test_a_projects_key_is_trusted_for_its_own_substituters_only(cache_of_hello, capsys):
    repo, url, key = cache_of_hello
    # The user's own cache serves the path signed by the project's key: the project cannot make
    # the user's caches trust its key.
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "cudapkgs" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'substituters = ["{url}"]\n')
    (repo / "cudapkgs.toml").write_text(f'packages = ["hello"]\nfiles = ["pkgs.py"]\n[config]\n'
                                        f'trustedPublicKeys = ["{key.public}"]\n')
    assert main(["allow"]) == 0
    capsys.readouterr()
    plan = _plan(capsys)
    assert "will be built" in plan and "will be substituted" not in plan
    assert f"from {url}: no valid signature by a trusted key (signed by: project-1; trusted: no key" in plan


@needs_bash
@pytest.mark.parametrize("spelling", ["{url}", "{url}/", "file://{tmp}/via-link"])
def test_a_project_listing_the_users_cache_does_not_make_it_trust_the_projects_key(cache_of_hello, capsys, spelling):
    """Issue 30, item 6: a project naming the user's own cache URL (and its key) got the user's
    cache trusted on the project's key alone: the merged list held the URL once, scoped to the
    project's key. The same cache spelled otherwise (a trailing slash, a link to its directory)
    is the user's too."""
    repo, url, key = cache_of_hello
    tmp = repo.parent
    (tmp / "via-link").symlink_to(tmp / "cache")
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "cudapkgs" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'substituters = ["{url}"]\n')
    listed = spelling.format(url=url, tmp=tmp)
    (repo / "cudapkgs.toml").write_text(f'packages = ["hello"]\nfiles = ["pkgs.py"]\n[config]\n'
                                        f'substituters = ["{listed}"]\ntrustedPublicKeys = ["{key.public}"]\n')
    assert main(["allow"]) == 0
    capsys.readouterr()
    plan = _plan(capsys)
    assert "will be built" in plan and "will be substituted" not in plan
    assert f"from {url}: no valid signature by a trusted key (signed by: project-1; trusted: no key" in plan
    from cudapkgs.project import evaluate_project

    env = evaluate_project(load_project(repo / "cudapkgs.toml"))
    assert env.project_substituters == () and env.config.substituters == [url]
    # A cache of the project's own beside it is still trusted on its key.
    own = f"file://{tmp}/own-cache"
    shutil.copytree(tmp / "cache", tmp / "own-cache")
    (repo / "cudapkgs.toml").write_text(f'packages = ["hello"]\nfiles = ["pkgs.py"]\n[config]\n'
                                        f'substituters = ["{listed}", "{own}"]\ntrustedPublicKeys = ["{key.public}"]\n')
    assert main(["allow"]) == 0
    capsys.readouterr()
    plan = _plan(capsys)
    assert "will be substituted" in plan and own in plan
    assert evaluate_project(load_project(repo / "cudapkgs.toml")).project_substituters == (own,)
    # Named on the command line (--set), it is the user's.
    env = evaluate_project(load_project(repo / "cudapkgs.toml"), sets=[f'substituters=["{own}"]'])
    assert env.project_substituters == () and env.config.substituters == [own]


@pytest.mark.parametrize("how", ["another user's", "writable by others"])
def test_an_allow_record_another_user_could_have_written_allows_nothing(cloned, capsys, how, request):
    """The allow records are the trust root: before, a well-formed record was believed whoever owned it, so
    one another user put in a shared or group-writable ``$XDG_DATA_HOME/cudapkgs/allowed`` made their
    project's Python files run as you. `cudapkgs allow` writes them 0600: only yours (or root's) count."""
    assert run(capsys, "allow")[0] == 0
    (record,) = allowed_dir().iterdir()
    check_allowed(load_project(cloned / "cudapkgs.toml"))
    if how == "another user's":
        os.chown(record, request.getfixturevalue("nobody_uid"), -1)
    else:
        os.chmod(record, 0o666)
    with pytest.raises(UntrustedProjectError):
        check_allowed(load_project(cloned / "cudapkgs.toml"))
    _refused(*run(capsys, "shell", "--print-env"), cloned)
    assert not (cloned / "RAN").exists()


def test_the_refusal_shows_no_password_of_the_projects_caches(cloned, capsys):
    """The refusal says what an unallowed project would do, on every command until it is allowed (a CI log):
    its substituters, mirrors and fetchers were shown as written, a committed ``https://ci:token@…`` whole."""
    (cloned / "cudapkgs.toml").write_text(
        'packages = ["hello"]\nfiles = ["evil.py"]\n[config]\n'
        'substituters = ["https://ci:s3cr3t@cache.example/team"]\n'
        'sourceMirrors = ["https://m:s3cr3t@mirror.example/src"]\n')
    code, out, err = run(capsys, "shell", "--print-env")
    _refused(code, out, err, cloned)
    assert "s3cr3t" not in err
    assert "substitute binaries from https://ci:***@cache.example/team" in err
    assert "https://m:***@mirror.example/src" in err
