"""Recording one command for the evaluation cache: what it read, what it printed; then the entry.

While a `Recorder` is active, every file the process opens for reading (the ``open`` audit
event: `open`, `io.open_code` of imports, `os.open`), every path it stats, tests for access
or reads a link of (`os.stat`, `os.lstat`, `os.access`, `os.readlink`, wrapped for the
duration; `os.path.exists`, `pathlib` and `shutil.which` go through them) and every
directory it lists (``os.listdir``/``os.scandir`` events) is noted with its identity at that
moment (`cudapkgs.evalcache.entry.identity`, or absent).  At the end the files of every
imported module, the interpreter and the `sys.path` directories are added.

Anything whose inputs cannot be seen refuses the entry: a process started (``subprocess``,
``os.exec*``, ``os.posix_spawn``, ``os.system``, a fork), a socket, an SQLite database
opened, a library loaded with `ctypes`, the working directory changed, a file read under
``/proc``, ``/sys`` or ``/dev``, a path given relative to a directory descriptor (`os.open`
is wrapped too: its audit event names the path, not the directory), a
stat refused (permission), the binary streams or file descriptors of stdout/stderr
used directly, standard input read.  So does a non-zero exit status, an input whose identity
differs at the end from when it was read (changed meanwhile), and an input changed less than
`RACY_NS` before it was read (a second change within one tick of the file system's clock
would not change its identity; git calls such files racily clean).  The remembered host probes
(`cudapkgs.host.probes`) come in as what they are: reads of ``probes.json`` and stats of
the probed tools; a probe that actually runs starts a process, and so is not kept.

The entry is written atomically (a temporary file in the cache directory, then
`os.replace`), at most `MAX_BYTES`; the directory keeps at most `MAX_ENTRIES`, the least
recently written removed first.  Failing to write is silent: the cache is never required.
"""

from __future__ import annotations

import os
import sys
import time

from .entry import (DEBUG_ENV, IMPORTED_NS, LOOKED_UP, MAX_BYTES, MAX_ENTRIES, cache_dir, encode, entry_name, identity, is_whole,
                    key_of, note_lookups, stat_identity)

RACY_NS = 200_000_000  # inputs changed this shortly before they were read are not trusted to show their next change
_COARSE_RACY_NS = 2_000_000_000  # on a file system keeping whole seconds
_REFUSING_EVENTS = {
    "subprocess.Popen": "started a process", "os.system": "started a process", "os.exec": "started a process",
    "os.posix_spawn": "started a process", "os.spawn": "started a process", "os.fork": "forked",
    "socket.connect": "opened a socket", "socket.getaddrinfo": "looked up a host", "socket.bind": "opened a socket",
    "sqlite3.connect": "opened a database", "ctypes.dlopen": "loaded a library", "os.chdir": "changed directory",
    "os.fchdir": "changed directory",
}  # fmt: skip
_PSEUDO = ("/proc/", "/sys/", "/dev/")

#: The recorder of this process's command, while one is active.
current: Recorder | None = None
_hooked: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    recorder = current
    if recorder is None or not recorder.active:
        return
    if event == "open":
        recorder._opened(*args[:3])
    elif event == "os.listdir" or event == "os.scandir":
        path = args[0]
        if _importing_from_working_directory(path):
            return  # the `sys.path` check of the working directory covers what imports look for there
        recorder._saw(path if path is not None else ".", True)
    elif event in _REFUSING_EVENTS:
        recorder.refuse(_REFUSING_EVENTS[event])


def _importing_from_working_directory(path: object) -> bool:
    """Whether this listing is the import system's look at the working directory (``python -m``
    puts it first on `sys.path`): its changes are judged by `cudapkgs.evalcache.lookup._shadowing`."""
    caller = sys._getframe(2)  # 0: this function, 1: the audit hook, 2: who listed
    if caller.f_code.co_filename != "<frozen importlib._bootstrap_external>":
        return False
    try:
        return isinstance(path, str) and os.path.abspath(path) == os.getcwd()
    except OSError:
        return False


