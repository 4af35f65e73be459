"""Print docs/fidelity.md's table of every member of one CUDA set, with its state on this machine's
evaluation: `python tools/fidelity_members.py [cudaPackages_13_0]` (allowUnfree, x86_64-linux).

State: "available" (meta.available), "broken: <first problem line>", "unsupported: …", "no meta"
(a function, a set of attributes or a value), or "error: <first line>" when reading it raises.
"""

from __future__ import annotations

import sys


def rows(set_name: str) -> list[tuple[str, str, str]]:
    """(member, kind, state) for every attribute of `set_name`, sorted by name."""
    import warnings

    import cudapkgs

    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True}, system="x86_64-linux")
    cuda = pkgs[set_name]
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the in-set aliases warn when read (cuda/aliases.py)
        for name in sorted(cuda, key=str.lower):
            found.append(_row(cuda, name))
    return found


def _row(cuda: "object", name: str) -> tuple[str, str, str]:
    """(member, kind, state) of one attribute of `cuda`."""
    from cudapkgs.cuda.members import FROM_SOURCE, HOOKS, OTHER
    from cudapkgs.errors import CudapkgsError

    kind = ("from source" if name in FROM_SOURCE else "hook" if name in HOOKS else
            "member" if name in OTHER else "")
    try:
        value = cuda[name]
        meta = value.get("meta") if hasattr(value, "get") and "drvPath" in value else None
    except CudapkgsError as error:
        return (name, kind or "?", "error: " + str(error).splitlines()[0][:140])
    except Exception as error:  # noqa: BLE001 - a table of states, not a program that can stop
        return (name, kind or "?", f"error: {type(error).__name__}")
    if meta is None:
        return (name, kind or "attribute", "no meta (not a package)")
    kind = kind or ("redistributable" if "redistName" in value else "package")
    if meta.get("available", True):
        state = "available"
    else:
        problems = dict(meta.get("problems") or {})
        first = next(iter(problems.values()), {"kind": "unavailable", "message": "not available here"})
        lines = first["message"].splitlines()
        state = f"{first['kind']}: " + (lines[1].lstrip("- ") if len(lines) > 1 else lines[0])[:140]
    return (name, kind, state)


def main() -> None:
    set_name = sys.argv[1] if len(sys.argv) > 1 else "cudaPackages_13_0"
    print(f"| member of {set_name} | kind | state (x86_64-linux, allowUnfree) |")
    print("| --- | --- | --- |")
    for name, kind, state in rows(set_name):
        print(f"| `{name}` | {kind} | {state.replace('|', '/')} |")


if __name__ == "__main__":
    main()
