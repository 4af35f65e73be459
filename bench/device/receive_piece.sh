#!/usr/bin/env bash
# On the lent GPU machine: append one carried piece of an export archive to /tmp/carry/NAME/closure.tar.zst.
# usage: bash bench/device/receive_piece.sh .carry/NAME/pNNNN     (carry: that piece and .carry/NAME/manifest.json)
# The piece's sha256 must equal the manifest's; pieces arrive in order (a repeated call for a piece already
# appended does nothing, so a call retried after a broken transfer is safe). Exit 2: bad piece, 3: out of order.
set -euo pipefail
piece=${1:?the piece, .carry/NAME/pNNNN}
folder=$(dirname "$piece"); name=$(basename "$folder"); part=$(basename "$piece")
dest=/tmp/carry/$name; mkdir -p "$dest"
[ -f "$dest/manifest.json" ] || cp "$folder/manifest.json" "$dest/manifest.json"
cmp -s "$folder/manifest.json" "$dest/manifest.json" || { echo "manifest differs from the one of the pieces already here" >&2; exit 2; }
python3 - "$piece" "$dest" "$part" <<'PY'
import hashlib, json, os, sys
piece, dest, part = sys.argv[1:]
manifest = json.load(open(os.path.join(dest, "manifest.json")))
names = [p["name"] for p in manifest["pieces"]]
entry = manifest["pieces"][names.index(part)]
done_file = os.path.join(dest, "received")
done = open(done_file).read().split() if os.path.exists(done_file) else []
if part in done:
    print(f"{part}: already appended"); sys.exit(0)
if names.index(part) != len(done):
    print(f"{part}: out of order (have {len(done)} of {len(names)}, next is {names[len(done)]})", file=sys.stderr); sys.exit(3)
data = open(piece, "rb").read()
if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
    print(f"{part}: sha256 {hashlib.sha256(data).hexdigest()} != manifest {entry['sha256']}", file=sys.stderr); sys.exit(2)
with open(os.path.join(dest, "closure.tar.zst"), "ab") as out:
    out.write(data); out.flush(); os.fsync(out.fileno())
with open(done_file, "a") as f:
    f.write(part + "\n")
print(f"{part}: appended ({len(done) + 1}/{len(names)})")
PY
