"""Derivations in an evaluation cache entry: a build that had work to do skips evaluation next time.

Nix's evaluation cache keeps attribute → ``drvPath`` and Nix reads the ``.drv`` back; this keeps
the derivations themselves, as data (the JSON `cudapkgs show-derivation` prints, per derivation
of each argument's closure, dependencies first), in the ``D`` field of the command's entry
(`cudapkgs.evalcache.entry`).  The entry's key and recorded inputs are those of the evaluation
(the recorder is paused once the evaluation is over, `cudapkgs.cli.build.realise_and_link`), so
the same command with every input unchanged builds these derivations without evaluating.

Nothing is unpickled and no code named by the file runs unchecked:

* every derivation goes through `Derivation.from_json`, which type-checks each field and
  recomputes its output and ``.drv`` paths from its contents (a derivation edited in the file
  no longer matches its paths and is refused);
* its unhashed build context is kept only when it is plain data (strings, numbers, booleans,
  None, lists of them: fetchers, source mirrors, local source and patch paths, the slow-build
  hint);
* a Python build step (stdenv/generic.py's ``{"python": "module:qualname", "source": …}``) is
  kept only as its qualified name, and only when it names a module-level function of a
  module of `STEP_PREFIXES` (cudapkgs' builders, hooks, package definitions) that resolves to
  the very function evaluation used (no ``<locals>``, no lambda, no function of a package
  file); read back, the module is imported only if its name has one of those prefixes (the
  installed code the user runs anyway), the name resolved attribute by attribute, and the
  function's own ``module:qualname`` must be that name and its record (`python_step`, with its
  source) equal the hashed one in the derivation: else the entry is not used;
* input derivations are named by index, each below its own, so the graph has no cycle.

Anything else (a context holding a callable that is not such a step, any other object) keeps
no derivations; reading, any doubt raises `ValueError` and the command evaluates in full.
"""

from __future__ import annotations

import json
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..derivation import Derivation

FORMAT = 1
#: The only modules a cached Python step may name: cudapkgs' own builders, hooks and package
#: definitions (where build steps are written), the code the user runs anyway.
STEP_PREFIXES = ("cudapkgs.builders.", "cudapkgs.hooks.", "cudapkgs.pkgs.")


class NotKept(Exception):
    """The derivations cannot be kept as data (the message says why)."""


def _plain(value: Any, depth: int = 0) -> bool:
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if type(value) is list and depth < 2:
        return all(_plain(item, depth + 1) for item in value)
    return False


