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

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any


def gpu_capabilities() -> list[str]:
    """The compute capabilities of this machine's NVIDIA GPUs ("9.0", …), [] without any."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


@functools.cache
def _detected_features() -> frozenset[str]:
    from . import db
    from .flags import get_cuda_system_features

    capabilities = gpu_capabilities()
    if not capabilities:
        return frozenset()
    info = db.cuda_capability_to_info()
    known = [c for c in capabilities if c in info]
    return frozenset({"cuda", *get_cuda_system_features(known, info)})


def host_system_features(env: Mapping[str, str] = os.environ) -> frozenset[str]:
    """What this machine offers builds: $CUDAPKGS_SYSTEM_FEATURES, else what its GPUs give."""
    declared = env.get("CUDAPKGS_SYSTEM_FEATURES")
    if declared is not None:
        return frozenset(declared.split())
    return _detected_features()


def missing_features(drv: Any, offered: frozenset[str] | None = None) -> list[str]:
    """The `requiredSystemFeatures` of a derivation this machine does not offer."""
    required = drv.attrs.get("requiredSystemFeatures") or []
    if not required:
        return []
    offered = host_system_features() if offered is None else offered
    return [f for f in required if f not in offered]


def collect_tests(package: Any, prefix: str = "") -> dict[str, Any]:
    """`passthru.tests` of a package, flattened: {"cuda.run": test package, "run": …}."""
    from .fixpoint import force

    passthru = force(package.get("passthru")) if hasattr(package, "get") else None
    tests = force(passthru.get("tests")) if isinstance(passthru, Mapping) else None
    if tests is None and "tests" in package:
        tests = package["tests"]
    return _flatten(tests or {}, prefix)


def _flatten(tests: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    from .fixpoint import force

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
    """One test's outcome: "passed", "failed" or "skipped", with a one-line detail."""

    __slots__ = ("test", "result", "detail")

    def __init__(self, test: str, result: str, detail: str) -> None:
        self.test, self.result, self.detail = test, result, detail

    def to_json(self) -> dict[str, str]:
        return {"test": self.test, "result": self.result, "detail": self.detail}

    def __repr__(self) -> str:
        return f"TestResult({self.test!r}, {self.result!r})"


def run_tests(pkgs: Any, attrpaths: list[str], *, offered: frozenset[str] | None = None, jobs: int = 1) -> list[TestResult]:
    """Build the tests of each package at `attrpaths`; what the machine cannot run is skipped."""
    from .attrpath import parse_attrpath, resolve
    from .realise.scheduler import plan, run
    from .errors import CudapkgsError, EvalError
    from .store.store import Store

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
            drv = test.derivation
            lacking = missing_features(drv, offered)
            if lacking:
                results.append(TestResult(label, "skipped", "needs " + " ".join(lacking)))
                continue
            try:
                with Store.open(drv.store_dir) as store:
                    run(store, plan(store, [drv]), jobs=jobs)
                    store.add_temp_roots(drv.outputs.values())
            except CudapkgsError as error:
                results.append(TestResult(label, "failed", str(error)))
                continue
            results.append(TestResult(label, "passed", _last_line(drv) or drv.outputs["out"]))
    return results


def _last_line(drv: Any) -> str:
    """The last line a test recorded: its $out/log, else its build log."""
    from pathlib import Path

    from .realise.realise import drv_log_path

    for candidate in (Path(drv.outputs.get("out", ""), "log"), drv_log_path(drv.store_dir, drv)):
        try:
            lines = [line for line in candidate.read_text().splitlines() if line.strip() and not line.startswith("@")]
        except OSError:
            continue
        if lines:
            return lines[-1]
    return ""
