"""Package tests that need hardware: system features, and `cudapkgs test`.

A package lists its tests in `passthru.tests` (Nixpkgs' convention): each is a
package whose build *is* the test, so a successful build means it passed. Tests
that need a GPU sit under `passthru.tests.cuda` and set `requiredSystemFeatures`
(["cuda"], or a capability feature such as "cuda-sm-90"); such a derivation is
built only on a machine that offers every feature it requires, otherwise the test
is reported as skipped with the missing features named.

A machine offers "cuda" and the `cuda-sm-*` features of its GPUs
(`_cuda.lib.getCudaSystemFeatures`), found through nvidia-smi; the environment
variable CUDAPKGS_SYSTEM_FEATURES (space-separated) replaces the detection, like
Nix's `system-features` setting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from .host.features import host_system_features, missing_features


def collect_tests(package: Any, prefix: str = "") -> "TesterDict":
    """`passthru.tests` and `passthru.testers` of a package (or the members of an attribute set of
    tests, such as `cudaPackages_13_0.tests.onnx-tensorrt`), flattened: {"cuda.run": test package,
    "run": …, "testers.cudaAvailable": tester package}. A tester (Nixpkgs' `passthru.testers`, a
    package whose `bin/<meta.mainProgram>` is the check, to be run where the hardware is) is keyed
    under "testers."; `is_tester` tells them apart."""
    from .lib.fixpoint import force

    passthru = force(package.get("passthru")) if hasattr(package, "get") else None
    tests = force(passthru.get("tests")) if isinstance(passthru, Mapping) else None
    if tests is None and "tests" in package:
        tests = package["tests"]
    if tests is None and passthru is None and isinstance(package, Mapping) and "derivation" not in package:
        tests = package  # an attribute set of tests itself (cudaPackages_13_0.tests.opencv-and-torch)
    found = TesterDict(_flatten(tests or {}, prefix))
    testers = force(passthru.get("testers")) if isinstance(passthru, Mapping) else None
    if isinstance(testers, Mapping):
        programs = _flatten(testers, prefix + "testers.")
        found.update(programs)
        found.testers = frozenset(programs)
    return found


class TesterDict(dict):  # type: ignore[type-arg]
    """`collect_tests`' result: name -> package, with `testers` naming the keys that are testers."""

    testers: frozenset[str] = frozenset()


def is_tester(tests: Mapping[str, Any], key: str) -> bool:
    """Whether `tests[key]` (a `collect_tests` result) is a tester: it came from `passthru.testers`,
    or it is a `writeGpuTestPython` program (it has `passthru.gpuCheck` and `meta.mainProgram`)."""
    from .lib.fixpoint import force

    if key in getattr(tests, "testers", ()):
        return True
    package = tests[key]
    passthru = force(package.get("passthru")) if hasattr(package, "get") else None
    meta = package.get("meta") if hasattr(package, "get") else None
    return isinstance(passthru, Mapping) and "gpuCheck" in passthru and bool((meta or {}).get("mainProgram"))


def tester_features(package: Any) -> list[str]:
    """The system features a tester's program needs where it runs: its `passthru.requiredSystemFeatures`
    (writeGpuTestPython's `feature`), else ["cuda"] (a tester exists to check hardware)."""
    from .lib.fixpoint import force

    passthru = force(package.get("passthru")) if hasattr(package, "get") else None
    if isinstance(passthru, Mapping) and "requiredSystemFeatures" in passthru:
        return [str(f) for f in force(passthru["requiredSystemFeatures"]) or ()]
    return ["cuda"]


