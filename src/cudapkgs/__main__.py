"""``python -m cudapkgs`` and the ``cudapkgs`` command: the evaluation cache's fast path first
(`cudapkgs.evalcache.lookup`, importing almost nothing), else the command line in full."""

import gc
import sys

#: The collector's first threshold from the start of the command (`cli.YOUNG_GC_THRESHOLD`, which
#: `cli.main` sets for the command itself): the modules imported before `cli.main` runs (the fast
#: path's, argparse, the command line's: about 65) are long-lived too, and with Python's 700 they
#: cost five collections (about 1 ms of a cold `eval`, `tests/test_cold_start_imports.py`).
START_GC_THRESHOLD = 100_000


def main() -> int:
    """Run ``cudapkgs`` with ``sys.argv``; returns the exit status.  The collector's thresholds
    are the caller's again when it returns."""
    saved = gc.get_threshold()
    gc.set_threshold(max(saved[0], START_GC_THRESHOLD), *saved[1:])
    try:
        from .evalcache.lookup import answer

        status = answer(sys.argv[1:])
        if status is not None:
            return status
        from .cli import main as cli_main

        return cli_main(eval_cache=True, exiting=True)
    finally:
        gc.set_threshold(*saved)


if __name__ == "__main__":
    sys.exit(main())
