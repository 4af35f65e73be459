"""rdma-core 44.0 (libibverbs, librdmacm, libmlx5 and libnl) from Debian bookworm's binary packages.

libcufile's RDMA library needs ``libibverbs.so.1``, ``librdmacm.so.1`` and ``libmlx5.so.1``
(Nixpkgs builds rdma-core from source; its expression lists rdma-core among libcufile's inputs).
Here they are taken pinned: the build runs the platform's package client, ``apt-get
download NAME=VERSION`` (which names no host: apt's own sources decide), checks each
``.deb`` against the SHA-256 pinned below (a mismatch fails with both values), and unpacks
the shared libraries into ``$out/lib`` (``lib/libibverbs/`` keeps the verbs providers).
Different pins give a different store path; the same pins, the same files.

Limit: libibverbs looks for its providers' configuration in ``/etc/libibverbs.d`` of the
machine it runs on, as on any distribution.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DEBS", "VERSION", "rdma_core"]

VERSION = "44.0"
# (package, version, sha256 of the .deb) of Debian bookworm (amd64), read 2026-11-30.
DEBS = (
    ("libibverbs1", "44.0-2", "35054815259fee46173240254246d03b673a5cd5c528aaac96fd15ac428a8d59"),
    ("librdmacm1", "44.0-2", "16b18625834371d023b81477823074ea0d34c478d58dbef3f01107984f47d034"),
    ("ibverbs-providers", "44.0-2", "3c9907fd96a4ae7effb5faa178bd3648344a521f6bcca2c23c9f2dd214cf1192"),
    ("libnl-3-200", "3.7.0-0.2+b1", "d1fc3e9eb8e79b4c96b0a64c3d8c9e068ae2f665cab71bd19f417ffd0453a890"),
    ("libnl-route-3-200", "3.7.0-0.2+b1", "0fdcc425ae2982788c085c76a7cb0eda3e3db99d41bd1ce56082ee18e9f1e21f"),
)

BUILD = r"""
if ! command -v apt-get > /dev/null || ! command -v dpkg-deb > /dev/null; then
  echo "rdma-core: needs apt-get and dpkg-deb (a Debian or Ubuntu machine) to take the pinned packages" >&2; exit 1
fi
mkdir -p debs root
cd debs
for i in "${!debNames[@]}"; do
  name="${debNames[$i]}"; version="${debVersions[$i]}"; want="${debHashes[$i]}"
  apt-get download "$name=$version" || { echo "rdma-core: apt-get download $name=$version failed (run apt-get update?)" >&2; exit 1; }
  file=$(ls "${name}_"*.deb)
  got=$(sha256sum "$file" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "rdma-core: $file: sha256 mismatch: pinned $want, got $got" >&2; exit 1
  fi
  dpkg-deb -x "$file" ../root
done
"""
INSTALL = r"""
mkdir -p "$out/lib"
for d in root/usr/lib/x86_64-linux-gnu root/lib/x86_64-linux-gnu root/usr/lib/aarch64-linux-gnu root/lib/aarch64-linux-gnu; do
  [ -d "$d" ] && cp -a "$d"/. "$out/lib/"
done
rm -rf "$out/lib/rsocket"
"""


def rdma_core(config: Any, system: str) -> Any:
    """The rdma-core package of a top level."""
    from ...stdenv import mk_derivation

    return mk_derivation(config, {
        "pname": "rdma-core",
        "version": VERSION,
        "stdenvCc": None,
        "driverLibDir": None,
        "debNames": [d[0] for d in DEBS],
        "debVersions": [d[1] for d in DEBS],
        "debHashes": [d[2] for d in DEBS],
        "dontConfigure": True,
        "buildPhase": BUILD,
        "installPhase": INSTALL,
        "meta": {"description": "RDMA core userspace libraries (pinned Debian bookworm packages)",
                 "license": ["gpl2Only", "bsd2"]},
    }, system=system, name="rdma-core")