class _Tee:
    """Stands in for sys.stdout/sys.stderr: text written is passed on and kept, in order."""

    def __init__(self, stream: object, tag: str, recorder: Recorder) -> None:
        self._stream = stream
        self._tag = tag
        self._recorder = recorder

    def write(self, text: str) -> int:
        if self._recorder.capturing:
            self._recorder.output.append((self._tag, str(text)))
        try:
            return self._stream.write(text)  # type: ignore[attr-defined]
        except BaseException:  # a closed pipe: the command stops short of what it would print (and exits 0)
            self._recorder.refuse("could not write its output")
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()  # type: ignore[attr-defined]
        except BaseException:
            self._recorder.refuse("could not write its output")
            raise

    def writelines(self, lines: object) -> None:
        for line in lines:  # type: ignore[attr-defined]
            self.write(line)

    def __getattr__(self, name: str) -> object:
        if name in ("buffer", "fileno", "detach", "raw"):  # bytes past the text would not be kept
            self._recorder.refuse(f"used {name} of a standard stream")
        return getattr(self._stream, name)


class _NoInput:
    """Stands in for sys.stdin: what is read from it is an input the entry cannot hold, so any use refuses it."""

    def __init__(self, stream: object, recorder: Recorder) -> None:
        self._stream = stream
        self._recorder = recorder

    def __getattr__(self, name: str) -> object:
        if name not in ("isatty", "encoding", "errors", "closed", "name", "mode"):
            self._recorder.refuse("read standard input")
        return getattr(self._stream, name)

    def __iter__(self) -> object:
        self._recorder.refuse("read standard input")
        return iter(self._stream)  # type: ignore[call-overload]


