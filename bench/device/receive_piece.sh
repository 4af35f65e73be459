#!/usr/bin/env bash
# On the lent GPU machine: append one carried piece of an export archive to /tmp/carry/NAME/closure.tar.zst.
# usage: bash bench/device/receive_piece.sh .carry/NAME/pNNNN
#   carry: that piece and either .carry/NAME/manifest.json (pack_closure.py) or .carry/NAME/pNNNN.sha256
#   (pack_closure.py --window: pieces sent while the export still runs; the manifest comes with the last call,
#   and assemble_closure.sh checks the whole archive against it).
# The piece's sha256 and size must equal the manifest's (or its .sha256 file's); pieces arrive in order (a
# repeated call for a piece already appended does nothing, so a call retried after a broken transfer is safe).
# Exit 2: bad piece, 3: out of order.
set -euo pipefail
piece=${1:?the piece, .carry/NAME/pNNNN}
folder=$(dirname "$piece"); name=$(basename "$folder"); part=$(basename "$piece")
dest=/tmp/carry/$name; mkdir -p "$dest"
if [ -f "$folder/manifest.json" ]; then
  [ -f "$dest/manifest.json" ] || cp "$folder/manifest.json" "$dest/manifest.json"
  cmp -s "$folder/manifest.json" "$dest/manifest.json" || { echo "manifest differs from the one of the pieces already here" >&2; exit 2; }
fi
python3 - "$piece" "$dest" "$part" <<'PY'
import hashlib, json, os, sys
piece, dest, part = sys.argv[1:]
index = int(part[1:])
manifest_file = os.path.join(dest, "manifest.json")
if os.path.exists(manifest_file):
    manifest = json.load(open(manifest_file))
    names = [p["name"] for p in manifest["pieces"]]
    entry = manifest["pieces"][names.index(part)]
    want, size, total = entry["sha256"], entry["size"], len(names)
else:
    with open(piece + ".sha256") as f:
        want, size = f.read(200).split()
    size, total = int(size), "?"
done_file = os.path.join(dest, "received")
done = open(done_file).read().split() if os.path.exists(done_file) else []
if part in done:
    print(f"{part}: already appended"); sys.exit(0)
if index != len(done):
    print(f"{part}: out of order (have {len(done)}, next is p{len(done):04d})", file=sys.stderr); sys.exit(3)
data = open(piece, "rb").read()
got = hashlib.sha256(data).hexdigest()
if len(data) != size or got != want:
    print(f"{part}: sha256 {got} ({len(data)} bytes) != {want} ({size} bytes)", file=sys.stderr); sys.exit(2)
with open(os.path.join(dest, "closure.tar.zst"), "ab") as out:
    out.write(data); out.flush(); os.fsync(out.fileno())
with open(done_file, "a") as f:
    f.write(part + "\n")
print(f"{part}: appended ({len(done) + 1}/{total})")
PY
