"""Make a minimal container root file system (a tarball for `podman import`) without a registry.

usage: python bench/device/make_rootfs.py --debs DIR [--closure closure.tar.gz] --out rootfs.tar

The tree holds busybox (static) with its applet links, glibc's run-time libraries,
libstdc++ and libgcc_s, taken from the Debian packages in --debs
(`apt-get download busybox-static libc6 libstdc++6 libgcc-s1`); the loader config
includes /etc/ld.so.conf.d/*.conf (where the CDI update-ldcache hook writes). When
--closure is given (a tar.gz of store paths with absolute names, from
bench/device/pack_saxpy.py), its members are added at the same paths, so a store
program runs inside the container as it does on the host. No NVIDIA file is in the
image: nvidia-smi and libcuda come from the CDI spec's mounts.

Deterministic: members sorted, owner root, mtime 0.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

APPLETS = ("sh", "ls", "cat", "env", "echo", "mkdir", "test", "grep", "head", "id", "mount", "stat", "readlink", "true", "wc", "sleep")
LIBDIR = "lib/x86_64-linux-gnu"
WANTED = ("ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libresolv.so.2", "libutil.so.1", "libstdc++.so.6", "libgcc_s.so.1")
FILES = {
    "etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n",
    "etc/group": "root:x:0:\nvideo:x:44:\nnogroup:x:65534:\n",
    "etc/os-release": "NAME=cudapkgs-minimal\nID=cudapkgs-minimal\n",
}
DIRS = ("bin", "dev", "etc/ld.so.conf.d", "lib64", "proc", "root", "run", "sys", "tmp", "usr/bin", "usr/lib", "usr/local/bin", "var/tmp")


def _info(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def build(debs: Path, out: Path, closure: Path | None) -> int:
    """Write the root file system tarball; returns its member count."""
    members: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}

    def add_dir(name: str) -> None:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            members.setdefault(sub, (_info(sub, tarfile.DIRTYPE, 0o1777 if sub in ("tmp", "var/tmp") else 0o755), None))

    def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
        add_dir(os.path.dirname(name))
        members[name] = (_info(name, tarfile.REGTYPE, mode, len(data)), data)

    def add_link(name: str, target: str) -> None:
        add_dir(os.path.dirname(name))
        members[name] = (_info(name, tarfile.SYMTYPE, 0o777, link=target), None)

    for d in DIRS:
        add_dir(d)
    for name, text in FILES.items():
        add_file(name, text.encode())
    with tempfile.TemporaryDirectory() as tmp:
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        root = Path(tmp)
        add_file("bin/busybox", (root / "bin/busybox").read_bytes(), 0o755)
        for applet in APPLETS:
            add_link(f"bin/{applet}", "busybox")
        found = set()
        for sub in (LIBDIR, "usr/" + LIBDIR, "lib64"):
            for path in sorted((root / sub).glob("*")) if (root / sub).is_dir() else []:
                base = path.name
                if not any(base == w or base.startswith(w.split(".so")[0] + ".so") for w in WANTED):
                    continue
                name = f"{LIBDIR}/{base}" if sub != "lib64" else f"lib64/{base}"
                if path.is_symlink():
                    add_link(name, os.readlink(path))
                else:
                    add_file(name, path.read_bytes(), 0o755)
                found.add(base)
        missing = [w for w in WANTED if w not in found]
        if missing:
            raise SystemExit(f"make_rootfs: {', '.join(missing)} not in the packages under {debs}")
    if closure is not None:
        with tarfile.open(closure) as tar:
            for member in tar.getmembers():
                name = member.name.lstrip("/")
                if member.isdir():
                    add_dir(name)
                elif member.issym():
                    add_link(name, member.linkname)
                elif member.isfile():
                    add_file(name, tar.extractfile(member).read(), member.mode & 0o7777)
                else:
                    raise SystemExit(f"make_rootfs: unexpected member {member.name} in {closure}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            info, data = members[name]
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return len(members)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--debs", type=Path, required=True, help="folder with busybox-static, libc6, libstdc++6, libgcc-s1 .deb files")
    parser.add_argument("--closure", type=Path, help="a store closure archive to add (absolute member names)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    count = build(args.debs, args.out, args.closure)
    print(f"{args.out}: {count} members, {args.out.stat().st_size / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
