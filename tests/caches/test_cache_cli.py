"""`cudapkgs key`, `copy`, `serve` and `plan --what-if` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from cache_helpers import cli_file_cache, fresh_store_like, make_closure

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.serve import make_server
from cudapkgs.store.caches.signing import SecretKey, generate
from cudapkgs.store.store import Store


def run_cli(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudapkgs", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=120)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode in (1, 2), result
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_key_generate_writes_a_nix_style_key_and_prints_the_public_key(tmp_path):
    out = run_cli("key", "generate", "--name", "lab-cache-1", "--out", str(tmp_path / "secret.key"))
    assert out.returncode == 0, out.stderr
    secret = SecretKey.load(tmp_path / "secret.key")
    assert out.stdout.strip() == str(secret.public) and out.stdout.startswith("lab-cache-1:")
    assert oct(os.stat(tmp_path / "secret.key").st_mode & 0o777) == "0o600"
    assert run_cli("key", "public", str(tmp_path / "secret.key")).stdout.strip() == str(secret.public)
    assert "exists; not overwriting" in one_line_error(
        run_cli("key", "generate", "--name", "x", "--out", str(tmp_path / "secret.key")))
    (tmp_path / "bad.key").write_text("lab:notbase64!")
    assert "bad.key: not a secret key" in one_line_error(
        run_cli("copy", "--to", f"file://{tmp_path}/c", "--sign-key", str(tmp_path / "bad.key"), "/x"))


def test_copy_to_and_from_a_file_cache(tmp_path):
    store, dep, top, key, env, url = cli_file_cache(tmp_path)
    out = run_cli("copy", "--to", url, "--sign-key", str(tmp_path / "k"), "--compression", "bzip2", top, env=env)
    assert out.returncode == 0, out.stderr
    assert "copied 2 path(s)" in out.stderr
    assert all(name.endswith(".nar.bz2") for name in os.listdir(tmp_path / "cache" / "nar"))  # what old Nix reads
    assert f"[1/2] uploaded {os.path.basename(dep)[33:]} (" in out.stderr
    assert f"[2/2] uploaded {os.path.basename(top)[33:]} (" in out.stderr
    fresh = fresh_store_like(store, tmp_path / "old")
    fresh.close()
    assert all("\nCA: fixed:r:sha256:" in p.read_text() for p in (tmp_path / "cache").glob("*.narinfo"))
    for narinfo in (tmp_path / "cache").glob("*.narinfo"):  # without their addresses, only a signature vouches
        narinfo.write_text("".join(l + "\n" for l in narinfo.read_text().splitlines() if not l.startswith("CA: ")))
    # not trusted: one line naming the path and the cache, nothing registered
    refused = run_cli("copy", "--from", url, top, env=env)
    assert f"{top} from {url}: no valid signature by a trusted key" in one_line_error(refused)
    with Store.open(tmp_path / "store") as s:
        assert s.all_paths() == []
    out = run_cli("copy", "--from", url, "--trusted-public-key", str(key.public), "--json", top, env=env)
    assert out.returncode == 0, out.stderr
    assert sorted(json.loads(out.stdout)["substituted"]) == sorted([dep, top])
    with Store.open(tmp_path / "store") as s:
        assert s.verify() == [] and s.references(top) == [dep]


def test_copy_without_a_sign_key_says_once_that_the_cache_is_unsigned(tmp_path):
    """Before, nothing said so: Nix users found out when their substitution refused every path."""
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store)
    store.close()
    env = {"CUDAPKGS_STORE": store.store_dir}
    url = f"file://{tmp_path}/cache"
    out = run_cli("copy", "--to", url, "--json", top, env=env)
    assert out.returncode == 0, out.stderr
    assert sorted(json.loads(out.stdout)["uploaded"]) == sorted([dep, top])  # stdout is the JSON alone
    warned = [line for line in out.stderr.splitlines() if "warning" in line]
    assert len(warned) == 1, out.stderr
    assert warned[0].startswith(f"cudapkgs: warning: uploading to {url} without --sign-key: its narinfos are unsigned")
    assert "--no-check-sigs" in warned[0] and "cudapkgs key generate" in warned[0]
    key = generate("lab-1")
    (tmp_path / "k").write_text(str(key))
    signed = run_cli("copy", "--to", f"file://{tmp_path}/signed", "--sign-key", str(tmp_path / "k"), top, env=env)
    assert signed.returncode == 0 and "warning" not in signed.stderr, signed.stderr


def test_build_push_to_without_a_sign_key_says_so_too(tmp_path, capsys):
    from cudapkgs.cli import build
    from cudapkgs.store.caches import open_cache

    cache = open_cache(f"file://{tmp_path}/cache")
    with Store.open(tmp_path / "store") as store:
        build._push(store, (cache, None), [])
        unsigned = capsys.readouterr().err
        build._push(store, (cache, generate("lab-1")), [])
        signed = capsys.readouterr().err
    assert unsigned.startswith(f"cudapkgs: warning: uploading to {cache.url} without --sign-key: its narinfos are unsigned")
    assert "warning" not in signed and signed.startswith("pushed 0 path(s)")


def _without_addresses(cache_dir) -> None:
    """Drop the narinfos' CA lines: content-addressed paths need no signature, so only a signature vouches."""
    for narinfo in cache_dir.glob("*.narinfo"):
        narinfo.write_text("".join(l + "\n" for l in narinfo.read_text().splitlines() if not l.startswith("CA: ")))