def step_name(fn: Any) -> str:
    """``module:qualname`` of a Python build step that can be imported back by that name; raises
    `NotKept` for a lambda, a nested function, a function outside ``cudapkgs.`` or one that the
    name does not resolve to (rebound, wrapped)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or not module.startswith(STEP_PREFIXES) \
            or "<" in qualname:
        raise NotKept(f"a Python step that cannot be imported by name ({module}:{qualname})")
    target: Any = sys.modules.get(module)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if target is not fn:
        raise NotKept(f"{module}:{qualname} does not name the step evaluation used")
    return f"{module}:{qualname}"


def encode_plan(store_dir: str, roots: list[tuple[str, Derivation]], fetchers: list[str],
                output: list[tuple[str, str]] = ()) -> str:
    """The ``D`` payload (JSON text) of a build of ``roots`` (label, derivation) for the store at
    ``store_dir``, evaluated with the config's ``fetchers``, the evaluation having printed
    ``output`` ((``"1"`` stdout or ``"2"`` stderr, text) in order: its warnings, written again when
    the derivations are used).  Raises `NotKept` when a derivation's unhashed context is not data
    and Python steps importable by name."""
    index: dict[str, int] = {}
    drvs: list[dict[str, Any]] = []
    for _label, root in roots:
        for drv in root.closure():
            if drv.drv_path in index:
                continue
            context: dict[str, Any] = {}
            for key, value in drv.context.items():
                if key == "python":
                    if not isinstance(value, dict):
                        raise NotKept(f"{drv.name}: a context's Python steps are not a mapping")
                    context["python"] = {str(step): step_name(fn) for step, fn in value.items()}
                elif _plain(value):
                    context[key] = value
                else:
                    raise NotKept(f"{drv.name}: its build context holds {type(value).__name__} ({key})")
            drvs.append({"drv": drv.to_json(), "deps": [index[d.drv_path] for d in drv.deps], "context": context})
            index[drv.drv_path] = len(drvs) - 1
    if not all(isinstance(f, str) for f in fetchers):
        raise NotKept("fetchers that are not names")
    return json.dumps({"format": FORMAT, "store": store_dir, "fetchers": list(fetchers), "drvs": drvs,
                       "output": [[tag, text] for tag, text in output],
                       "roots": [[label, index[drv.drv_path]] for label, drv in roots]}, separators=(",", ":"))


def decode_plan(text: str) -> tuple[str, list[tuple[str, Derivation]], list[str], list[tuple[str, str]]]:
    """The store directory, the (label, derivation) roots, the fetchers and the evaluation's output
    of a ``D`` payload, every derivation checked against its paths and every Python step against
    its hashed source.  Raises ValueError (`EvalError` and import failures included) on any doubt."""
    from ..derivation import Derivation
    from ..errors import CudapkgsError

    data = json.loads(text)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("derivations of another format")
    store_dir, fetchers, records, roots = data["store"], data["fetchers"], data["drvs"], data["roots"]
    output = data["output"]
    if not isinstance(output, list) or not all(
            isinstance(item, list) and len(item) == 2 and item[0] in ("1", "2") and isinstance(item[1], str)
            for item in output):
        raise ValueError("derivations malformed: output")
    if not isinstance(store_dir, str) or not os.path.isabs(store_dir) or not isinstance(records, list) \
            or not isinstance(roots, list) or not isinstance(fetchers, list) or not all(isinstance(f, str) for f in fetchers):
        raise ValueError("derivations malformed")
    built: list[Derivation] = []
    for position, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("context"), dict) \
                or not isinstance(record.get("deps"), list):
            raise ValueError("derivations malformed")
        deps = record["deps"]
        if not all(type(i) is int and 0 <= i < position for i in deps):  # earlier ones only: no cycle
            raise ValueError("derivations malformed: input derivations out of order")
        context = dict(record["context"])
        for key, value in context.items():
            if key != "python" and not _plain(value):
                raise ValueError(f"derivations malformed: context {key}")
        try:
            drv = Derivation.from_json(record["drv"], source="evaluation cache entry", store_dir=store_dir,
                                       context=context)
        except CudapkgsError as error:
            raise ValueError(str(error)) from None
        if "python" in context:
            context["python"] = _steps(drv, context["python"])
            drv.context = context
        drv.deps = tuple(built[i] for i in deps)
        built.append(drv)
    out = []
    for root in roots:
        if not (isinstance(root, list) and len(root) == 2 and isinstance(root[0], str) and type(root[1]) is int
                and 0 <= root[1] < len(built)):
            raise ValueError("derivations malformed: roots")
        out.append((root[0], built[root[1]]))
    return store_dir, out, fetchers, [(tag, text) for tag, text in output]


def _steps(drv: Derivation, names: Any) -> dict[str, Any]:
    """The Python steps of ``drv`` imported back by name, each checked against its hashed record."""
    import importlib

    from ..errors import CudapkgsError
    from ..stdenv.generic import python_step

    if not isinstance(names, dict):
        raise ValueError("derivations malformed: Python steps")
    steps = {}
    for key, name in names.items():
        module, sep, qualname = name.partition(":") if isinstance(name, str) else ("", "", "")
        if not sep or not module.startswith(STEP_PREFIXES) or not qualname or "<" in qualname \
                or not all(part.isidentifier() for part in (*module.split("."), *qualname.split("."))):
            raise ValueError(f"a Python step named {name!r} is not a cudapkgs function")
        try:
            target: Any = importlib.import_module(module)
            for part in qualname.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"{name}: {error}") from None
        try:
            # Its own name must be the one given (a function defined there, not one the module
            # imported: `cudapkgs.builders.python_install:subprocess.run` is subprocess's), and its
            # record the one the derivation's hash covers.
            record = python_step(target) if callable(target) else None
            same = record is not None and record.get("python") == name and drv.attrs.get(key) == record
        except CudapkgsError as error:  # no readable source
            raise ValueError(str(error)) from None
        if not same:
            raise ValueError(f"{name} is not the step {drv.name}.{key} was evaluated with")
        steps[key] = target
    return steps
