"""Set (or show) the IPv4 BIG TCP sizes of `lo` in *this* network namespace, by rtnetlink.

Run:  unshare -n sh -c 'python bench/big_tcp_lo.py --set 524280 && python bench/bench_http_read.py …'
      python bench/big_tcp_lo.py                     (show lo's sizes here; changes nothing)

A machine setting, not cudapkgs': `ip link set lo gso_ipv4_max_size N gro_ipv4_max_size N` does this
with iproute2 ≥ 6.3, which this machine lacks (its `ip` knows only gso_max_size, which since Linux 6.3
no longer raises IPv4's: `netif_set_gso_max_size` copies it to gso_ipv4_max_size only up to 64 KiB,
net/core/dev.c). Linux ≥ 6.3 takes IFLA_GSO_IPV4_MAX_SIZE (63) and IFLA_GRO_IPV4_MAX_SIZE (64) of an
RTM_NEWLINK (include/uapi/linux/if_link.h), each at most the device's tso_max_size (524280 on lo).
`--set` refuses to run where any interface other than `lo` exists (a fresh `unshare -n` namespace has
only `lo`; the host has its network devices): the host's `lo` is never touched. Needs CAP_NET_ADMIN.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct

RTM_NEWLINK, RTM_GETLINK = 16, 18
NLM_F_REQUEST, NLM_F_ACK = 1, 4
IFLA_GSO_MAX_SIZE, IFLA_GRO_MAX_SIZE, IFLA_TSO_MAX_SIZE = 41, 58, 59
IFLA_GSO_IPV4_MAX_SIZE, IFLA_GRO_IPV4_MAX_SIZE = 63, 64
NAMES = {IFLA_GSO_MAX_SIZE: "gso_max_size", IFLA_GRO_MAX_SIZE: "gro_max_size", IFLA_TSO_MAX_SIZE: "tso_max_size",
         IFLA_GSO_IPV4_MAX_SIZE: "gso_ipv4_max_size", IFLA_GRO_IPV4_MAX_SIZE: "gro_ipv4_max_size"}


def _attr(kind: int, value: int) -> bytes:
    return struct.pack("=HHI", 8, kind, value)


def _talk(message_type: int, flags: int, attrs: bytes = b"") -> bytes:
    index = socket.if_nametoindex("lo")
    body = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, index, 0, 0) + attrs  # struct ifinfomsg
    header = struct.pack("=IHHII", 16 + len(body), message_type, NLM_F_REQUEST | flags, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as s:  # NETLINK_ROUTE
        s.bind((0, 0))
        s.send(header + body)
        reply = s.recv(65536)
    length, kind = struct.unpack_from("=IH", reply)
    if kind == 2:  # NLMSG_ERROR
        (error,) = struct.unpack_from("=i", reply, 16)
        if error:
            raise OSError(-error, os.strerror(-error))
    return reply[:length]


def sizes() -> dict[str, int]:
    """lo's GSO/GRO/TSO sizes in this namespace, by name (those the kernel reports)."""
    reply = _talk(RTM_GETLINK, 0)
    offset, found = 16 + 16, {}
    while offset + 4 <= len(reply):
        length, kind = struct.unpack_from("=HH", reply, offset)
        if length < 4:
            break
        if kind in NAMES and length >= 8:
            found[NAMES[kind]] = struct.unpack_from("=I", reply, offset + 4)[0]
        offset += (length + 3) & ~3
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=int, metavar="BYTES", help="set gso/gro_ipv4_max_size of lo (and bring it up)")
    args = parser.parse_args()
    if args.set is not None:
        others = sorted(name for _, name in socket.if_nameindex() if name != "lo")
        if others:
            raise SystemExit(f"refusing: this namespace has {', '.join(others)}: not a private one (run under `unshare -n`)")
        up = 1  # IFF_UP
        index = socket.if_nametoindex("lo")
        body = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, index, up, up)
        attrs = _attr(IFLA_GSO_IPV4_MAX_SIZE, args.set) + _attr(IFLA_GRO_IPV4_MAX_SIZE, args.set)
        attrs += _attr(IFLA_GSO_MAX_SIZE, args.set) + _attr(IFLA_GRO_MAX_SIZE, args.set)  # IPv6's too
        header = struct.pack("=IHHII", 16 + len(body) + len(attrs), RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 1, 0)
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as s:
            s.bind((0, 0))
            s.send(header + body + attrs)
            reply = s.recv(65536)
        (error,) = struct.unpack_from("=i", reply, 16)
        if error:
            raise SystemExit(f"the kernel refused: {os.strerror(-error)}")
    print(" ".join(f"{k}={v}" for k, v in sorted(sizes().items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
