"""A Dask cluster on this host whose workers have stores of their own: for trying the Dask
executor out, for tests and for benchmarks.

The scheduler runs in this process (``distributed.LocalCluster`` with no
workers of its own); each worker is a ``dask worker`` process started with
``CUDAPKGS_WORKER_STORE`` pointing at its own real store, so its builds run in
a private mount namespace where that store sits at the client's store
directory (see `remote_build`). This needs ``unshare --mount``: root, or
unprivileged user namespaces.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from ..python_child import new_private_directory, own_python, remove_private_directory

__all__ = ["LocalBuildCluster"]


class LocalBuildCluster:
    """A scheduler on 127.0.0.1 and worker processes, each with a real store under `stores_dir`.

    Use as a context manager; `address` is the scheduler's ``tcp://127.0.0.1:PORT``.
    """

    def __init__(self, stores_dir: str | os.PathLike[str], *, worker_death_timeout: float = 60) -> None:
        from distributed import LocalCluster

        self.stores_dir = Path(os.path.abspath(stores_dir))  # the workers run in another directory
        # Workers run in sessions of their own (so that `kill` takes their builds too). One that
        # never reaches the scheduler (this process killed right after starting it) would retry
        # forever; ``dask worker --death-timeout`` makes it exit after this many seconds.
        self.worker_death_timeout = worker_death_timeout
        # dashboard_address=None would still bind the scheduler's HTTP server to port 8787 (a warning when a
        # Jupyter dask cluster or a second build holds it): a free loopback port, and no dashboard.
        self._cluster = LocalCluster(n_workers=0, processes=True, scheduler_port=0, dashboard_address="127.0.0.1:0",
                                     scheduler_kwargs={"dashboard": False}, host="127.0.0.1")
        self.address: str = self._cluster.scheduler_address
        self.workers: dict[str, subprocess.Popen] = {}
        self._cwd: str | None = None  # the workers' private working directory, removed by `close`

    def start_worker(self, name: str, *, resources: str = "", features: str = "", nthreads: int = 1) -> Path:
        """Start worker `name` (its real store: ``stores_dir/store-NAME``) offering `resources`
        (``cuda=1,…``) and the build features `features` (space-separated, as CUDAPKGS_SYSTEM_FEATURES)."""
        real = self.stores_dir / f"store-{name}"
        env = dict(os.environ, CUDAPKGS_WORKER_STORE=str(real), CUDAPKGS_SYSTEM_FEATURES=features)
        # -P and a private working directory: `python -m` would import a distributed/ found in the user's.
        argv = [*own_python("-m", "distributed.cli.dask_worker"), self.address, "--name", name,
                "--nthreads", str(nthreads), "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                "--death-timeout", f"{self.worker_death_timeout:g}"]
        if resources:
            argv += ["--resources", resources]
        if self._cwd is None:
            self._cwd = new_private_directory()
        self.workers[name] = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True, cwd=self._cwd)
        return real

    def wait_for(self, count: int, timeout: float = 60) -> None:
        """Block until `count` workers are connected (TimeoutError after `timeout` seconds)."""
        from distributed import Client

        with Client(self.address, timeout=timeout) as client:
            client.wait_for_workers(count, timeout=timeout)

    def kill(self, name: str) -> None:
        """SIGKILL worker `name` and everything it started (a machine lost mid-build)."""
        os.killpg(self.workers[name].pid, signal.SIGKILL)
        self.workers[name].wait()

    def close(self) -> None:
        """Stop every worker and the scheduler."""
        for proc in self.workers.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._cwd is not None:
            remove_private_directory(self._cwd)
            self._cwd = None
        self._cluster.close()

    def __enter__(self) -> "LocalBuildCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