def _flatten(tests: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    from .lib.fixpoint import force

    found: dict[str, Any] = {}
    for name in tests:
        value = force(tests[name])
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and "derivation" not in value:
            found.update(_flatten(value, key + "."))
        elif value is not None:
            found[key] = value
    return found


class TestResult:
    """One test's outcome: "passed", "failed" or "skipped", with a one-line detail.

    ``cause`` is ``"unfree"`` for a test skipped only because a package it needs is unfree and the
    configuration does not allow it (it could run here with ``allowUnfree``), else None.
    """

    __slots__ = ("test", "result", "detail", "cause")

    def __init__(self, test: str, result: str, detail: str, cause: str | None = None) -> None:
        self.test, self.result, self.detail, self.cause = test, result, detail, cause

    def to_json(self) -> dict[str, str]:
        found = {"test": self.test, "result": self.result, "detail": self.detail}
        return {**found, "cause": self.cause} if self.cause else found

    def __repr__(self) -> str:
        return f"TestResult({self.test!r}, {self.result!r})"


def run_tests(pkgs: Any, attrpaths: list[str], *, offered: frozenset[str] | None = None, jobs: int = 1,
              builders: Any = None, progress: Any = None) -> list[TestResult]:
    """Build the tests of each package at `attrpaths`; what the machine cannot run is skipped.

    ``progress``: None, or a callable returning a fresh `realise.scheduler.Progress` for each test's
    builds (the command line passes its bars or lines: without them a test that builds torch's
    closure says nothing for minutes).

    A test that cannot be evaluated here (unfree without permission, unavailable) is skipped with
    that reason; one whose evaluation fails otherwise (an evaluation-time assertion) has failed.

    With `builders` (a `realise.dask_executor.DaskBuilders`) every runnable test is
    built at once on that Dask cluster, a test needing features (a GPU) only on a
    worker offering them, and each result names the worker that ran it; `offered`
    is then what the connected workers offer, unless given.
    """
    from .lib.attrpath import parse_attrpath, resolve
    from .errors import CudapkgsError, EvalError, UnavailablePackageError, UnfreeLicenseError

    if builders is not None:
        return _run_tests_remotely(pkgs, attrpaths, builders, offered)
    offered = host_system_features() if offered is None else offered
    results = []
    for text in attrpaths:
        tests = collect_tests(resolve(pkgs, parse_attrpath(text)))
        if not tests:
            raise EvalError(f"{text} has no tests (passthru.tests)")
        for name, test in tests.items():
            label = f"{text}.tests.{name}"
            meta = test.get("meta") or {}
            if meta.get("available") is False:  # cannot run here at all (licence, platform): say why
                problems = meta.get("problems") or {}
                reason = "; ".join(p["message"] for p in problems.values()) or "not available here"
                results.append(TestResult(label, "skipped", reason))
                continue
            try:
                drv = test.derivation
            except UnfreeLicenseError as error:  # could run here, but the configuration forbids it
                results.append(TestResult(label, "skipped", str(error).splitlines()[0], cause="unfree"))
                continue
            except UnavailablePackageError as error:  # cannot run here: say why
                results.append(TestResult(label, "skipped", str(error).splitlines()[0]))
                continue
            except CudapkgsError as error:  # the test itself does not evaluate (an evaluation assertion)
                results.append(TestResult(label, "failed", str(error).splitlines()[0]))
                continue
            again = _evaluated_without(pkgs, text, name)
            if is_tester(tests, name):
                results.append(_run_tester(label, test, drv, offered, jobs, again, progress))
                continue
            lacking = missing_features(drv, offered)
            if lacking:
                results.append(TestResult(label, "skipped", "needs " + " ".join(lacking)))
                continue
            try:
                drv = realise_reachable(drv, jobs, again, progress)
            except CudapkgsError as error:
                results.append(TestResult(label, "failed", str(error)))
                continue
            results.append(TestResult(label, "passed", _last_line(drv) or drv.outputs["out"]))
    return results


def realise_reachable(drv: Any, jobs: int, again: Any = None, progress: Any = None) -> Any:
    """Realise `drv` (and hold its outputs as temporary roots); returns the derivation realised.

    When planning skipped fetchers whose host does not answer (NVIDIA's server on a machine that
    reaches only PyPI) and ``again`` (``skipped fetcher names -> derivation or None``) gives the
    derivation evaluated without them, that one is realised instead, as `cudapkgs build` and
    `shell` do (cli.installables.without_fetchers): evaluation depends on the fetchers (triton takes
    cuobjdump and nvdisasm only where a configured fetcher supplies them).  Raises the plan's
    `SourcePlanError` when nothing can supply a source, `BuildFailed` when a build fails.
    ``progress``: None or a callable returning the `Progress` that reports the builds.
    """
    from .fetch.planning import SourcePlanError
    from .realise.scheduler import plan, run
    from .store.store import Store

    with Store.open(drv.store_dir) as store:
        try:
            the_plan, failure = plan(store, [drv]), None
            skipped = the_plan.skipped
        except SourcePlanError as error:
            the_plan, failure, skipped = None, error, getattr(error, "skipped", ())
        other = again(tuple(f for f, _host, _why in skipped)) if skipped and again is not None else None
        if other is not None:
            drv, the_plan, failure = other, plan(store, [other]), None
        if failure is not None:
            raise failure
        run(store, the_plan, jobs=jobs, progress=progress() if progress is not None and the_plan.to_build else None)
        store.add_temp_roots(drv.outputs.values())
    return drv


def _evaluated_without(pkgs: Any, text: str, name: str) -> Any:
    """An ``again`` for `realise_reachable`: test `name` of the package at `text`, evaluated with
    config ``fetchers`` less the skipped ones (same system and overlays); None when none would be
    left, nothing was removed, or `pkgs` is not a top level made by `import_pkgs`."""
    from .lib.attrpath import parse_attrpath, resolve
    from .top_level import TopLevel, top_level

    def again(skipped: Any) -> Any:
        if not isinstance(pkgs, TopLevel):
            return None
        config, system, overlays = pkgs._import
        left = [f for f in config.fetchers if f not in set(skipped)]
        if not left or len(left) == len(config.fetchers):
            return None
        other = top_level(config.replace(fetchers=left), system, overlays)
        return collect_tests(resolve(other, parse_attrpath(text)))[name].derivation

    return again


def _tester_labels(pkgs: Any, attrpaths: list[str]) -> set[str]:
    """The labels ("<attrpath>.tests.<name>") of the testers among the packages' tests."""
    from .lib.attrpath import parse_attrpath, resolve

    found = set()
    for text in attrpaths:
        tests = collect_tests(resolve(pkgs, parse_attrpath(text)))
        found.update(f"{text}.tests.{name}" for name in tests if is_tester(tests, name))
    return found


#: How long a tester's program may run (seconds) before it counts as failed.
TESTER_TIMEOUT = 3600


def _run_tester(label: str, test: Any, drv: Any, offered: frozenset[str], jobs: int, again: Any = None,
                progress: Any = None) -> TestResult:
    """Build a tester, then run its `bin/<meta.mainProgram>` here, outside any build, when this
    machine offers the features it needs; its output goes to a log file whose last lines a failure
    shows. Skipped, saying why, on a machine without them (nothing is built then)."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    from .errors import CudapkgsError
    from .realise.realise import drv_log_path

    needed = tester_features(test)
    lacking = [f for f in needed if f not in offered]
    if lacking:
        return TestResult(label, "skipped", f"a tester: its program runs on a machine offering {' '.join(lacking)} "
                          f"(a GPU); this one offers {' '.join(sorted(offered)) or 'none'}")
    try:
        drv = realise_reachable(drv, jobs, again, progress)
    except CudapkgsError as error:
        return TestResult(label, "failed", str(error))
    meta = test.get("meta") or {}
    program = Path(drv.outputs["out"], "bin", str(meta.get("mainProgram") or test.get("pname") or test.name))
    # Beside the build logs (`cudapkgs log` territory), replaced by each run: <store>/.logs/<drv>.run.log
    log = drv_log_path(drv.store_dir, drv).with_suffix(".run.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    # A new file of our own (O_EXCL through tempfile), renamed over the log when the program is done.
    with tempfile.NamedTemporaryFile(dir=log.parent, prefix=log.name + ".", suffix=".tmp", delete=False) as sink:
        partial = Path(sink.name)
        try:
            status = subprocess.run([str(program)], stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    timeout=TESTER_TIMEOUT, check=False).returncode
        except subprocess.TimeoutExpired:
            os.replace(partial, log)
            return TestResult(label, "failed", f"{program} ran past {TESTER_TIMEOUT} s (log: {log})")
        except OSError as error:
            os.replace(partial, log)
            return TestResult(label, "failed", f"{program} could not run: {error.strerror} (log: {log})")
    os.replace(partial, log)
    with log.open("rb") as source:
        source.seek(max(0, log.stat().st_size - 4096))
        tail = [line for line in source.read().decode(errors="replace").splitlines() if line.strip()]
    if status != 0:
        return TestResult(label, "failed", f"{program} exited with status {status}; last lines: "
                          + " | ".join(tail[-5:]) + f" (log: {log})")
    return TestResult(label, "passed", (tail[-1] if tail else "no output") + f" (log: {log})")


def _collect(pkgs: Any, attrpaths: list[str]) -> list[tuple[str, Any, str | None]]:
    """(label, test package, why it is skipped or None) for every test of the packages at `attrpaths`."""
    from .lib.attrpath import parse_attrpath, resolve
    from .errors import EvalError

    found = []
    for text in attrpaths:
        tests = collect_tests(resolve(pkgs, parse_attrpath(text)))
        if not tests:
            raise EvalError(f"{text} has no tests (passthru.tests)")
        for name, test in tests.items():
            meta = test.get("meta") or {}
            reason = None
            if meta.get("available") is False:
                problems = meta.get("problems") or {}
                reason = "; ".join(p["message"] for p in problems.values()) or "not available here"
            found.append((f"{text}.tests.{name}", test, reason))
    return found


def _run_tests_remotely(pkgs: Any, attrpaths: list[str], builders: Any, offered: frozenset[str] | None) -> list[TestResult]:
    """`run_tests` on a Dask cluster: every runnable test in one plan, built in parallel across workers."""
    from .errors import CudapkgsError, UnfreeLicenseError
    from .realise.dask_executor import run_on_dask
    from .realise.errors import BuildFailed
    from .realise.scheduler import plan
    from .store.store import Store

    if offered is None:
        client = builders.connect()
        try:
            workers = client.scheduler_info().get("workers") or {}
            offered = frozenset(k for w in workers.values() for k, v in (w.get("resources") or {}).items() if v)
        finally:
            client.close()
    results: dict[str, TestResult] = {}
    runnable: list[tuple[str, Any]] = []
    collected = _collect(pkgs, attrpaths)
    testers = _tester_labels(pkgs, attrpaths)
    for label, test, reason in collected:
        cause = None
        if label in testers and reason is None:  # a program to run here, where the user is, not on a worker
            try:
                drv = test.derivation
            except CudapkgsError as error:
                results[label] = TestResult(label, "skipped", str(error).splitlines()[0],
                                            "unfree" if isinstance(error, UnfreeLicenseError) else None)
                continue
            results[label] = _run_tester(label, test, drv, host_system_features(), 1)
            continue
        if reason is None:
            try:
                test.derivation
            except CudapkgsError as error:  # unfree, unavailable or not evaluating: not sent to a worker
                reason = str(error).splitlines()[0]
                cause = "unfree" if isinstance(error, UnfreeLicenseError) else None
        lacking = missing_features(test.derivation, offered) if reason is None else []
        if reason is not None or lacking:
            results[label] = TestResult(label, "skipped", reason or "no worker offers " + " ".join(lacking), cause)
        else:
            runnable.append((label, test.derivation))
    if runnable:
        drvs = [drv for _, drv in runnable]
        with Store.open(drvs[0].store_dir) as store:
            the_plan = plan(store, drvs)
            where: dict[str, str] = {}
            failed: dict[str, BaseException] = {}
            try:
                done = run_on_dask(store, the_plan.to_build, builders)
                where = {path: r.get("worker", "?") for path, r in done.items()}
            except BuildFailed as error:
                failed = getattr(error, "failed", {}) or {"*": error}
            except CudapkgsError as error:
                failed = {"*": error}
            for label, drv in runnable:
                problem = failed.get(drv.drv_path) or failed.get("*")
                if problem is not None:
                    results[label] = TestResult(label, "failed", str(problem).splitlines()[0])
                    continue
                store.add_temp_roots(drv.outputs.values())
                line = _last_line(drv) or drv.outputs["out"]
                worker = where.get(drv.drv_path)
                results[label] = TestResult(label, "passed", f"{line} (on {worker})" if worker else line)
    return [results[label] for label, _, _ in collected]


#: The most of the end of a test's log read for its last line (bytes).
_LOG_TAIL = 64 << 10


def _log_tail(path: Any) -> str:
    """The last `_LOG_TAIL` bytes of the regular file `path` as text. Raises OSError for anything else.

    A test's output may come from an imported archive or a cache, where ``$out/log`` can be an
    absolute link to anywhere (as Nix keeps them): opened without blocking and read only when it is
    a regular file, from its end (before: read whole, so a link to a FIFO hung `cudapkgs test`, and
    one to /dev/zero filled memory)."""
    from .inputs import open_regular

    fd = open_regular(path)  # a FIFO or device is never opened
    try:
        st = os.fstat(fd)
        data = os.pread(fd, _LOG_TAIL, max(0, st.st_size - _LOG_TAIL))
    finally:
        os.close(fd)
    return data.decode(errors="replace")


def _last_line(drv: Any) -> str:
    """The last line a test recorded: its $out/log, else its build log (the last 64 KiB of either)."""
    from pathlib import Path

    from .realise.realise import drv_log_path

    for candidate in (Path(drv.outputs.get("out", ""), "log"), drv_log_path(drv.store_dir, drv)):
        try:
            lines = [line for line in _log_tail(candidate).splitlines() if line.strip() and not line.startswith("@")]
        except OSError:
            continue
        if lines:
            return lines[-1]
    return ""
