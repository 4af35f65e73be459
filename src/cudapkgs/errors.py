"""The exceptions cudapkgs raises.

Every error a user can cause is a `CudapkgsError`; the command line prints its
message on one line and exits 1 (2 for `UsageError`), never a traceback. The ones the evaluation language raises are defined in
`cudapkgs.lib.errors` (lib/ imports nothing outside itself) and are the same classes here.
"""

from __future__ import annotations

from .lib.errors import (
    AttributeMissingError,
    CudapkgsError,
    EvalError,
    InfiniteRecursionError,
    MissingArgumentError,
    UsageError,
    did_you_mean,
)


class ConfigError(CudapkgsError):
    """The configuration (TOML file, --set, CUDAPKGS_CONFIG) is invalid."""


class ManifestError(CudapkgsError):
    """An NVIDIA redistrib manifest is missing, unreadable or malformed."""


class FailedAssertionsError(EvalError):
    """Evaluation assertions (Nixpkgs' `assertMsg` lists) failed.

    The message is Nixpkgs' (`_mkFailedAssertionsString`): a header line, then one
    "- message" line per failed assertion.  ``hint``, when given, says what would pass;
    the command line prints both on one line (`cli_message`).
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def cli_message(self) -> str:
        """`header item; item (hint)`: the failed assertions on one line."""
        header, *items = str(self).split("\n")
        text = f"{header} {'; '.join(item.removeprefix('- ') for item in items)}".strip()
        return f"{text} ({self.hint})" if self.hint else text


class UnfreeLicenseError(EvalError):
    """A package with an unfree license was used without permission."""


class UnavailablePackageError(EvalError):
    """A package cannot be used here (platform, broken, missing from a manifest)."""


class FetchError(CudapkgsError):
    """A source archive could not be fetched (network, mirror, pip).

    ``reasons``: when every one of several sources failed, each source's reason ("<source>: <why>"),
    so that a caller combining its own attempts can list them once instead of nesting messages.
    """

    reasons: tuple[str, ...] = ()


class HashMismatchError(FetchError):
    """A fetched file's sha256 (or size) differs from the manifest's; nothing was kept."""

    def __init__(self, message: str, *, file: str = "", expected: str = "", actual: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.expected = expected
        self.actual = actual


class StoreError(CudapkgsError):
    """The store refused an operation: a path not in it, an invalid path, no space, no permission."""


# --- showing input in messages (issue 30, item 7) ---------------------------------------------
#
# A message that shows input (a package name or a substituter from a cudapkgs.toml, a key of a
# lock file, a file name) reached the terminal as it was: ESC and CSI sequences in a project file
# erased the refusal's lines in a terminal emulator, and OSC 52 can write the clipboard.


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: object, *, lines: bool = False) -> str:
    """`text` (str() of it) as a terminal may show it: every character Python does not call
    printable (`str.isprintable`: the C0 and C1 controls, DEL, format characters such as the bidi
    overrides, line and paragraph separators, surrogates, private-use and unassigned code points)
    is written as a Python escape (``\\x1b``, ``\\u202e``); a backslash is left as it is.

    With ``lines`` a newline and a tab are kept (a message of several lines, such as a build log's
    last lines, whose values were shown one by one); otherwise they are escaped too, so one value
    cannot add a line to a message.
    """
    text = str(text)
    if text.isprintable():  # nearly always: no copy
        return text
    keep = "\n\t" if lines else ""
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


def redacted(text: str, keep: int = 24, *, shown_data: int = 8) -> str:
    """A key as typed, quoted for an error message (`repr`) without echoing its secret part: the name
    (the text before the first ``:``, cut to `keep` characters) and, of what follows, only a fragment of
    at most `shown_data` characters (too short to carry a key: Nix's secret key form is 88 base64
    characters, a public key's 44); longer, it is ``…`` and the length: ``'lab-1:…' (206 characters)``.
    A text with no ``:`` longer than `shown_data` is shown as ``'…'`` and its length only.

    Why not its first characters: ``k:`` and 22 characters of a secret key pasted as
    ``--trusted-public-key`` are 16 of the 32 bytes of its seed (libsodium's secret key is the seed
    then the public key, NixOS/nix src/libutil/signature/local-keys.cc)."""
    name, sep, data = text.partition(":")
    if not sep:
        name, data = "", text
    if len(name) <= keep and len(data) <= shown_data:
        return repr(text)
    head = (name[:keep] + ("…" if len(name) > keep else "") + sep) if sep else ""
    if len(data) <= shown_data:
        return f"{head + data!r} ({len(text)} characters)"
    return f"{head + '…'!r} ({len(text)} characters)"


_URL_AUTHORITY = r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)"  # compiled on first use: `re` is not imported with this module
# A password holding a raw "/" (not a valid URL: urllib ends the authority there, so that the "port" is
# refused and the URL named in the error): "user:" then text with a "/" up to an "@" before any "?" or "#".
_SLASHED_PASSWORD = r"([A-Za-z][A-Za-z0-9+.-]*://)([^:/?#@\s]*):([^@?#\s]*/[^@?#\s]*)@"
_compiled: list = []


def shown_cache_url(url: str) -> str:
    """`url` (a cache's, as configured or typed) as messages, logs and `cudapkgs config` show it: every
    password in a user information part replaced by ``***`` (``https://ci:s3cret@host/x`` ->
    ``https://ci:***@host/x``; the user name stays, so one can see which credentials are configured),
    in the URL and in any URL among its query's values (an S3 ``endpoint=``), percent-encoded or not.
    Anything else unchanged; never raises.

    The user information is what precedes the *last* ``@`` of the authority (the text after ``://`` up
    to the first ``/``, ``?`` or ``#``), as ``urllib.parse.urlsplit`` reads it and the HTTP client sends
    it (RFC 3986 section 3.2.1): a password holding a raw ``@`` (``u:p@ss@host``) is masked whole, and
    one after an empty user name (``https://:token@host``) too; so is one holding a raw ``/``
    (``u:p/ss@host``, which urllib reads as host ``u`` and port ``p``: refused, and named in the error),
    unless it starts with digits then ``/`` (``host:8080/a@b`` is a port and a path)."""
    import re
    import urllib.parse

    if not _compiled:
        _compiled.extend((re.compile(_URL_AUTHORITY), re.compile(_SLASHED_PASSWORD)))
    pattern, slashed = _compiled

    def slashed_password(match) -> str:  # "h:8080/a@b" is a port and a path: left as it is
        if re.match(r"[0-9]*/", match.group(3)):
            return match.group(0)
        return f"{match.group(1)}{match.group(2)}:***@"

    def authority(match) -> str:
        info, at, host = match.group(2).rpartition("@")
        if not at or ":" not in info:
            return match.group(0)
        return f"{match.group(1)}{info.partition(':')[0]}:***@{host}"

    try:
        shown = slashed.sub(slashed_password, pattern.sub(authority, url))
        base, mark, query = shown.partition("?")
        if not mark or "%" not in query:
            return shown
        values = []
        for item in query.split("&"):
            key, eq, value = item.partition("=")
            decoded = urllib.parse.unquote(value)
            masked = pattern.sub(authority, decoded)
            values.append(f"{key}{eq}{urllib.parse.quote(masked, safe=':/*@')}" if masked != decoded else item)
        return f"{base}?{'&'.join(values)}"
    except Exception:  # never raises: a message is being made
        return "(a cache URL)"


def masked_urls(value: object) -> object:
    """`value` (JSON data: dicts, lists, strings, numbers) with every string passed through `shown_cache_url`:
    a ``--json`` output that names fetchers, mirrors or caches (``mirror:https://ci:token@…``) shows no
    password.  Dict keys are kept; other values as they are."""
    if isinstance(value, str):
        return shown_cache_url(value) if "@" in value else value
    if isinstance(value, dict):
        return {k: masked_urls(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked_urls(v) for v in value]
    return value


def shell_word(path: object) -> str:
    """`path` as one word of a command a message tells the user to run (`shown`, then quoted as a POSIX
    shell needs: ``shlex.quote``), so pasting the command runs that command and nothing else.

    A cloned repository chooses the names of its directories: with the project in
    ``repo/x;touch PWNED;b``, the refusal's "run: cudapkgs allow repo/x;touch PWNED;b/cudapkgs.toml"
    ran ``touch PWNED`` when pasted."""
    import shlex

    return shlex.quote(shown(path))


def toml_string(text: object) -> str:
    """`text` as a TOML basic string (``"..."``, `shown` first; JSON's escapes, which TOML 1.0 reads the same,
    section "String"), for a configuration line a message suggests: a directory named ``x", "*`` made the
    suggested ``safeDirectories = ["…"]`` trust every directory."""
    import json

    return json.dumps(shown(text))


def json_for_terminal(value: object, **options: object) -> str:
    """``json.dumps(value, ensure_ascii=False, **options)`` with every character Python does not call
    printable written as a JSON escape (``\\u009b``, ``\\u202e``; a pair of them beyond U+FFFF): the
    same JSON value, which a terminal shows without acting on it.

    ``json.dumps`` escapes C0 controls in strings but not DEL, the C1 controls (U+009B is CSI to
    many terminals), the bidi overrides or the line separators, and with ``ensure_ascii=False``
    writes them as they are.  Outside strings JSON holds only ASCII, and the newlines ``indent``
    puts there are kept.  Raises what ``json.dumps`` raises (TypeError, ValueError).
    """
    import json

    text = json.dumps(value, ensure_ascii=False, **options)  # type: ignore[arg-type]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else _json_escape(c) for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def control_character(text: str) -> str | None:
    """The first control character of `text`, escaped (``\\x1b``), or None when it holds none.

    Control characters are Unicode's Cc (C0, DEL, C1), Cf (format characters: the bidi overrides,
    zero-width characters), Zl and Zp (line and paragraph separators) and Cs (surrogates): they
    have no place in a package name, a URL, a key or a path, and a terminal acts on some of them
    (ESC, CSI, OSC). Other characters Python does not call printable (unassigned, private use)
    are not control characters.
    """
    if text.isprintable():
        return None
    import unicodedata

    for char in text:
        if not char.isprintable() and unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs"):
            return _escape(char)
    return None


def check_printable(text: str, where: str) -> str:
    """`text` when it holds no control character (`control_character`); else `ConfigError` naming
    ``where`` (e.g. "/repo/cudapkgs.toml: packages") and the character, escaped."""
    char = control_character(text)
    if char is not None:
        raise ConfigError(f'{where}: "{shown(text)}" holds the control character {char}; remove it '
                          "(a terminal acts on such characters when the value is shown)")
    return text
