"""``python -m cudapkgs`` and the ``cudapkgs`` command: the evaluation cache's fast path first
(`cudapkgs.evalcache.lookup`, importing almost nothing), else the command line in full."""

import sys


def main() -> int:
    """Run ``cudapkgs`` with ``sys.argv``; returns the exit status."""
    from .evalcache.lookup import answer

    status = answer(sys.argv[1:])
    if status is not None:
        return status
    from .cli import main as cli_main

    return cli_main(eval_cache=True, exiting=True)


if __name__ == "__main__":
    sys.exit(main())
