"""Project environments: a project's ``cudapkgs.toml`` and its ``cudapkgs.lock``.

``cudapkgs.toml`` (found in the current directory or the nearest parent) says what
the project's shell holds::

    set = "cudaPackages_12_8"          # the CUDA package set: its .pkgs is the top level used
    capabilities = ["9.0"]             # cudaCapabilities (shorthand)
    packages = ["cuda_nvcc", "cuda_cudart", "libcublas", "myapp"]
    files = ["nix/packages.py"]        # the project's own package files (as -f FILE)

    [config]                           # any configuration key (cudapkgs config lists them)
    allowUnfreePredicate = "cuda"
    cudaSupport = true

A package name is looked up in the set first, then in the top level (where the
files' packages are); a dotted attribute path works the same way. Relative paths
(``files``, ``config.overlays``, ``config.storeDir``…) are relative to the file.

The lock (``cudapkgs.lock``: what it pins, and how a lock is compared with this machine) is
`project_lock`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, EvalError, check_printable, did_you_mean, shell_word, shown, toml_string
# The lock moved to its own module; these names still import from here.
from .project_lock import LOCAL_KEYS, LOCK_VERSION, check_lock, lock_data, read_lock, write_lock  # noqa: F401

__all__ = [
    "PROJECT_FILE",
    "LOCK_FILE",
    "Project",
    "find_project",
    "load_project",
    "check_allowed",
    "allow_project",
    "deny_project",
    "describe_project",
    "ProjectEnvironment",
    "evaluate_project",
]

PROJECT_FILE = "cudapkgs.toml"
LOCK_FILE = "cudapkgs.lock"
_KEYS = ("set", "capabilities", "packages", "files", "config")


@dataclass(frozen=True)
class Project:
    """A parsed ``cudapkgs.toml``; paths are absolute."""

    file: Path
    set: str | None = None
    capabilities: tuple[str, ...] | None = None
    packages: tuple[str, ...] = ()
    files: tuple[Path, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    #: Every Python file the project names (``files`` and ``[config] overlays``), as written -> absolute path.
    python_files: Mapping[str, Path] = field(default_factory=dict)
    #: Programs inside the project or the work tree holding it (`controlled_area`) that cudapkgs runs
    #: (``python3Executable``), shown as -> absolute path: hashed and owner-checked with the Python
    #: files, as a git pull could change them too.
    programs: Mapping[str, Path] = field(default_factory=dict)
    #: The file as read (bytes, owner), when it was read from disk.
    source: Any = field(default=None, repr=False, compare=False)

    @property
    def root(self) -> Path:
        return self.file.parent

    @property
    def lock_file(self) -> Path:
        return self.root / LOCK_FILE


def find_project(start: str | os.PathLike[str] | None = None, *, parents: bool = True) -> Path | None:
    """The ``cudapkgs.toml`` in ``start`` (default: the current directory) or, with ``parents``, its nearest parent.

    ``start`` may be the project file itself. Finding a file uses nothing of it:
    `load_project` reads it and `check_allowed` decides whether it may be used.
    """
    here = Path(start or os.getcwd()).absolute()
    if here.is_file() or (start is not None and here.exists() and not here.is_dir()):
        return here  # a FIFO or device named as the project file: load_project refuses it, saying so
    for directory in (here, *here.parents) if parents else (here,):
        candidate = directory / PROJECT_FILE
        # Anything by that name is the project file (issue 30, item 14): a FIFO, a device, a directory
        # or a dangling link there was skipped, and a parent directory's project used instead; now
        # load_project refuses it, naming it.
        if os.path.lexists(candidate):
            return candidate
    return None


#: [config] keys a project may not set: they are the user's own policy about projects and caches.
_USER_ONLY = {
    "safeDirectories": "which directories' projects may be owned by someone else is your decision, not a project's",
}


def load_project(path: str | os.PathLike[str]) -> Project:
    """Read and check a project file; raises `ConfigError` naming the file and key.

    Reading runs nothing and trusts nothing: the file is read once (a regular file, at most
    1 MiB, without blocking), and `check_allowed` decides whether it may be used.

    One real directory serves for everything (issue 30, item 5): the file is taken as
    `trust.project_key` gives it, its directory's links resolved, and every relative path in it
    (``files``, ``overlays``, ``storeDir``, ``python3Executable``, mirrors, ``..`` included) is
    read from that directory, the one the allow is recorded for. Before, ``B/sub -> A/proj``
    found A's allow but took ``python3Executable = "../tools/python"`` from ``B/tools``.

    Its ``[config]`` is validated here as evaluation validates it (`Config.merged`), so
    ``cudapkgs allow`` refuses what evaluation would (``requireSigs = 0``). A directory key
    inside the project (``storeDir``, ``manifestsDir``, ``driverLibDir``, a ``mirror:DIR``
    fetcher, a ``sourceMirrors`` directory) is refused, naming the key: an allow pins the
    project's files, not what such a directory holds (`_refuse_inside`).
    """
    from .config import Config, parse_toml
    from .trust import read_project_file

    source = read_project_file(path)
    file = source.real  # its directory's links resolved: the allow's key and the base of every relative path
    where = shown(file)  # in messages: a directory named with a newline adds no line (errors.shown)
    data = parse_toml(source.data, where)
    for key in data:
        if key not in _KEYS:
            raise ConfigError(f'{where}: unknown key "{shown(key)}"{did_you_mean(key, _KEYS)} (keys: {", ".join(_KEYS)})')

    def strings(key: str) -> tuple[str, ...] | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}: {key}: expected a list of strings")
        for item in value:
            check_printable(item, f"{where}: {key}")
        return tuple(value)

    chosen = data.get("set")
    if chosen is not None and (not isinstance(chosen, str) or not chosen):
        raise ConfigError(f'{where}: set: expected a package set name such as "cudaPackages_12_8"')
    if isinstance(chosen, str):
        check_printable(chosen, f"{where}: set")
    if isinstance(chosen, str) and chosen.replace(".", "").isascii() and chosen.replace(".", "").isdigit():
        chosen = "cudaPackages_" + chosen.replace(".", "_")  # "12.8" is cudaPackages_12_8
    config = data.get("config", {})
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: config: expected a table ([config])")
    for key, why in _USER_ONLY.items():
        if key in config:
            raise ConfigError(f"{where}: config: {key} can be set only in your own configuration ({why})")
    root = file.parent
    config = _absolute_mirrors(config, root)
    # The one validation evaluation uses (issue 30, item 14): before, `allow` took requireSigs = 0.
    resolved = Config().merged(config, source=f"{where}: config", relative_to=os.fspath(root))
    if "requireSigs" in config and resolved.requireSigs is False:
        raise ConfigError(f"{where}: config: requireSigs = false: a project cannot turn signature checks off "
                          "(set it in your own configuration, for caches you fully control)")
    owned = controlled_area(root)
    _refuse_inside(file, config, resolved, owned)
    packages = strings("packages") or ()
    if not packages:
        raise ConfigError(f'{where}: packages: list what the environment holds, e.g. packages = ["cuda_nvcc", "cuda_cudart"]')
    names = strings("files") or ()
    # os.path.realpath, not Path.resolve: a link loop (``loop.py -> loop.py``) made resolve raise
    # RuntimeError, an internal error before the refusal; the looping path is then refused as unreadable.
    files = tuple(Path(os.path.realpath(root / f)) for f in names)
    python = {name: path for name, path in zip(names, files)}
    for entry in config.get("overlays", ()):
        python[entry] = Path(os.path.normpath(root / os.path.expanduser(entry)))
    programs = {}
    program = config.get("python3Executable")
    if program:
        # As config resolves it; inside the project or its repository (as named or once links are
        # followed) it is the project's code: before, `python3Executable = "tools/python"` was run by
        # every evaluation (`--version`) whatever a git pull had made of it since the allow, as was
        # "../tools/python" from a project in a subdirectory of a repository (issue 30, item 5).
        named = Path(resolved.python3Executable)
        if named.is_relative_to(owned) or Path(os.path.realpath(named)).is_relative_to(owned):
            programs[f"python3Executable ({program})"] = named
    return Project(file=file, set=chosen, capabilities=strings("capabilities"), packages=packages, files=files,
                   config=config, python_files=python, programs=programs, source=source)


#: Directory keys a project may not point inside itself, and what such a directory decides.
_INSIDE_REFUSED = {
    "storeDir": "the store, and so the programs on a shell's PATH",
    "manifestsDir": "NVIDIA's manifests, and so what is downloaded and its hashes",
    "driverLibDir": "the driver libraries every CUDA program loads",
    "fetchers": "the archives NVIDIA's packages are unpacked from",
    "sourceMirrors": "the source archives packages are built from",
}


def _local_mirror(entry: str) -> str | None:
    """The directory a ``mirror:`` fetcher's place or a ``sourceMirrors`` entry names, or None for a URL."""
    if entry.startswith("file://"):
        return entry.removeprefix("file://")
    return None if "://" in entry else entry