def test_copy_from_a_cache_signed_by_another_key_of_the_trusted_name_says_so_in_one_line(tmp_path):
    """Last session's finding: a warning ("does not match the narinfo's contents", read as tampering), then
    "cannot give … (see the warning above)". Now one line, as Nix's refusal, the re-keyed cache first."""
    store, dep, top, key, env, url = cli_file_cache(tmp_path)
    assert run_cli("copy", "--to", url, "--sign-key", str(tmp_path / "k"), top, env=env).returncode == 0
    fresh_store_like(store, tmp_path / "old").close()
    _without_addresses(tmp_path / "cache")
    other = generate("lab-1")  # the cache was re-keyed under the same name; the user trusts the new key
    said = one_line_error(run_cli("copy", "--from", url, "--trusted-public-key", str(other.public), top, env=env))
    assert said.startswith(f"cudapkgs: error: {top} from {url} lacks a signature by a trusted key: it is signed by a "
                           "key named lab-1, as a trusted key is, but the signature does not verify with the trusted "
                           "lab-1: a different key under that name signed it"), said
    assert "warning" not in said and "see the warning above" not in said
    with Store.open(tmp_path / "store") as s:
        assert s.all_paths() == []


def test_a_bad_trusted_public_key_flag_is_named_as_typed_and_makes_no_store(tmp_path):
    """It was reported as the setting `trustedPublicKeys`, echoed whole, after the store was made."""
    store, dep, top, key, env, url = cli_file_cache(tmp_path)
    store.close()
    fresh = tmp_path / "fresh"
    said = one_line_error(run_cli("copy", "--from", url, "--store", str(fresh), "--trusted-public-key", "lab-1:bad",
                                  top, env=env))
    assert "error: --trusted-public-key 'lab-1:bad': not a public key" in said and "trustedPublicKeys" not in said
    long = "lab-1:" + "A" * 200
    said = one_line_error(run_cli("copy", "--from", url, "--store", str(fresh), "--trusted-public-key", long, top, env=env))
    assert "--trusted-public-key 'lab-1:…' (206 characters): not a public key" in said
    assert long not in said
    secret = str(generate("lab-1"))  # a secret key pasted where the public one belongs: not echoed, and named
    said = one_line_error(run_cli("copy", "--from", url, "--store", str(fresh), "--trusted-public-key", secret, top,
                                  env=env))
    assert secret not in said and secret.split(":")[1][:30] not in said
    assert "(64 bytes after decoding, expected 32: a secret key? it stays with the cache; `cudapkgs key public FILE`" in said
    assert not fresh.exists()


