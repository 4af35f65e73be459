#!/usr/bin/env bash
# On the lent GPU machine, after every piece arrived (receive_piece.sh): check the whole archive's sha256
# and import it into the store directory it was exported from, each path's NAR hash checked.
# usage: bash bench/device/assemble_closure.sh NAME [WHEELS_DIR]
#   WHEELS_DIR: cudapkgs' dependencies for the machine's Python (pack_closure.py --wheels), installed into /tmp/site.
set -uo pipefail
name=${1:?NAME}; wheels=${2:-}
dest=/tmp/carry/$name
# the manifest comes with the last piece's call when the pieces were streamed (pack_closure.py --window)
[ -f "$dest/manifest.json" ] || [ ! -f ".carry/$name/manifest.json" ] || cp ".carry/$name/manifest.json" "$dest/"
[ -z "$wheels" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheels"/*.whl || exit 2
export PYTHONPATH=$PWD/src:/tmp/site
python3 - "$dest" <<'PY' || exit 3
import hashlib, json, os, sys, time
from cudapkgs.store.store import Store
from cudapkgs.store.transfer import import_closure
dest = sys.argv[1]
manifest = json.load(open(os.path.join(dest, "manifest.json")))
received = open(os.path.join(dest, "received")).read().split()
if received != [p["name"] for p in manifest["pieces"]]:
    sys.exit(f"{dest}: received {len(received)} pieces, the manifest lists {len(manifest['pieces'])}")
archive = os.path.join(dest, "closure.tar.zst")
h = hashlib.sha256()
with open(archive, "rb") as f:
    for block in iter(lambda: f.read(1 << 24), b""):
        h.update(block)
if h.hexdigest() != manifest["sha256"]:
    sys.exit(f"{archive}: sha256 {h.hexdigest()} != manifest {manifest['sha256']}")
start = time.monotonic()
with Store.open(manifest["storeDir"]) as store:
    added = import_closure(store, archive)
    problems = [p.message for p in store.verify()]
print(f"sha256 ok; imported {len(added)} of {manifest['paths']} paths into {manifest['storeDir']} "
      f"in {time.monotonic() - start:.0f} s; verify: {problems or 'ok'}")
for root in manifest["roots"]:
    print("root:", root)
sys.exit(1 if problems else 0)
PY