def _absolute_mirrors(config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """`config` with the local places of ``fetchers`` (``mirror:DIR``), ``sourceMirrors`` and
    ``substituters`` (``file://DIR``) made absolute against the project's directory `root`:
    relative (``vendor``, ``file://vendor``), they were read from the current directory, not from
    the project (issue 30, item 5). Other values are left as they are (to be validated)."""
    result = dict(config)

    def absolute(place: object) -> object:
        if not isinstance(place, str) or not place:
            return place
        local = _local_mirror(place)
        if local is None or not local or os.path.isabs(local):
            return place
        made = os.path.normpath(root / os.path.expanduser(local))
        return made if local == place else "file://" + made

    fetchers = config.get("fetchers")
    if isinstance(fetchers, list):
        result["fetchers"] = ["mirror:" + str(absolute(f.partition(":")[2]))
                              if isinstance(f, str) and f.startswith("mirror:") and f.partition(":")[2] else f
                              for f in fetchers]
    for key in ("sourceMirrors", "substituters"):
        if isinstance(config.get(key), list):
            result[key] = [absolute(m) for m in config[key]]
    return result


#: What marks a version-controlled work tree's top (git, Mercurial, Subversion, Jujutsu, Bazaar).
_REPOSITORY_MARKS = (".git", ".hg", ".svn", ".jj", ".bzr")


def controlled_area(root: Path) -> Path:
    """The directory whose contents a project at the real directory `root` controls: the top of
    the version-controlled work tree holding it (the nearest of `root` and its parents holding
    ``.git``, ``.hg``, ``.svn``, ``.jj`` or ``.bzr``), else `root` itself.

    A ``git pull`` changes the whole work tree, not only the project's directory: with the
    project file in ``repo/proj``, ``python3Executable = "../tools/python"`` names a file the
    repository controls. Only `lstat` calls, one per directory up to ``/``.
    """
    for directory in (root, *root.parents):
        if any(os.path.lexists(directory / mark) for mark in _REPOSITORY_MARKS):
            return directory
    return root


def _refuse_inside(file: Path, config: Mapping[str, Any], resolved: Any, owned: Path) -> None:
    """Raise `ConfigError` when a directory key of the project's [config] lies inside `owned`
    (`controlled_area`: the project's directory, or the work tree holding it).

    An allow pins the project file and the Python files it names, not what a directory holds:
    with ``storeDir = ".store"`` allowed, a later ``git pull`` changed what ``cudapkgs shell`` ran
    with no new allow (issue 30, item 8). Such a directory is refused, as named or once its links
    are followed, whether it exists or not; outside, or in the user's own configuration, it is
    the user's.
    """
    area = os.path.realpath(owned)
    where = "the project" if Path(area) == file.parent else f"the repository holding the project ({area})"

    def inside(directory: str) -> bool:
        named = os.path.normpath(directory)
        return any(p == area or p.startswith(area.rstrip(os.sep) + os.sep)
                   for p in (named, os.path.realpath(named)))

    for key, what in _INSIDE_REFUSED.items():
        if key not in config:
            continue
        value = resolved[key]
        places = value if isinstance(value, list) else [value]
        if key == "fetchers":
            places = [f.partition(":")[2] for f in places if f.startswith("mirror:")]
        for place in places:
            local = _local_mirror(place) if key in ("fetchers", "sourceMirrors") else place
            if local and inside(local):
                raise ConfigError(
                    f"{shown(file)}: config: {key}: {shown(local)} is inside {shown(where)}, and `cudapkgs allow` does not "
                    f"cover what a directory there holds ({what}; a git pull could change it with no new allow): "
                    f"name a directory outside {area}, or set {key} in your own configuration")


# --- trust: nothing of a project file takes effect until its user allows it (see `trust`) ---


def _found_where(project: Project) -> str:
    """" (found in DIR, a parent of the current directory)" when it was, else ""."""
    try:
        here = Path.cwd()
    except OSError:
        return ""
    if project.root != here and here.is_relative_to(project.root):
        return f" (found in {project.root}, a parent of the current directory)"
    return ""


def describe_project(project: Project) -> list[str]:
    """What a project file would do once allowed, one line each (for the refusal message)."""
    from .config import Config

    lines = []
    if project.python_files:
        lines.append("run the Python files " + ", ".join(project.python_files) + " (as you, with your rights)")
    try:
        resolved = Config().merged(project.config, source=str(project.file), relative_to=os.fspath(project.root))
        shown = {k: resolved[k] for k in project.config}
    except ConfigError:
        shown = dict(project.config)
    what = {
        "storeDir": "put the store at {}",
        "substituters": "substitute binaries from {}",
        "trustedPublicKeys": "trust the keys {} for its substituters",
        "fetchers": "fetch sources through {}",
        "sourceMirrors": "fetch sources from the mirrors {}",
        "manifestsDir": "read NVIDIA's manifests from {}",
        "python3Executable": "run {} as the host Python",
        "driverLibDir": "look for the driver in {}",
    }
    from .errors import shown_cache_url  # a committed https://ci:token@… is shown as https://ci:***@…

    for key, template in what.items():
        if key in shown:
            value = shown[key]
            lines.append(template.format(", ".join(shown_cache_url(str(v)) for v in value)
                                         if isinstance(value, (list, tuple)) else shown_cache_url(str(value))))
    rest = [k for k in project.config if k not in what and k != "overlays"]
    if rest:
        lines.append("set " + ", ".join(rest))
    lines.append("provide the packages " + ", ".join(project.packages))
    return lines


def _refusal(project: Project, reason: str, allow: bool = True) -> str:
    # Each line shown on its own (`shown`): no value can add a line or a terminal sequence (issue 30, item 7).
    lines = [f"{project.file}{_found_where(project)}: {reason}", "once allowed, it would:"]
    lines += [f"  {line}" for line in describe_project(project)]
    if allow:
        lines.append(f"read it and the files it names, then run: cudapkgs allow {shell_word(project.file)}")
    return "\n".join(shown(line) for line in lines)


def _ownership(project: Project, safe_directories: Sequence[str]) -> None:
    from .trust import UntrustedProjectError, ownership_problem

    uid = project.source.uid if project.source is not None else None
    named = [*project.python_files.values(), *project.programs.values()]
    checked = [(project.file, uid), *((path, None) for path in named if os.path.exists(path))]
    for path, owner in checked:
        problem = ownership_problem(path, owner, safe_directories=safe_directories)
        if problem is None:
            continue
        directory = Path(os.path.realpath(path)).parent  # what safeDirectories is compared with
        raise UntrustedProjectError(_refusal(
            project,
            f"refusing a project file that someone else controls: {problem}. Anyone who can change it, or "
            "the files it names, could run code as you. If you trust that directory, add it to "
            f"safeDirectories in your configuration (safeDirectories = [{toml_string(directory)}]), then run: "
            f"cudapkgs allow {shell_word(project.file)}",
            allow=False,
        ))


def _contents(project: Project) -> Any:
    from .trust import contents_of, read_project_file

    source = project.source if project.source is not None else read_project_file(project.file)
    return contents_of(source.data, {**project.python_files, **project.programs})


def check_allowed(project: Project, *, safe_directories: Sequence[str] = ()) -> None:
    """Raise `UntrustedProjectError` unless `project` may be used: owned by this user (or root, or
    in one of `safe_directories`), and allowed with exactly these contents (`allow_project`).

    The message names the file (and that it was found in a parent directory), why it is
    refused, what it would do, and the `cudapkgs allow` command to run.
    """
    from .trust import UntrustedProjectError, allowed_record, changed_since, project_key

    _ownership(project, safe_directories)
    real = project.source.real if project.source is not None else project_key(project.file)
    record = allowed_record(real)
    if record is None:
        # Refused before anything is hashed (issue 30, item 9): a 64 GiB file named thrice was read
        # three times first, and a direnv hook waited. One stat each says whether it could be allowed.
        from .trust import regular_file_problem

        named = {**project.python_files, **project.programs}
        problem = next(filter(None, (regular_file_problem(p) for p in dict.fromkeys(named.values()))), None)
        if problem is not None:
            raise UntrustedProjectError(_refusal(
                project, f"not allowed, and it cannot be until it can be read: {problem}", allow=False))
        raise UntrustedProjectError(_refusal(
            project, "not allowed: a project file can run code and choose where binaries come from, so "
            "cudapkgs uses one only once you allow its exact contents"))
    try:
        contents = _contents(project)
    except ConfigError as error:
        raise UntrustedProjectError(_refusal(project, f"not allowed, and it cannot be until it can be read: {error}",
                                             allow=False)) from None
    if record["digest"] != contents.digest:
        changed = ", ".join(changed_since(record, contents.project, contents.files)) or "its contents"
        raise UntrustedProjectError(_refusal(project, f"changed since you allowed it ({changed})"))
    # The bytes run are the bytes allowed: each Python file is pinned to its allowed digest, and
    # `load_module` refuses other contents there (a write between this check and the import).
    from .user_files import allow_only, guard_project_imports

    for name, path in project.python_files.items():
        allow_only(path, contents.files[name], allow_command=f"cudapkgs allow {shell_word(project.file)}")
    # A module its files import from the work tree runs only when it is one of them, from those bytes.
    guard_project_imports(controlled_area(project.root), project.file)


def allow_project(project: Project, *, safe_directories: Sequence[str] = ()) -> Path:
    """Allow `project` with its present contents (the project file and every Python file it
    names); returns the record written. Raises `UntrustedProjectError` when it is owned by
    someone else (see `check_allowed`), `ConfigError` when a file it names cannot be read."""
    from .trust import project_key, record_allowed

    _ownership(project, safe_directories)
    real = project.source.real if project.source is not None else project_key(project.file)
    return record_allowed(real, _contents(project))


def deny_project(path: str | os.PathLike[str]) -> bool:
    """Forget that the project file at `path` was allowed; False when it was not allowed."""
    from .trust import forget_allowed, project_key

    return forget_allowed(project_key(path))


@dataclass
class ProjectEnvironment:
    """A project evaluated here: its configuration, top level and packages (label -> package).

    ``config.substituters`` are the user's substituters, then the project's;
    ``config.trustedPublicKeys`` the user's keys only: the project's `project_keys` are
    trusted for its own `project_substituters` alone (`substituters_of`).
    """

    project: Project
    config: Any
    pkgs: Any  # the top level the packages come from (the set's .pkgs when `set` is given)
    packages: dict[str, Any]
    project_substituters: tuple[str, ...] = ()
    project_keys: tuple[str, ...] = ()

    def substituters_of(self, **options: Any) -> Any:
        """The `Substituters` of this environment (None when there are none): the user's caches
        with the user's keys, then the project's, where the project's keys are trusted too.
        ``options`` go to `Substituters` (``warn``)."""
        if not self.config.substituters:
            return None
        from .store.caches.substitution import Substituters

        return Substituters.from_config(self.config, scoped_keys={u: self.project_keys for u in self.project_substituters},
                                        **options)


def evaluate_project(project: Project, *, config_file: str | None = None, sets: Sequence[str] = (),
                     system: str | None = None, assume_allowed: bool = False) -> ProjectEnvironment:
    """Evaluate the project's packages (nothing is built). ``sets`` (--set) override the project's config.

    First `check_allowed` (raising `UntrustedProjectError`) unless ``assume_allowed``: no
    Python file of the project is imported, and nothing of its [config] used, before.
    The project's ``substituters`` and ``trustedPublicKeys`` are added to the user's (Nix's
    ``extra-substituters``), never replacing them, and its keys count only for its own
    substituters (see `ProjectEnvironment`).
    """
    from .lib.attrpath import parse_attrpath, resolve
    from .config import load_config, parse_set
    from .top_level import import_pkgs

    config = load_config(file=config_file)
    if not assume_allowed:
        check_allowed(project, safe_directories=config.safeDirectories)
    layered = dict(project.config)
    if project.capabilities is not None:
        layered["cudaCapabilities"] = list(project.capabilities)
    own_urls = tuple(layered.pop("substituters", ()) or ())
    own_keys = tuple(layered.pop("trustedPublicKeys", ()) or ())
    # Validated like any key (a bad URL or key names the project file), then added to the user's.
    checked = config.merged({"substituters": list(own_urls), "trustedPublicKeys": list(own_keys)},
                            source=str(project.file))
    config = config.merged(layered, source=str(project.file), relative_to=os.fspath(project.root))
    # The project's own substituters are those the user did not configure: a project listing the
    # user's cache (the same URL, or another spelling of the same cache) made the user's cache trust
    # the project's key (issue 30, item 6). Such an entry stays the user's, with the user's keys only.
    from .store.caches import cache_identity

    users = {cache_identity(url) for url in config.substituters}
    own = [url for url in checked.substituters if cache_identity(url) not in users]
    config = config.merged({"substituters": list(dict.fromkeys([*config.substituters, *own]))},
                           source=str(project.file))
    for assignment in sets:
        key, value = parse_set(assignment)
        config = config.merged({key: value}, source="--set")
        if key == "substituters":  # named on the command line: the user's, whatever the project says
            users |= {cache_identity(url) for url in config.substituters}
            own = [url for url in own if cache_identity(url) not in users]
    overlays = []
    if project.files:
        from .user_files import package_file_overlay

        overlays.append(package_file_overlay(project.files, required=False))  # helpers its files import too
    top = import_pkgs(config, system, overlays=overlays)
    pkgs = top
    scope = None
    if project.set is not None:
        if project.set not in top:
            names = [n for n in top if n.startswith("cudaPackages")]
            raise EvalError(f"{project.file}: set: no package set {project.set!r}{did_you_mean(project.set, names)}")
        scope = top[project.set]
        pkgs = scope.pkgs
    else:
        scope = top.cudaPackages
    packages: dict[str, Any] = {}
    from .errors import UsageError

    for text in project.packages:
        try:
            path = parse_attrpath(text)
            where = scope if path[0] in scope else pkgs
            packages[text] = resolve(where, path)
        except (EvalError, UsageError) as error:
            raise EvalError(f"{project.file}: packages: {text}: {error}") from None
    return ProjectEnvironment(project, pkgs.config, pkgs, packages, tuple(dict.fromkeys(own)),
                              tuple(checked.trustedPublicKeys))