@pytest.mark.parametrize("name", ["k", "lab-1"])
def test_a_secret_key_pasted_as_trusted_public_key_echoes_none_of_its_seed(tmp_path, name):
    """The redaction kept the first 24 characters: with a short name ("k:") that was 22 base64 characters of
    the secret key, 16 of the 32 bytes of its seed, on stderr."""
    store, dep, top, key, env, url = cli_file_cache(tmp_path)
    store.close()
    secret = generate(name)
    data = str(secret).split(":", 1)[1]
    said = run_cli("copy", "--from", url, "--trusted-public-key", str(secret), top, env=env)
    assert said.returncode != 0
    for shown in (said.stderr, said.stdout):
        assert not any(data[i:i + 6] in shown for i in range(len(data) - 5)), shown  # no 6 characters of it
    assert f"--trusted-public-key '{name}:…' ({len(str(secret))} characters): not a public key" in said.stderr
    config = tmp_path / "config.toml"  # the same value in trustedPublicKeys (the setting's check)
    config.write_text(f'trustedPublicKeys = ["{secret}"]\n')
    said = run_cli("copy", "--from", url, top, env={**env, "CUDAPKGS_CONFIG": str(config)})
    assert said.returncode != 0 and not any(data[i:i + 6] in said.stderr for i in range(len(data) - 5)), said.stderr


@pytest.mark.parametrize("case", ["missing sign key", "bad sign key", "bad --to URL", "bad --from URL",
                                  "bad trusted key", "another store's cache", "bad direct writes",
                                  "missing archive", "not an archive", "bad serve size", "export of no store",
                                  "copy --to of no store", "bad serve port", "bad serve host",
                                  "copy --from of another store's path", "bad serve cache dir"])
def test_a_refused_store_command_creates_no_store(tmp_path, case):
    """Each was refused after `Store.open` had made <store>/.meta, .locks, .gcroots… at --store."""
    store, dep, top, key, env, url = cli_file_cache(tmp_path)
    assert run_cli("copy", "--to", url, "--sign-key", str(tmp_path / "k"), dep, env=env).returncode == 0
    store.close()
    (tmp_path / "junk").write_text("not a tar")
    fresh = str(tmp_path / "fresh")
    args = {
        "missing sign key": ["copy", "--to", url, "--sign-key", str(tmp_path / "nokey"), top],
        "bad sign key": ["copy", "--to", url, "--sign-key", str(tmp_path / "junk"), top],
        "bad --to URL": ["copy", "--to", "ftp://x", top],
        "bad --from URL": ["copy", "--from", "ftp://x", top],
        "bad trusted key": ["copy", "--from", url, "--trusted-public-key", "x:y", top],
        "another store's cache": ["copy", "--from", url, top],
        "bad direct writes": ["copy", "--from", url, top],
        "missing archive": ["import", str(tmp_path / "none.tar")],
        "not an archive": ["import", str(tmp_path / "junk")],
        "bad serve size": ["serve", "--port", "0", "--cache-size", "5XB"],
        "export of no store": ["export", top, "-o", str(tmp_path / "out.tar")],
        "copy --to of no store": ["copy", "--to", url, top],
        "bad serve port": ["serve", "--port", "99999"],  # was an internal error (OverflowError from bind)
        "bad serve host": ["serve", "--port", "0", "--host", "256.1.1.1"],
        # top is in tmp_path/store, not in fresh (an empty cache: nothing refused before the path)
        "copy --from of another store's path": ["copy", "--from", f"file://{tmp_path}/empty", top],
        "bad serve cache dir": ["serve", "--port", "0", "--cache-dir", str(tmp_path / "junk")],  # a file
    }[case]
    extra = {"CUDAPKGS_DIRECT_WRITES": "sometimes"} if case == "bad direct writes" else {}
    result = run_cli(*args, "--store", fresh, env={**env, **extra})
    if case == "bad serve port":  # argparse's usage error: the usage, then the one error line
        assert result.returncode == 2 and "argument --port: '99999' is not a port" in result.stderr, result.stderr
    else:
        one_line_error(result)
    assert not os.path.exists(fresh)


