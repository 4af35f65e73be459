"""Real servers on 127.0.0.1 for the cache tests: nginx with WebDAV PUT, and moto's S3 server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


from local_servers import free_port, nginx_binary, wait_for_port  # noqa: E402,F401 (shared with bench/bench_cache.py)


NGINX_CONF = """\
{user}
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_max_body_size 0;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
        }}
    }}
}}
"""


@pytest.fixture
def nginx(tmp_path):
    """(URL, root directory) of an nginx serving and accepting PUT into a fresh directory."""
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light): the http:// backend tests need a WebDAV server")
    run_dir = tmp_path / "nginx"
    root = tmp_path / "www"
    for d in (run_dir, root):
        d.mkdir()
    port = free_port()
    user = "user root root;" if os.geteuid() == 0 else ""
    (run_dir / "nginx.conf").write_text(NGINX_CONF.format(user=user, dir=run_dir, port=port, root=root))
    process = subprocess.Popen([binary, "-c", str(run_dir / "nginx.conf"), "-p", str(run_dir)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        try:
            wait_for_port(port, process, "nginx")
        except RuntimeError as error:
            log = (run_dir / "error.log").read_text() if (run_dir / "error.log").exists() else ""
            pytest.skip(f"nginx could not start here ({error}: {log[-300:]})")
        yield f"http://127.0.0.1:{port}/cache", root / "cache", port
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def s3_server(tmp_path):
    """The URL of moto's S3 server on 127.0.0.1 (moto: an in-process S3 implementation on PyPI; no account needed)."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'moto[server]')")
    pytest.importorskip("boto3")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process, "moto_server")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
