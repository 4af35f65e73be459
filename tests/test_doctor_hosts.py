"""`cudapkgs doctor` says which fetchers and source hosts answer from this machine (issue 31, deliverable 3).

Probes go to 127.0.0.1 servers only: one that answers, a port that refuses, one that never speaks.
"""

from __future__ import annotations

import json

import pytest
from local_servers import free_port
from loopback_server import serve
from slow_server import raw_server

from cudapkgs.config import load_config
from cudapkgs.doctor import SOURCE_HOSTS, diagnose, fetcher_hosts
from cudapkgs.fetch import reachability


@pytest.fixture(autouse=True)
def _probing(monkeypatch):
    monkeypatch.delenv("CUDAPKGS_PROBE_HOSTS", raising=False)
    monkeypatch.setattr("cudapkgs.doctor.SOURCE_HOSTS", {})  # GitHub itself is not asked by a test
    reachability.forget()
    yield
    reachability.forget()


def test_the_places_probed_follow_the_configuration(monkeypatch):
    monkeypatch.setenv("CUDAPKGS_PYPI_SIMPLE", "http://127.0.0.1:9/simple")
    monkeypatch.setattr("cudapkgs.doctor.SOURCE_HOSTS", {"GitHub": "https://github.com"})
    config = load_config(sets=['fetchers=["redist", "mirror:/srv/redist", "mirror:http://127.0.0.1:8/r", "wheels"]',
                               'sourceMirrors=["http://127.0.0.1:7/src", "/srv/src"]'])
    assert fetcher_hosts(config, {}) == [
        ("fetcher redist (NVIDIA's redist server)", "https://developer.download.nvidia.com/compute"),
        ("fetcher mirror:http://127.0.0.1:8/r", "http://127.0.0.1:8/r"),
        ("fetcher wheels (the package index)", "http://127.0.0.1:9/simple"),
        ("source mirror http://127.0.0.1:7/src", "http://127.0.0.1:7/src"),
        ("GitHub", "https://github.com"),
    ]
    assert SOURCE_HOSTS == {"GitHub (fetchFromGitHub sources)": "https://github.com"}  # the module's own value


def silent(conn, server):
    server.stopping.wait(server.cap_s)


def test_doctor_reports_each_host_and_a_problem_when_no_fetcher_answers(monkeypatch, tmp_path):
    refused = f"http://127.0.0.1:{free_port()}"
    with raw_server(silent, cap_s=10) as quiet:
        monkeypatch.setenv("CUDAPKGS_PYPI_SIMPLE", quiet.url + "/simple")
        config = load_config(sets=[f'fetchers=["mirror:{refused}/redist", "wheels"]', f'storeDir="{tmp_path}/store"'])
        report = diagnose(config, probe=lambda urls: reachability.probe(urls, timeout_s=1.0))
    hosts = {h["url"]: h for h in report.hosts}
    assert hosts[refused]["answers"] is False and "refused" in hosts[refused]["reason"]
    assert hosts[quiet.url]["answers"] is False and hosts[quiet.url]["reason"]
    assert any(p.what.startswith("no configured fetcher answers from this machine") for p in report.problems)
    assert report.to_json()["hosts"] == report.hosts


def test_doctor_notes_a_silent_fetcher_when_another_answers(monkeypatch, tmp_path):
    refused = f"http://127.0.0.1:{free_port()}"
    for server in serve():
        monkeypatch.setenv("CUDAPKGS_PYPI_SIMPLE", server.url + "/simple")
        config = load_config(sets=[f'fetchers=["mirror:{refused}", "wheels"]', f'storeDir="{tmp_path}/store"'])
        report = diagnose(config, probe=lambda urls: reachability.probe(urls, timeout_s=1.0))
        assert {h["url"]: h["answers"] for h in report.hosts} == {refused: False, server.url: True}
        assert not [p for p in report.problems if "fetcher" in p.what]
        assert any(f"fetcher mirror:{refused} does not answer" in n.what for n in report.notes)


def test_doctor_command_prints_hosts_and_offline_skips_them(tmp_path, monkeypatch, capsys):
    from cudapkgs.cli import main

    refused = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("CUDAPKGS_PYPI_SIMPLE", refused + "/simple")
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    args = ["doctor", "--set", f'fetchers=["mirror:{refused}", "wheels"]']
    assert main([*args, "--json"]) == 1  # no fetcher answers: a problem
    data = json.loads(capsys.readouterr().out)
    assert [(h["what"], h["url"], h["answers"]) for h in data["hosts"]] == [
        (f"fetcher mirror:{refused}", refused, False), ("fetcher wheels (the package index)", refused, False)]
    main(args)
    text = capsys.readouterr().out
    assert f"  fetcher mirror:{refused}: {refused} does not answer: " in text
    main([*args, "--offline"])
    assert "hosts: not probed (--offline or $CUDAPKGS_PROBE_HOSTS=0)" in capsys.readouterr().out


def test_a_silent_source_host_is_a_note_naming_the_mirror_key(monkeypatch, tmp_path):
    refused = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setattr("cudapkgs.doctor.SOURCE_HOSTS", {"GitHub (fetchFromGitHub sources)": refused})
    for server in serve():
        monkeypatch.setenv("CUDAPKGS_PYPI_SIMPLE", server.url + "/simple")
        config = load_config(sets=['fetchers=["wheels"]', f'storeDir="{tmp_path}/store"'])
        report = diagnose(config, probe=lambda urls: reachability.probe(urls, timeout_s=1.0))
        assert not report.problems or all("fetcher" not in p.what for p in report.problems)
        (note,) = [n for n in report.notes if n.what.startswith("GitHub (fetchFromGitHub sources) does not answer")]
        assert "the ML stack needs none" in note.what and "sourceMirrors" in note.suggestion
