#!/usr/bin/env bash
# On the lent GPU machine, once every piece of NAME arrived (receive_piece.sh) and NAME's extras were unpacked
# (the interpreter tree at its own path, cudapkgs' wheels, the torch extension: see docs/ml-stack.md "On the GPU"):
# 1. assemble_closure.sh (sha256, import into the same store dir, verify), once;
# 2. run_ml_env.sh: every check in env -i, the peer's, ROUNDS alternating speed rounds, host-tool runs logged;
# 3. the cpp_extension kernel (issue 32) in env -i (check_torch_extension.py);
# 4. the same through `cudapkgs shell` (offline: the same derivations, already in the store): ml_env_gpu.py check
#    and the extension's check inside the shell.
# usage: [MORE="NAME2 …"] [CHECK_SKIP=torch,…] bash bench/device/run_gpu_proof.sh NAME [ROUNDS] [PARTS]
#   PARTS: any of assemble,env,ext,shell (default all); CHECK_SKIP: ml_env_gpu.py check's --skip in the shell
# Logs go to /tmp/proof and, as one tarball (the device tool returns at most 8 files), to $OUT/proof.tar.gz.
set -uo pipefail
name=${1:?NAME}; rounds=${2:-3}; parts=${3:-assemble,env,ext,shell}
here=$(cd "$(dirname "$0")" && pwd); repo=$(dirname "$(dirname "$here")")
carry=/tmp/carry/$name; extra=$carry/extra; log=/tmp/proof; mkdir -p "$log"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
status=0
want() { case ",$parts," in *",$1,"*) return 0;; *) return 1;; esac; }
finish() { cat /proc/loadavg > "$log/loadavg.txt"; [ -z "${OUT:-}" ] || tar -czf "$OUT/proof.tar.gz" -C "$log" .; }
trap finish EXIT
# MORE: further closures carried the same way whose paths refer to NAME's (pack_closure.py --without), imported after it
for each in "$name" ${MORE:-}; do
  if want assemble && [ ! -f "/tmp/carry/$each/imported" ]; then
    echo "== assemble $each"
    bash "$here/assemble_closure.sh" "$each" "$extra/wheels" 2>&1 | grep -v "^WARNING: Running pip" | tee "$log/assemble-$each.log"
    [ "${PIPESTATUS[0]}" = 0 ] && touch "/tmp/carry/$each/imported" || status=2
  fi
done
store=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["storeDir"])' "$carry/manifest.json")
env=$(python3 -c 'import json,sys; print(next(r for r in json.load(open(sys.argv[1]))["roots"] if r.endswith("-env-3.12.1")))' "$carry/manifest.json")
echo "store $store, env $env"
if want env; then
  echo "== ML environment (env -i) and the peer"
  OUT=$log STORE=$store bash "$here/run_ml_env.sh" "$env/bin/python3" "$rounds" 2>&1 | tee "$log/ml-env.log" || status=3
fi
if want ext; then
  echo "== the cpp_extension kernel (env -i)"
  python3 "$here/check_torch_extension.py" "$extra/torch-ext" 2>&1 | tee "$log/torch-ext.log" || status=4
fi
if want shell; then
  echo "== through cudapkgs shell"
  # the shell's packages: those of the torch extension's shell, or a smaller proof's (pack_shell_extras.py --shell)
  given=$extra/torch-ext; [ -f "$given/packages.txt" ] || given=$extra/shell
  mapfile -t packages < "$given/packages.txt"
  config=(); while read -r c; do config+=(--set "$c"); done < "$given/config.txt"
  py=/root/.pyenv/versions/3.12.1/bin
  # The shell rebuilds what names the host compiler (its gcc-wrapper, cuda_nvcc: the machine's gcc differs from
  # the packing machine's) and nothing else; cuda_nvcc comes from NVIDIA's wheel, carried into this wheel cache
  # (pack_shell_extras.py), since nothing outside is reachable.
  [ ! -d "$extra/cache" ] || export XDG_CACHE_HOME=$extra/cache
  echo "host compiler: $(gcc --version 2>/dev/null | head -n 1)" | tee "$log/shell-host.txt"
  # cudapkgs itself runs on the machine's python3 (its dependencies: the image's and /tmp/site); the carried
  # CPython 3.12.1 comes first on PATH, so python312Packages finds the interpreter the closure was built for.
  host_python=$(command -v python3)
  ext=$extra/torch-ext/ext
  PATH=$py:$PATH PYTHONPATH=$repo/src:/tmp/site "$host_python" -m cudapkgs shell "${config[@]}" \
    --set "storeDir=$store" --set "python3Executable=$py/python3.12" --no-substitute --no-venv "${packages[@]}" \
    --command sh -c "rc=0; echo python3: \$(command -v python3); echo nvcc: \$(command -v nvcc); \
      env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort; \
      python3 '$here/ml_env_gpu.py' check --store '$store' --skip '${CHECK_SKIP:-}' --out '$log/shell-check.json' || rc=1; \
      [ ! -d '$ext' ] || PYTHONPATH='$ext':\$PYTHONPATH python3 -c 'import torch, axpy_ext; x = torch.arange(8., device=\"cuda\"); \
y = axpy_ext.axpy(x, x, 2.5); assert torch.equal(y, 3.5 * x), y; print(\"axpy_ext in the shell:\", y.tolist(), axpy_ext.__file__)' || rc=1; exit \$rc" \
    2>&1 | tee "$log/shell.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=5
fi
exit $status
