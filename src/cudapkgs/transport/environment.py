"""Which proxy and which CA certificates a URL gets: the environment, read as curl (and so Nix) reads it.

Proxies (libcurl-env(3), "[scheme]_proxy", "ALL_PROXY", "NO_PROXY"; curl lib/url.c ``detect_proxy``):

* an ``http://`` URL uses ``http_proxy`` (lower case only: a CGI server sets ``HTTP_PROXY`` from a
  request's ``Proxy:`` header, the "httpoxy" hole, so curl ignores the upper-case name);
* an ``https://`` URL uses ``https_proxy``, else ``HTTPS_PROXY``;
* either falls back to ``all_proxy``, else ``ALL_PROXY``;
* ``no_proxy`` (else ``NO_PROXY``) lists hosts reached directly, separated by commas or blanks:
  ``*`` is every host; a name matches itself and its subdomains (a leading dot is ignored, as
  curl 7.86 does: ``example.com`` and ``.example.com`` both match ``www.example.com``); an IP
  address matches itself, a CIDR block (``10.0.0.0/8``) the addresses in it. Ports are not part
  of an entry (curl's rule).

A proxy given without a scheme is an ``http://`` one (curl's default). ``socks*://`` proxies need
PySocks, which cudapkgs does not depend on: they are refused with a line saying so.

CA certificates (Nix src/libstore/globals.cc, ``Settings::Settings``): ``NIX_SSL_CERT_FILE``, else
``SSL_CERT_FILE``, else the system's default verify paths (OpenSSL's, which read ``SSL_CERT_DIR``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import TransferError

__all__ = ["ca_file", "no_proxy_matches", "proxy_for"]

_PROXY_SCHEMES = ("http", "https")


def proxy_for(scheme: str, host: str, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The proxy URL for a request to `scheme`://`host`, and the variable it came from; None: go direct.

    `env` defaults to `os.environ`. Raises `TransferError` (naming the variable) for a proxy
    URL cudapkgs cannot use (a SOCKS proxy, an unknown scheme, no host).
    """
    env = os.environ if env is None else env
    no_proxy = _first(env, "no_proxy", "NO_PROXY")
    if no_proxy is not None and no_proxy_matches(host, no_proxy[1]):
        return None
    names = ("http_proxy",) if scheme == "http" else (f"{scheme}_proxy", f"{scheme.upper()}_PROXY")
    found = _first(env, *names) or _first(env, "all_proxy", "ALL_PROXY")
    if found is None:
        return None
    name, value = found
    proxy = value if "://" in value else f"http://{value}"
    proxy_scheme = proxy.partition("://")[0].lower()
    if proxy_scheme.startswith("socks"):
        raise TransferError(f"{scheme}://{host}", f"{name}={value} is a SOCKS proxy, which needs PySocks "
                            "(not installed with cudapkgs); use an http:// proxy or unset it")
    if proxy_scheme not in _PROXY_SCHEMES or not proxy.partition("://")[2].strip("/"):
        raise TransferError(f"{scheme}://{host}", f"{name}={value} is not an http:// or https:// proxy URL")
    return proxy, name


def no_proxy_matches(host: str, no_proxy: str) -> bool:
    """Whether `host` (a name or an IP address, IPv6 without brackets) is listed in `no_proxy` (curl's rules above)."""
    host = host.strip("[]").rstrip(".").lower()
    entries = [e for e in no_proxy.replace(",", " ").split() if e]
    if "*" in entries:
        return True
    address = _address(host)
    for entry in entries:
        entry = entry.lower()
        if address is not None:
            if _address_matches(address, entry):
                return True
            continue
        name = entry.lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def ca_file(env: Mapping[str, str] | None = None) -> str | None:
    """The CA bundle to trust: ``NIX_SSL_CERT_FILE``, else ``SSL_CERT_FILE``; None for the system's default.

    Raises `TransferError` naming the variable when the file it names is not a readable regular file
    (curl would fail every https transfer then; this says why once).
    """
    env = os.environ if env is None else env
    found = _first(env, "NIX_SSL_CERT_FILE", "SSL_CERT_FILE")
    if found is None:
        return None
    name, path = found
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise TransferError("https", f"{name}={path} names no readable CA bundle file; fix or unset it")
    return path


def _first(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return name, value
    return None


def _address(host: str):
    import ipaddress

    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _address_matches(address, entry: str) -> bool:
    import ipaddress

    try:
        if "/" in entry:
            return address in ipaddress.ip_network(entry.strip("[]"), strict=False)
        return address == ipaddress.ip_address(entry.strip("[]"))
    except ValueError:
        return False