def test_serve_s_address_check_takes_what_bind_takes():
    """The check made before the store is opened refuses only what bind() would: "" (every interface, as
    bind takes it) and the usual spellings pass; a name that resolves to nothing does not."""
    from cudapkgs.cli.caches import _check_listen_address
    from cudapkgs.errors import CudapkgsError

    for host in ("", "0.0.0.0", "127.0.0.1", "localhost", "::1"):
        _check_listen_address(host, 0)
    with pytest.raises(CudapkgsError, match="cannot listen on 256.1.1.1:0"):
        _check_listen_address("256.1.1.1", 0)
    with pytest.raises(CudapkgsError, match=r"cannot listen on a\\x00b:0"):
        _check_listen_address("a\x00b", 0)


def test_copy_bad_input_is_one_line(tmp_path):
    env = {"CUDAPKGS_STORE": str(tmp_path / "store")}
    Store.open(tmp_path / "store").close()  # where there is none, `copy --to` says that first
    assert "not a cache URL" in one_line_error(run_cli("copy", "--to", "ftp://x", "/y", env=env))
    assert "not in the store" in one_line_error(run_cli("copy", "--to", f"file://{tmp_path}/c", "/etc/hostname", env=env))
    absent = f"{tmp_path}/store/{'a' * 32}-x"
    assert f"file://{tmp_path}/nothing does not have {absent}" in one_line_error(
        run_cli("copy", "--from", f"file://{tmp_path}/nothing", absent, env=env))


def _fetch_and_check(cache, path: str, key, dest) -> None:
    """What substitution checks, against a served path (a second store at the same directory cannot exist here)."""
    import hashlib

    from cudapkgs.store import nar
    from cudapkgs.store.nar_restore import restore
    from cudapkgs.store.paths import base32_encode

    info = cache.narinfo(path)
    assert key.public.verify(info.sigs[0], info.fingerprint())
    stream = cache._get(info.url, info.file_size_bound())
    reader = restore(stream, dest)
    stream.close()
    assert "sha256:" + base32_encode(reader.sha256.digest()) == info.nar_hash and reader.size == info.nar_size
    assert "sha256:" + base32_encode(hashlib.sha256(b"".join(nar.dump(dest))).digest()) == info.nar_hash


def test_serve_a_store_signed_and_read_only(tmp_path):
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store, size=100_000)
    key = generate("serve-1")
    server = make_server(store.store_dir, "127.0.0.1", 0, secret_key=key)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cache = open_cache(f"http://127.0.0.1:{server.server_address[1]}")
        assert cache.cache_info().store_dir == store.store_dir
        info = cache.narinfo(top)
        assert info.compression == "none" and info.references == (os.path.basename(dep),)
        assert info.nar_hash == store.query(top).nar_hash
        _fetch_and_check(cache, dep, key, tmp_path / "dep-copy")
        assert os.readlink(tmp_path / "dep-copy" / "link") == "data"
        assert cache.narinfo(f"{store.store_dir}/{'c' * 32}-absent") is None
        with pytest.raises(Exception, match="upload refused \\(405"):
            cache._put_bytes("x.narinfo", b"x", "text/plain")  # read-only
    finally:
        server.shutdown()
        server.server_close()
        store.close()


