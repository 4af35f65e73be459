"""A `perf record` of one realisation, grouped as docs/bench-wheels.md's profile tables are: by process and library.

Run:  perf record -q -F 499 -o ml.perf -- python -m cudapkgs build ...      (the command profiled)
      perf script -i ml.perf -F comm,pid,tid,ip,sym,dso > ml.script
      python bench/perf_by_process.py ml.script [--hz 499]

The cudapkgs process is the process with more than 100 samples that appears first; a child counts as an
import check when it ran code of torch, numpy, PIL, triton or CUDA libraries (its samples' libraries),
every other ``python*`` child as byte compilation (and the small import checks). In the cudapkgs process,
samples are split by library: ISA-L (inflate), libcrypto (sha256: OpenSSL is only used for it here), the
interpreter, libc, and the kernel by symbol: copies from the page cache to the process (reads), copies
into it and block allocation (writes), the rest (locks, task switches, lookups, page faults). CPU seconds
are samples / Hz: an estimate, as any sampling profile's.
"""

from __future__ import annotations

import argparse
import collections
import re

_LINE = re.compile(r"\s*(\S.*?)\s+(\d+)/(\d+)\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")
_CHECK = re.compile(r"torch|numpy|PIL|/nvidia|cuda|triton|_C\.|libc10")
_READS = re.compile(r"^_copy_to_iter|copy_page_to_iter|filemap_read|filemap_get|folio_mark_accessed|xas_load")
_WRITES = re.compile(r"copy_folio_from_iter|copy_from_iter|generic_perform_write|ext4_da|write_begin|write_end|"
                     r"block_write|block_commit|clear_page|alloc_pages|rmqueue|find_get_block|__pi_memset")


def classify(lines) -> tuple[collections.Counter, int, int]:
    """(samples per category, the cudapkgs process's pid, import-check processes) of `perf script` lines."""
    rows = [(m[1], int(m[2]), m[5], m[6]) for m in map(_LINE.match, lines) if m]
    counts = collections.Counter(p for _, p, _, _ in rows)
    first: dict[int, int] = {}
    for i, (_, pid, _, _) in enumerate(rows):
        first.setdefault(pid, i)
    main = min((p for p in counts if counts[p] > 100), key=first.__getitem__)
    checks = {p for _, p, _, d in rows if p != main and _CHECK.search(d)}
    found: collections.Counter = collections.Counter()
    for comm, pid, sym, dso in rows:
        if pid == main:
            if "isal" in dso:
                key = "cudapkgs: ISA-L inflate"
            elif "libcrypto" in dso:
                key = "cudapkgs: sha256 (OpenSSL)"
            elif "kernel" in dso:
                key = ("cudapkgs: kernel reads (page cache to the process)" if _READS.search(sym) else
                       "cudapkgs: kernel writes (the process to the page cache, block allocation)" if _WRITES.search(sym)
                       else "cudapkgs: kernel, the rest")
            elif "python" in dso:
                key = "cudapkgs: the interpreter"
            elif "libc" in dso:
                key = "cudapkgs: libc"
            else:
                key = f"cudapkgs: other ({dso.rsplit('/', 1)[-1]})"
        elif pid in checks:
            key = "children: import checks (torch, numpy, PIL, triton, CUDA code)"
        elif comm.startswith("python"):
            key = "children: python3 (byte compilation, the small import checks)"
        else:
            key = f"children: other ({comm})"
        found[key] += 1
    return found, main, len(checks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", help="perf script -F comm,pid,tid,ip,sym,dso output")
    parser.add_argument("--hz", type=float, default=499)
    args = parser.parse_args()
    with open(args.script, errors="replace") as lines:
        found, main_pid, checks = classify(lines)
    total = sum(found.values())
    print(f"{total} samples = {total / args.hz:.1f} CPU-s at {args.hz:.0f} Hz; the cudapkgs process {main_pid}, "
          f"{checks} import-check processes\n")
    print("| process: what | CPU-s |\n|---|---:|")
    for key, n in found.most_common():
        if n / args.hz >= 0.05:
            print(f"| {key} | {n / args.hz:.1f} |")


if __name__ == "__main__":
    main()