class Recorder:
    """One command's inputs and output, for the entry of ``argv``'s key."""

    def __init__(self, argv: list[str]) -> None:
        self.key = key_of(argv)
        self.directory = cache_dir()
        self.seen: dict[tuple[str, bool], str] = {}  # (absolute path, follow links) -> identity when first seen
        self.seen_at: dict[tuple[str, bool], int] = {}  # -> when (time.time_ns()); absent: at the start
        # Files read before the recorder started (the modules of the start-up, `sys.path`
        # directories listed by the import system) were read after this moment: the import of the
        # fast path's first module, not the recorder's start (importing the command line can take
        # longer than the margin of `_why_not`'s check on a loaded machine).
        self.started_ns = min(time.time_ns(), IMPORTED_NS)
        self.output: list[tuple[str, str]] = []
        self.refused = "" if self.directory is not None else "no cache directory"
        self.active = False
        self.capturing = False
        self.store: tuple[str, str, str] | None = None
        self.valid: list[str] = []
        self.links: list[tuple[str, str, str]] = []
        self._saved: dict[str, object] = {}
        self.paused = False
        self.derivations: str | None = None  # the ``D`` payload of a derivations entry being written
        self.top_level: set[str] = set()  # module names of the evaluation whose inputs were taken over
        self.taken_over = False  # the derivations came from the entry (`take_over`), not an evaluation

    # -- watching --------------------------------------------------------------------------

    def start(self) -> Recorder:
        """Begin watching and capturing (once per process: the audit hook stays, idle afterwards)."""
        global current
        current = self
        note_lookups()
        if not _hooked:
            sys.addaudithook(_audit)
            _hooked.append(True)
        self._saved = {"stat": os.stat, "lstat": os.lstat, "access": os.access, "readlink": os.readlink,
                       "open": os.open, "write": os.write, "writev": os.writev, "stdout": sys.stdout, "stderr": sys.stderr}
        real_stat, real_lstat, real_access, real_readlink = os.stat, os.lstat, os.access, os.readlink
        recorder = self

        def watched_stat(path, *, dir_fd=None, follow_symlinks=True):  # type: ignore[no-untyped-def]
            if recorder.active and not isinstance(path, int):
                if dir_fd is not None:
                    recorder.refuse("stat relative to a directory descriptor")
                else:
                    return recorder._stat(path, follow_symlinks)
            return real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

        def watched_lstat(path, *, dir_fd=None):  # type: ignore[no-untyped-def]
            return watched_stat(path, dir_fd=dir_fd, follow_symlinks=False)

        def watched_access(path, mode, *, dir_fd=None, effective_ids=False, follow_symlinks=True):  # type: ignore[no-untyped-def]
            if recorder.active and not isinstance(path, int):
                recorder._saw(path, follow_symlinks, False) if dir_fd is None else recorder.refuse("access relative to a descriptor")
            return real_access(path, mode, dir_fd=dir_fd, effective_ids=effective_ids, follow_symlinks=follow_symlinks)

        def watched_readlink(path, *, dir_fd=None):  # type: ignore[no-untyped-def]
            if recorder.active and not isinstance(path, int):
                recorder._saw(path, False, False) if dir_fd is None else recorder.refuse("readlink relative to a descriptor")
            return real_readlink(path, dir_fd=dir_fd)

        real_open = os.open

        def watched_open(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
            if recorder.active and dir_fd is not None:  # the audit event names the path, not the directory
                recorder.refuse("open relative to a directory descriptor")
            return real_open(path, flags, mode, dir_fd=dir_fd)

        real_write, real_writev = os.write, os.writev

        def watched_write(fd, data):  # type: ignore[no-untyped-def]
            if recorder.capturing and fd in (1, 2):  # output past the text streams: not in the entry
                recorder.refuse("wrote to a standard stream's descriptor")
            return real_write(fd, data)

        def watched_writev(fd, buffers):  # type: ignore[no-untyped-def]
            if recorder.capturing and fd in (1, 2):
                recorder.refuse("wrote to a standard stream's descriptor")
            return real_writev(fd, buffers)

        os.stat, os.lstat, os.access, os.readlink = watched_stat, watched_lstat, watched_access, watched_readlink
        os.open, os.write, os.writev = watched_open, watched_write, watched_writev
        # As the functions they stand for: shutil (copystat, copytree with symlinks) asks these sets,
        # and treats a function missing from them as unable to act on a link (a no-op returning None).
        self._supports = [(group, watched) for group, real, watched in (
            (os.supports_follow_symlinks, real_stat, watched_stat), (os.supports_follow_symlinks, real_access, watched_access),
            (os.supports_dir_fd, real_stat, watched_stat), (os.supports_dir_fd, real_lstat, watched_lstat),
            (os.supports_dir_fd, real_access, watched_access), (os.supports_dir_fd, real_readlink, watched_readlink),
            (os.supports_effective_ids, real_access, watched_access), (os.supports_dir_fd, real_open, watched_open))
            if real in group]
        for group, watched in self._supports:
            group.add(watched)
        self._saved["stdin"] = sys.stdin
        sys.stdin = _NoInput(sys.stdin, self)  # type: ignore[assignment]
        sys.stdout = _Tee(sys.stdout, "1", self)  # type: ignore[assignment]
        sys.stderr = _Tee(sys.stderr, "2", self)  # type: ignore[assignment]
        self.active = self.capturing = True
        return self

    def pause(self) -> None:
        """Stop noting inputs (what follows is no evaluation: the store is opened); output is still kept."""
        self.active = False
        self.paused = True
        self.evaluation_output = list(self.output)  # what the evaluation printed (warnings): kept with derivations

    def refuse(self, why: str) -> None:
        """Keep no entry for this command, for the reason ``why``."""
        if not self.refused:
            self.refused = why

    def no_op_build(self, store_dir: str, db_file: str, schema: int, outputs: list[str],
                    links: list[tuple[str, str, str]]) -> None:
        """The build had nothing to do: a later identical command may answer from the entry once
        ``outputs`` are still valid in the store at ``store_dir`` (database ``db_file``, its schema
        version still ``schema``) and each (link, target, GC root entry) of ``links`` still points
        where it does."""
        self.store = (store_dir, db_file, str(schema))
        self.valid = list(dict.fromkeys(outputs))
        self.links = list(links)

    def note_derivations(self, store_dir: str, roots: list, fetchers: list[str]) -> None:
        """The evaluation is over: the entry will hold the derivations of ``roots`` ((label,
        `Derivation`) pairs; `cudapkgs.evalcache.derivations`) for the store at ``store_dir``,
        evaluated with the config's ``fetchers``, so that the same command, with every input of
        the evaluation unchanged and its outputs gone, builds them without evaluating.  Nothing is
        noted when they are not data (debug mode says why); derivations taken over from the entry
        (`take_over`) are kept as they were."""
        from .derivations import NotKept, encode_plan

        if self.derivations is not None:
            return
        try:
            self.derivations = encode_plan(store_dir, roots, fetchers, getattr(self, "evaluation_output", []))
        except NotKept as error:
            if os.environ.get(DEBUG_ENV):
                print(f"cudapkgs: eval cache: no derivations kept ({error})", file=sys.stderr)

    def keep_derivations(self) -> None:
        """The build has work to do: write an entry holding the noted derivations (no output, no
        store: the fast path never answers it), keyed and checked by what the evaluation read.
        Keeps none (debug mode says why) when something refused the entry, none were noted, or
        they came from the entry already.  Call while paused, before `abandon`."""
        why = ""
        if self.derivations is None:
            why = "none noted"
        elif self.taken_over:
            why = "they came from the entry"
        elif not self.paused:
            why = "not paused after the evaluation"
        if not why:
            why = self._why_not(0, needs_store=False)
        if not why:
            try:
                self._write(with_output=False)
            except (OSError, ValueError) as error:
                why = f"cannot write: {error}"
        if os.environ.get(DEBUG_ENV):
            print(f"cudapkgs: eval cache: {'stored derivations' if not why else f'derivations not stored ({why})'}",
                  file=sys.stderr)

    def take_over(self, fields: list[tuple[str, str]], derivations: str) -> None:
        """This command's derivations came from an entry (`lookup.derivations`) instead of an
        evaluation: what that evaluation read (its ``s``/``l`` fields, its module names) becomes
        what this command read, and its ``derivations`` (the ``D`` payload) what it evaluated, so
        that a build with nothing left to do keeps a no-op entry holding them again."""
        for tag, payload in fields:
            if tag == "s" or tag == "l":
                path, _, recorded = payload.rpartition("\0")
                self.seen.setdefault((path, tag == "s"), recorded)
            elif tag == "t":
                self.top_level.update(payload.split("\0"))
        self.top_level.discard("")
        self.taken_over = True
        self.derivations = derivations

    def _abs(self, path: object) -> str:
        text = os.fsdecode(path)  # type: ignore[arg-type]
        return text if text.startswith("/") else os.path.abspath(text)

    def _note(self, path: str, follow: bool, ident: str) -> None:
        if path.startswith(_PSEUDO) and ident != "-":
            self.refuse(f"read {path}")
        old = self.seen.get((path, follow))
        if old is None or (not is_whole(old) and is_whole(ident)):  # a directory listed after a stat: whole now
            self.seen[(path, follow)] = ident
            self.seen_at[(path, follow)] = time.time_ns()

    def _whole(self, path: str) -> None:
        """Note ``path`` (through links) with its whole identity, replacing a directory's partial one."""
        old = self.seen.get((path, True))
        if old is None or not is_whole(old):
            self.seen[(path, True)] = stat_identity(path, True)

    def _stat(self, path: object, follow: bool) -> os.stat_result:
        real = self._saved["stat"] if follow else self._saved["lstat"]
        try:
            where = self._abs(path)
        except (OSError, TypeError, ValueError):  # the call itself says what is wrong with it
            self.refuse(f"could not name {path!r}")
            return real(path)  # type: ignore[operator]
        try:
            st = real(path)  # type: ignore[operator]
        except (FileNotFoundError, NotADirectoryError):
            self._note(where, follow, "-")
            raise
        except OSError:
            self.refuse(f"could not stat {where}")
            raise
        self._note(where, follow, identity(st, whole=False))
        return st

    def _saw(self, path: object, follow: bool, whole: bool = True) -> None:
        try:
            where = self._abs(path)
            old = self.seen.get((where, follow))
            if old is None or (whole and not is_whole(old)):
                self._note(where, follow, stat_identity_real(where, follow, self._saved, whole))
        except (OSError, TypeError, ValueError):
            self.refuse(f"could not stat {path!r}")

    def _opened(self, path: object, mode: object, flags: object) -> None:
        if isinstance(path, int):
            return  # an open descriptor: its file was opened (and noted) by path
        if isinstance(mode, str):
            if any(c in mode for c in "wax") and "+" not in mode:
                return  # written, not read
        elif isinstance(flags, int) and flags & os.O_ACCMODE == os.O_WRONLY:
            return
        self._saw(path, True)

    # -- the entry -------------------------------------------------------------------------

    def _restore(self) -> None:
        """Put back os.stat, os.lstat, os.access, os.readlink, os.open, os.write, os.writev and the standard streams (once)."""
        global current
        self.active = self.capturing = False
        if getattr(self, "_restored", False) or not hasattr(self, "_saved"):
            return
        self._restored = True
        os.stat, os.lstat = self._saved["stat"], self._saved["lstat"]  # type: ignore[assignment]
        for group, watched in getattr(self, "_supports", ()):
            group.discard(watched)
        os.access, os.readlink = self._saved["access"], self._saved["readlink"]  # type: ignore[assignment]
        os.open, os.write, os.writev = self._saved["open"], self._saved["write"], self._saved["writev"]  # type: ignore[assignment]
        sys.stdout, sys.stderr = self._saved["stdout"], self._saved["stderr"]  # type: ignore[assignment]
        sys.stdin = self._saved["stdin"]  # type: ignore[assignment]
        current = None

    def abandon(self, why: str) -> None:
        """Keep no entry (for the reason ``why``) and stop watching now, before real work runs:
        a build that builds, fetches or substitutes runs with the interpreter's own os.stat and
        streams, not the recorder's stand-ins."""
        self.refuse(why)
        self._restore()

    def finish(self, status: int) -> None:
        """Stop watching; write the entry when nothing refused it (`_why_not` says why not)."""
        abandoned = getattr(self, "_restored", False)
        self._restore()
        why = self.refused if abandoned else self._why_not(status)
        if not why:
            try:
                self._write()
            except (OSError, ValueError) as error:
                why = f"cannot write: {error}"
        if os.environ.get(DEBUG_ENV):
            print(f"cudapkgs: eval cache: {'stored' if not why else f'not stored ({why})'}", file=sys.stderr)

    def _why_not(self, status: int, needs_store: bool = True) -> str:
        if status != 0:
            return f"exit status {status}"
        if self.refused:
            return self.refused
        if needs_store and self.paused and self.store is None:
            return "read the store"
        cwd = os.getcwd()
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                if not file.startswith("/"):
                    return f"module {module.__name__} has a relative file name"
                self._whole(file)
                folder = os.path.dirname(file)  # a new module beside it could shadow an import
                if folder != cwd:
                    self._whole(folder)
        self._whole(os.path.realpath(sys.executable))
        for entry in dict.fromkeys(sys.path):  # listed by the import system, maybe before the recorder
            where = os.path.abspath(entry or ".")
            if where != cwd and os.path.isdir(where):
                # The site module ran its .pth files' lines before the command: their text is an input.
                for name in _names(where):
                    if name.endswith(".pth"):
                        self._whole(os.path.join(where, name))
            recorded = stat_identity(where, True)
            if recorded != "-" and _racy(recorded, self.started_ns):
                return f"{where} changed a moment before or while the command ran"
        for (path, follow), recorded in self.seen.items():
            current_identity = stat_identity(path, follow, is_whole(recorded))
            if current_identity != recorded:
                return f"{path} changed while the command ran"
            if recorded != "-" and is_whole(recorded) and _racy(recorded, self.seen_at.get((path, follow), self.started_ns)):
                return f"{path} changed a moment before it was read"
        return ""

    def _fields(self, with_output: bool = True) -> list[tuple[str, str]]:
        fields = [("k", self.key)]
        if self.derivations is not None:
            # First, and the store right after it: the fast path gives up on an entry of derivations
            # only (a build with work) before checking every input, which `lookup.derivations` does.
            fields.append(("D", self.derivations))
        if self.store is not None:
            fields.append(("d", "\0".join(self.store)))
        fields += [("s" if follow else "l", f"{path}\0{ident}") for (path, follow), ident in self.seen.items()]
        for entry in dict.fromkeys(sys.path):
            where = os.path.abspath(entry or ".")
            fields.append(("p", f"{where}\0{stat_identity(where, True)}"))
        # Imported, or looked for and not found (`entry.LOOKED_UP`): a module of that name appearing in
        # the working directory would be imported by the command run in full.
        names = sorted({n for n in sys.modules if "." not in n} | LOOKED_UP | self.top_level)
        fields.append(("t", "\0".join(names)))
        if self.store is not None:
            fields += [("v", path) for path in self.valid]
            fields += [("L", "\0".join(link)) for link in self.links]
        if with_output:
            fields += self.output
        return fields

    def _write(self, with_output: bool = True) -> None:
        assert self.directory is not None
        data = encode(self._fields(with_output))
        if len(data) > MAX_BYTES:
            raise OSError(f"entry of {len(data)} bytes is over {MAX_BYTES}")
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        final = os.path.join(self.directory, entry_name(self.key))
        tmp = os.path.join(self.directory, f".{os.getpid()}.{os.urandom(6).hex()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _bound(self.directory, keep=final)


def _names(directory: str) -> list[str]:
    """The names in ``directory``, none when it cannot be listed."""
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _racy(recorded: str, read_ns: int) -> bool:
    """Whether a whole identity's ctime is within a tick of the file system's clock before ``read_ns``
    (or after it): a second change in that tick would leave the identity as it is."""
    ctime = int(recorded.split(":")[3])
    coarse = ctime % 1_000_000_000 == 0
    return ctime > read_ns - (_COARSE_RACY_NS if coarse else RACY_NS)


def stat_identity_real(path: str, follow: bool, saved: dict[str, object], whole: bool = True) -> str:
    """`stat_identity` through the unwrapped `os.stat`/`os.lstat` kept in ``saved``."""
    real = saved["stat"] if follow else saved["lstat"]
    try:
        return identity(real(path), whole)  # type: ignore[operator]
    except (FileNotFoundError, NotADirectoryError):
        return "-"


def _bound(directory: str, keep: str) -> None:
    """At most `MAX_ENTRIES` entries in ``directory``: the least recently written go first;
    temporary files over an hour old (a writer that died) go too."""
    entries = []
    now = time.time()
    for item in os.scandir(directory):
        try:
            st = item.stat(follow_symlinks=False)
        except OSError:
            continue
        if item.name.endswith(".tmp") and now - st.st_mtime > 3600:
            _unlink(item.path)
        elif item.name.endswith(".entry") and item.path != keep:
            entries.append((st.st_mtime_ns, item.path))
    if len(entries) >= MAX_ENTRIES:
        entries.sort()
        for _, path in entries[: len(entries) - MAX_ENTRIES + 1]:
            _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def start(argv: list[str]) -> Recorder:
    """A `Recorder` for ``argv``, started."""
    return Recorder(argv).start()
