#!/usr/bin/env bash
# On the lent GPU machine, once every piece of NAME arrived (receive_piece.sh; pack_ml_cache.py made them): the ML
# environment substituted from its signed zstd file:// cache into a fresh store, as a teammate gets it, then checked.
# usage: bash bench/device/substitute_ml_env.sh NAME [ROUNDS] [PARTS]
#   PARTS: any of subst,env,testers (default all). ROUNDS: run_ml_env.sh's alternating speed rounds (default 3).
# subst: the whole tar's sha256 against the manifest, unpacked; cudapkgs' wheels into /tmp/site, CPython 3.12.1 at
#   its pyenv path (the env's bin/python3 links there); `copy --from` with a random key trusted first (refused,
#   nothing registered), then with the cache's key (every narinfo signature and NAR hash checked), timed; verify.
# env: run_ml_env.sh (every check in env -i, the peer's, speed rounds, runs of the machine's CUDA tools logged).
# testers: torch's passthru.tests tester-* programs (writeGpuTestPython), in env -i with a writable HOME.
# Logs: /tmp/subst and $OUT/subst.tar.gz (the device tool returns at most 8 files).
set -uo pipefail
name=${1:?NAME}; rounds=${2:-3}; parts=${3:-subst,env,testers}
here=$(cd "$(dirname "$0")" && pwd); repo=$(dirname "$(dirname "$here")")
dest=/tmp/carry/$name; x=$dest/x; log=/tmp/subst; mkdir -p "$log"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
want() { case ",$parts," in *",$1,"*) return 0;; *) return 1;; esac; }
finish() { cat /proc/loadavg > "$log/loadavg.txt"; [ -z "${OUT:-}" ] || tar -czf "$OUT/subst.tar.gz" -C "$log" .; }
trap finish EXIT
manifest=$dest/manifest.json
store=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["storeDir"])' "$manifest") || exit 2
status=0
if want subst; then
  {
    echo "== machine: $(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader), $(nproc) CPUs"
    python3 "$here/check_pieces.py" "$dest" || exit 3
    rm -rf "$x"; mkdir -p "$x"
    tar -C "$x" --no-same-owner -xf "$dest/closure.tar.zst" && rm -f "$dest/closure.tar.zst" || exit 4
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$x"/wheels/*.whl 2>&1 | grep -v "^WARNING: Running pip"
    [ -x /root/.pyenv/versions/3.12.1/bin/python3.12 ] || tar -C / --no-same-owner -xzf "$x/cpython-3.12.1.tar.gz" || exit 5
    echo "cache: $(ls "$x/cache" | grep -c '\.narinfo$') narinfos, $(du -sh "$x/cache" | cut -f1); roots:"; cat "$x/roots.txt"
  } 2>&1 | tee "$log/subst.log"
  [ "${PIPESTATUS[0]}" = 0 ] || exit 3
  export PYTHONPATH=$repo/src:/tmp/site
  roots=$(cut -d' ' -f2 "$x/roots.txt")
  {
    [ ! -e "$store" ] || { echo "$store exists already: a fresh store is needed"; exit 6; }
    other="other-1:$(python3 -c 'import base64,os; print(base64.b64encode(os.urandom(32)).decode())')"
    echo "== copy --from with only an unrelated key trusted (expected: refused, nothing registered)"
    python3 -m cudapkgs copy --store "$store" --from "file://$x/cache" --trusted-public-key "$other" $roots 2>&1 | tail -n 3
    echo "exit status: ${PIPESTATUS[0]} (expected 1); valid paths now: $(python3 -c "from cudapkgs.store.store import Store; print(len(Store.open('$store').all_paths()))")"
    echo "== copy --from file:// with the cache's key trusted: $(cat "$x/public.key")"
    TIMEFORMAT="copy --from: %R s wall, %U s user, %S s system (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
    time python3 -m cudapkgs copy --store "$store" --from "file://$x/cache" --trusted-public-key "$(cat "$x/public.key")" \
      $roots 2>&1 || exit 7
    echo "== verify"
    python3 -m cudapkgs verify --store "$store" || exit 8
    echo "valid paths: $(python3 -c "from cudapkgs.store.store import Store; print(len(Store.open('$store').all_paths()))")"
  } 2>&1 | tee -a "$log/subst.log"
  [ "${PIPESTATUS[0]}" = 0 ] || exit 7
fi
export PYTHONPATH=$repo/src:/tmp/site
env=$(awk '$1 == "env" {print $2}' "$x/roots.txt")
if want env; then
  echo "== ML environment (env -i) and the peer"
  OUT=$log STORE=$store bash "$here/run_ml_env.sh" "$env/bin/python3" "$rounds" 2>&1 | tee "$log/ml-env.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=9
fi
if want testers; then
  echo "== torch's testers (env -i)" | tee "$log/testers.log"
  mkdir -p /tmp/home-testers
  for tester in $(awk '$1 ~ /^tester-/ {print $2}' "$x/roots.txt"); do
    for program in "$tester"/bin/*; do
      echo "+ $program" | tee -a "$log/testers.log"
      env -i HOME=/tmp/home-testers PATH=/usr/bin:/bin NCCL_NVLS_ENABLE=0 "$program" 2>&1 | tail -n 5 | tee -a "$log/testers.log"
      rc=${PIPESTATUS[0]}; echo "exit status: $rc" | tee -a "$log/testers.log"
      [ "$rc" = 0 ] || status=10
    done
  done
fi
exit $status
