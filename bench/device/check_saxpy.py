"""Check saxpy's dumped result against an independent CPU computation (numpy, else the array module).

usage: python3 check_saxpy.py Y_FILE N [TOLERANCE]

Recomputes saxpy.cu's inputs (x_i = (i mod 1000) * 0.001, y_i = (i mod 777) * 0.5 - 100,
a = 2, all float32) and compares y = a*x + y with the dump: the largest relative
difference |dump - ref| / max(1, |ref|) against a float64 reference must stay under
TOLERANCE (default 1e-6). Prints one JSON line; exit status 1 on failure.
"""

from __future__ import annotations

import json
import sys
from array import array


def reference(n: int):
    try:
        import numpy as np
    except ImportError:
        return None
    i = np.arange(n, dtype=np.int64)
    x = (i % 1000).astype(np.float32) * np.float32(0.001)
    y = (i % 777).astype(np.float32) * np.float32(0.5) - np.float32(100.0)
    return np, 2.0 * x.astype(np.float64) + y.astype(np.float64), (np.float32(2.0) * x + y)


def main() -> int:
    path, n = sys.argv[1], int(sys.argv[2])
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-6
    got = reference(n)
    if got is not None:
        np, ref, ref32 = got
        dump = np.fromfile(path, dtype="<f4")
        if dump.size != n:
            print(json.dumps({"ok": False, "error": f"expected {n} floats, found {dump.size}"}))
            return 1
        rel = np.abs(dump.astype(np.float64) - ref) / np.maximum(1.0, np.abs(ref))
        result = {
            "checker": "numpy " + np.__version__, "n": n, "max_rel_error": float(rel.max()),
            "equal_to_float32_cpu": int((dump == ref32).sum()), "checksum": float(dump.astype(np.float64).sum()),
        }
    else:
        dump = array("f")
        with open(path, "rb") as f:
            dump.frombytes(f.read())
        worst = 0.0
        for i, v in enumerate(dump):
            x = array("f", [(i % 1000) * 0.001])[0]
            y = array("f", [(i % 777) * 0.5 - 100.0])[0]
            ref = 2.0 * x + y
            worst = max(worst, abs(v - ref) / max(1.0, abs(ref)))
        result = {"checker": "array", "n": len(dump), "max_rel_error": worst, "checksum": sum(dump)}
    result["tolerance"] = tolerance
    result["ok"] = result["n"] == n and result["max_rel_error"] <= tolerance
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
