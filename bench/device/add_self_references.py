"""On the device: add a self-reference to the export manifest of paths exported as found (pack_closure.py --as-found).

usage: PYTHONPATH=/tmp/site python3 bench/device/add_self_references.py /tmp/carry/NAME CHANGED.txt

The shared store's paths that root's Python wrote bytecode into after registration were exported as they are
(``--as-found``), with their new NAR hash, but with their recorded references: the bytecode names the
module's own file, so such a path now refers to itself, and the import (rightly) refuses a path whose
files refer to more than its record says. This checks the received archive against the manifest's
sha256 first, then rewrites it (same members, in order) with each listed path's own path added to its
references, and records the new archive's sha256 and size in the device's copy of the manifest.
"""

import hashlib
import io
import json
import os
import sys
import tarfile

import zstandard

folder, changed_file = sys.argv[1], sys.argv[2]
changed = set(open(changed_file).read().split())
archive = os.path.join(folder, "closure.tar.zst")
manifest_file = os.path.join(folder, "manifest.json")
manifest = json.load(open(manifest_file))
h = hashlib.sha256()
with open(archive, "rb") as f:
    for block in iter(lambda: f.read(1 << 24), b""):
        h.update(block)
if h.hexdigest() != manifest["sha256"]:
    sys.exit(f"{archive}: sha256 {h.hexdigest()} != manifest {manifest['sha256']}")
# Pass 1: the store paths each listed path's files spell out (<storeDir>/<32-char hash>-), by a scan of its
# members: bytecode names the path itself; a file patched after registration may name another path.
prefix = manifest["storeDir"].rstrip("/").encode() + b"/"
found: dict[str, set[bytes]] = {}
names = {os.path.basename(p): p for p in changed}
with open(archive, "rb") as raw_in, tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(raw_in), mode="r|") as src:
    for member in src:
        top = member.name.split("/", 1)[0]
        if top not in names or not member.isreg():
            continue
        data = src.extractfile(member).read()
        hits = found.setdefault(names[top], set())
        at = data.find(prefix)
        while at >= 0:
            hits.add(data[at + len(prefix):at + len(prefix) + 32])
            at = data.find(prefix, at + 1)
new = archive + ".new"
with open(archive, "rb") as raw_in, open(new, "wb") as raw_out:
    reader = zstandard.ZstdDecompressor().stream_reader(raw_in)
    writer = zstandard.ZstdCompressor(level=3, threads=-1).stream_writer(raw_out, closefd=False)
    with tarfile.open(fileobj=reader, mode="r|") as src, \
            tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as dst:
        for index, member in enumerate(src):
            if index == 0:
                data = json.loads(src.extractfile(member).read())
                added = 0
                by_hash = {os.path.basename(e["path"])[:32].encode(): e["path"] for e in data["paths"]}
                by_hash.update({os.path.basename(p)[:32].encode(): p for p in changed})
                for entry in data["paths"]:
                    if entry["path"] in changed:
                        refs = {by_hash[h] for h in found.get(entry["path"], ()) if h in by_hash}
                        more = refs - set(entry["references"])
                        if more:
                            print(f"{entry['path']}: references added: {sorted(more)}")
                            entry["references"] = sorted(set(entry["references"]) | more)
                            added += 1
                body = json.dumps(data, indent=1).encode()
                member.size = len(body)
                dst.addfile(member, io.BytesIO(body))
                print(f"{member.name}: references added to {added} of {len(changed)} listed paths")
            elif member.isreg():
                dst.addfile(member, src.extractfile(member))
            else:
                dst.addfile(member)
    writer.close()
h, size = hashlib.sha256(), 0
with open(new, "rb") as f:
    for block in iter(lambda: f.read(1 << 24), b""):
        h.update(block)
        size += len(block)
os.replace(new, archive)
manifest["sha256"], manifest["size"] = h.hexdigest(), size
with open(manifest_file, "w") as f:
    json.dump(manifest, f, indent=1)
print(f"rewritten: {size} bytes, sha256 {h.hexdigest()}")
