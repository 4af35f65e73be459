"""A cache's password is never shown (an attacker's review of `shown_cache_url`): not by `config`, not in
the errors of a cache URL that cannot be opened (`copy --to/--from`, `build --push-to`, substituters),
whatever the password holds.  Offline."""

from __future__ import annotations

import pytest

from cudapkgs.config import load_config, parse_set
from cudapkgs.errors import ConfigError
from cudapkgs.config import shown_cache_url
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.base import CacheError

SECRET = "s3cr3t"


@pytest.mark.parametrize("url, shown", [
    (f"https://:{SECRET}@cache.example/x", "https://:***@cache.example/x"),  # a token after an empty user name
    (f"https://ci:{SECRET}@pass@cache.example/x", "https://ci:***@cache.example/x"),  # a raw @ in the password
    (f"https://ci:{SECRET}%40x@cache.example/x", "https://ci:***@cache.example/x"),
    (f"HTTPS://CI:{SECRET}@H", "HTTPS://CI:***@H"),
    (f"s3://b?endpoint=https%3A%2F%2Fk%3A{SECRET}%40minio%3A9000&region=x",  # percent-encoded in the query
     "s3://b?endpoint=https://k:***@minio:9000&region=x"),
    (f"https://ci:{SECRET}/x@cache.example/x", "https://ci:***@cache.example/x"),  # a raw / in the password
    ("https://h:8080/a@b", "https://h:8080/a@b"),  # a port and a path
    ("https://u@h/a", "https://u@h/a"),
    ("https://h/a@b:c", "https://h/a@b:c"),
    ("s3://b/p?region=eu&endpoint=minio%3A9000", "s3://b/p?region=eu&endpoint=minio%3A9000"),
])
def test_the_password_is_masked_whatever_it_holds(url, shown):
    assert shown_cache_url(url) == shown


@pytest.mark.parametrize("url", [
    f"ftp://ci:{SECRET}@host/x",  # no cache scheme
    f"https://ci:{SECRET}@host:99999/x",  # a port out of range
    f"https://ci:{SECRET}@/x",  # no host
    f"s3://b?endpoint=https://k:{SECRET}@minio&bogus=1",  # an unknown parameter before the endpoint's check
    f"s3://AKIA:{SECRET}@bucket/x",  # credentials in the bucket's place
    f"file://ci:{SECRET}@host/srv",
    f"https://ci:{SECRET}/x@host/x",  # urllib: host "ci", port "s3cr3t": refused, the URL named
])
def test_a_cache_url_that_cannot_be_opened_names_no_password(url):
    with pytest.raises(CacheError) as raised:
        open_cache(url)
    assert SECRET not in str(raised.value)


def test_a_substituter_given_as_a_string_is_not_echoed_with_its_password():
    key, value = parse_set(f'substituters="https://ci:{SECRET}@cache.example"')
    with pytest.raises(ConfigError) as raised:
        load_config(overrides={key: value}, env={})
    assert SECRET not in str(raised.value) and "https://ci:***@cache.example" in str(raised.value)


@pytest.mark.parametrize("url", [
    f"https://ci:{SECRET}@host/x?compression-level=zz",  # Cache.__init__ named the URL it was given
    f"s3://b?endpoint=https://k:{SECRET}@minio&compression-level=abc",  # before the endpoint's own check
    f"s3://b?endpoint=https%3A%2F%2Fk%3A{SECRET}%40minio&compression-level=x1",
])
def test_a_bad_compression_level_names_no_password(url):
    with pytest.raises(CacheError) as raised:
        open_cache(url)
    assert SECRET not in str(raised.value) and "compression-level" in str(raised.value)


def test_plan_shows_no_password_of_a_mirror_fetcher(manifests_dir, tmp_path, monkeypatch, capsys):
    """`plan` (and `--json`) named the fetcher of each source as configured: ``mirror:http://ci:token@…``."""
    from cudapkgs.cli import main

    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("CUDAPKGS_PROBE_HOSTS", "0")
    fetchers = ["--set", f'fetchers=["mirror:http://ci:{SECRET}@127.0.0.1:1/nv", "wheels"]']
    for extra in ([], ["--json"]):
        assert main(["plan", *extra, "--set", "allowUnfree=true", *fetchers, "cudaPackages_13_0.cuda_cudart"]) == 0
        out, err = capsys.readouterr()
        assert SECRET not in out + err and "mirror:http://ci:***@127.0.0.1:1/nv" in out, extra
    assert main(["build", "--dry-run", "--set", "allowUnfree=true", *fetchers, "cudaPackages_13_0.cuda_cudart"]) == 0
    out, err = capsys.readouterr()
    assert SECRET not in out + err and "mirror:http://ci:***@127.0.0.1:1/nv" in out + err


def test_a_mirror_with_a_port_out_of_range_is_refused_as_configured_not_an_internal_error(capsys, monkeypatch):
    """``mirror:http://h:99999`` made `list`, `plan` and `doctor` end in an internal error (urllib's ValueError
    from the host probe's base URL); refused by the configuration now, naming it without its password."""
    from cudapkgs.cli import main
    from cudapkgs.fetch.reachability import base_url

    assert base_url(f"http://ci:{SECRET}@h:99999/x") == "http://h:99999"
    for key in ("fetchers", "sourceMirrors"):
        value = f"mirror:http://ci:{SECRET}@127.0.0.1:99999/nv" if key == "fetchers" else f"http://ci:{SECRET}@h:99999/x"
        code = main(["config", "--set", f'{key}=["{value}"]'])
        out, err = capsys.readouterr()
        assert code != 0 and "internal error" not in err and "the port is not a number" in err, err
        assert SECRET not in out + err