def test_serve_command_starts_serves_and_stops(tmp_path):
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store)
    store.close()
    key = generate("serve-1")
    (tmp_path / "k").write_text(str(key))
    process = subprocess.Popen([sys.executable, "-m", "cudapkgs", "serve", "--port", "0", "--quiet", "--sign-key",
                                str(tmp_path / "k"), "--store", str(tmp_path / "store")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith(f"serving {tmp_path}/store at http://127.0.0.1:") and "signing as serve-1" in line
        _fetch_and_check(open_cache(line.split(" at ", 1)[1].split()[0]), top, key, tmp_path / "top-copy")
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode in (0, -15)


def test_plan_what_if_compares_substitutable_and_to_build(tmp_path, manifests_dir, monkeypatch):
    """A cache holding the sm_90 saxpy closure: asking for 8.9 instead costs one build (saxpy), nvcc & co. come from the cache."""
    import cudapkgs

    store_dir = str(tmp_path / "store")
    monkeypatch.setenv("CUDAPKGS_STORE", store_dir)
    config = {"allowUnfree": True, "cudaSupport": True, "cudaCapabilities": ["9.0"], "fetchers": ["wheels"]}
    saxpy = cudapkgs.import_pkgs(config=config).cudaPackages_13_0.pkgs.saxpy.derivation
    key = generate("lab-1")
    url = f"file://{tmp_path}/cache"
    with Store.open(store_dir) as store:
        everything = []
        for drv in saxpy.closure():  # stand-in outputs at the real output paths (only the plan is under test)
            def build(dirs, drv=drv):
                for directory in dirs.values():
                    directory.mkdir()
                    (directory / "stand-in").write_text(drv.name)
            everything += store.add_outputs(list(drv.outputs.values()), build)
        open_cache(url).upload_closure(store, everything, secret_key=key)
        fresh_store_like(store, tmp_path / "old").close()
    sets = ["--set", "allowUnfree=true", "--set", "cudaSupport=true", "--set", 'cudaCapabilities=["9.0"]',
            "--set", 'fetchers=["wheels"]', "--set", f'substituters=["{url}"]',
            "--set", f'trustedPublicKeys=["{key.public}"]']
    out = run_cli("plan", "--what-if", 'cudaCapabilities=["8.9"]', "--json", *sets, "cudaPackages_13_0.pkgs.saxpy")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    current, what_if = result["current"], result["whatIf"]
    assert current["build"] == [] and saxpy.outputs["out"] in {s["path"] for s in current["substitute"]}
    assert [b.rsplit("-", 2)[-2] for b in what_if["build"]] == ["saxpy"]
    assert what_if["build"][0] != saxpy.drv_path
    substituted = {os.path.basename(s["path"])[33:] for s in what_if["substitute"]}
    assert any(n.startswith("cuda13.0-cuda_nvcc-") for n in substituted)
    assert all(s["cache"] == url and s["downloadSize"] > 0 for s in what_if["substitute"])
    human = run_cli("plan", "--what-if", 'cudaCapabilities=["8.9"]', *sets, "cudaPackages_13_0.pkgs.saxpy")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[2].split()[:3] == ["current", "0", str(len(current["substitute"]))]
    assert "to build with cudaCapabilities=[\"8.9\"]:" in human.stdout
    extra = [s for s in what_if["substitute"] if s["path"] not in {x["path"] for x in current["substitute"]}]
    assert extra and all("saxpy" not in s["path"] for s in extra)  # nvcc & co.: not needed while saxpy is cached
    assert f"the change costs 1 build(s) and {len(extra)} substitution(s) (" in human.stdout
    # and `cudapkgs build` with the same settings substitutes instead of building (nothing is downloaded)
    dry = run_cli("build", "--dry-run", *sets, "cudaPackages_13_0.pkgs.saxpy")
    assert dry.returncode == 0, dry.stderr
    n = len(current["substitute"])
    assert dry.stdout.splitlines()[0].startswith("this path" if n == 1 else f"these {n} paths")
    assert " will be substituted (" in dry.stdout.splitlines()[0] and saxpy.outputs["out"] in dry.stdout
    assert "nothing will be built" in dry.stdout
    built = run_cli("build", "--no-link", *sets, "cudaPackages_13_0.pkgs.saxpy", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip() == saxpy.outputs["out"]
    assert f"[{len(current['substitute'])}/{len(current['substitute'])}] substituted" in built.stderr
    with Store.open(store_dir) as store:
        assert store.is_valid(saxpy.outputs["out"]) and store.verify() == []


def test_plan_what_if_names_its_own_bad_input(tmp_path):
    """A wrong --what-if is reported as --what-if (not as a --set of the second evaluation), before evaluating."""
    env = {"CUDAPKGS_STORE": str(tmp_path / "store")}
    typo = one_line_error(run_cli("plan", "--what-if", 'cudaCapabilitie=["8.9"]', "saxpy", env=env))
    assert typo.startswith('cudapkgs: error: --what-if: unknown configuration key "cudaCapabilitie"'), typo
    assert 'did you mean "cudaCapabilities"' in typo and "--set" not in typo
    shape = one_line_error(run_cli("plan", "--what-if", "garbage", "saxpy", env=env))
    assert "--what-if 'garbage': expected KEY=VALUE" in shape and "--set" not in shape, shape


def test_copy_to_compresses_frames_on_the_workers_jobs_asks_for(tmp_path, monkeypatch, capsys):
    """`copy --to -j N` compresses N zstd frames at once; without -j, as many as `compress_workers` says."""
    from cudapkgs.cli import main
    from cudapkgs.store.caches import base, substitution

    with Store.open(tmp_path / "store") as store:
        _dep, top = make_closure(store, size=1000)
    seen: list[int] = []
    real = base.Cache.upload

    def upload(self, store, path, **options):
        seen.append(options.get("workers"))
        return real(self, store, path, **options)

    monkeypatch.setattr(base.Cache, "upload", upload)
    monkeypatch.setattr(substitution, "compress_workers", lambda: 2)
    assert main(["copy", "--to", f"file://{tmp_path}/a", "-j", "3", "--store", str(tmp_path / "store"), top]) == 0
    assert seen == [3, 3]
    seen.clear()
    assert main(["copy", "--to", f"file://{tmp_path}/b", "--store", str(tmp_path / "store"), top]) == 0
    assert seen == [2, 2]
    assert open_cache(f"file://{tmp_path}/b").narinfo(top) is not None
    seen.clear()  # a build's --push-to uploads the same way
    from cudapkgs.cli import build

    with Store.open(tmp_path / "store") as store:
        build._push(store, (open_cache(f"file://{tmp_path}/c"), generate("lab-2")), [top])
    assert seen == [2, 2]


def test_plan_shell_counts_what_a_shell_adds(tmp_path, manifests_dir, monkeypatch, capsys):
    """`plan --shell` plans what `cudapkgs shell` of the same packages realises: stdenv.cc too (a new
    user's `plan` said 10 paths where the shell then substituted 11: the compiler wrapper)."""
    from cudapkgs.cli import main
    from cudapkgs.host.compiler import default_compiler

    if default_compiler() is None:
        pytest.skip("no host C compiler: a shell has no stdenv.cc")
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    sets = ["--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]', "--json", "cudaPackages_13_0.cuda_cudart"]
    assert main(["plan", *sets]) == 0
    plain = json.loads(capsys.readouterr().out)["current"]
    assert main(["plan", "--shell", *sets]) == 0
    shell = json.loads(capsys.readouterr().out)["current"]
    assert set(plain["roots"]) == {"cudaPackages_13_0.cuda_cudart"}
    assert set(shell["roots"]) == {"cudaPackages_13_0.cuda_cudart", "stdenv.cc"}
    wrapper = shell["roots"]["stdenv.cc"]["out"]
    assert "wrapper" in wrapper and not any(wrapper in b for b in plain["build"])
    assert len(shell["build"]) > len(plain["build"])


def test_plan_of_a_store_path_wants_it_valid_as_build_does(tmp_path, monkeypatch, capsys):
    """`plan /etc/passwd` or a store path not in the store said "every output is valid" and exited 0,
    where `build` and `shell` refuse them; a valid store path is planned as valid, among the roots."""
    from cudapkgs.cli import main

    store_dir = tmp_path / "store"
    monkeypatch.setenv("CUDAPKGS_STORE", str(store_dir))
    with Store.open(store_dir) as store:
        path = store.add_path("words", lambda d: (d.mkdir(), (d / "a").write_text("a")))
    assert main(["plan", "--json", path]) == 0
    result = json.loads(capsys.readouterr().out)["current"]
    assert result["roots"] == {path: {"out": path}} and result["valid"] == [path] and result["build"] == []
    for bad, said in (("/etc/passwd", "is not in the store"),
                      (f"{store_dir}/0000000000000000000000000000000a-foo", "is not valid in the store")):
        assert main(["plan", bad]) == 1
        captured = capsys.readouterr()
        assert said in captured.err and "Traceback" not in captured.err and captured.out == ""
