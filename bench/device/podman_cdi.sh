#!/usr/bin/env bash
# The CDI spec cudapkgs generates, consumed by a real container runtime (issue 13, part 1).
#
# usage: bash bench/device/podman_cdi.sh DIR [--no-gpu]
#   DIR holds what was prepared on the dev machine (see docs/cdi-podman.md):
#     debs/        Debian's podman, crun, conmon, containers-common and the libraries they need
#     rootfs.tar.gz a minimal root file system (bench/device/make_rootfs.py, saxpy closure inside)
#     whl/         the cudapkgs wheel and the wheels of its missing dependencies
#     saxpy/saxpy-path  the saxpy store path inside the image
#   --no-gpu: a rehearsal on a machine without a GPU (a hand-written spec over /dev/null).
# Nothing is unpacked over /: the packages go to $W/prefix, storage to $W/storage; the only
# file written outside $W is /etc/containers/policy.json, and only when the machine has none
# (podman 4.3 has no other way to be given a signature policy).  Every command is echoed with
# "$ " before its output.  Results: $OUT/podman.log (and the spec).
set -uo pipefail
DIR=$(cd "${1:?usage: podman_cdi.sh DIR [--no-gpu]}" && pwd)
NOGPU=${2:-}
OUT=${OUT:-/tmp/podman-cdi-out}
W=${W:-/tmp/podman-cdi}
HERE=$(cd "$(dirname "$0")" && pwd)
IMAGE=localhost/cudapkgs-minimal:1
# crun 1.8 refuses a hybrid cgroup layout (v1 controllers + a cgroup2 "unified" mount);
# inside a private mount namespace the unified mount is dropped, the host keeps it.
if [ -z "${PODMAN_CDI_INNER:-}" ] && mountpoint -q /sys/fs/cgroup/unified 2>/dev/null; then
  echo "hybrid cgroups here: continuing in a private mount namespace without /sys/fs/cgroup/unified"
  exec unshare -m --propagation private env PODMAN_CDI_INNER=1 bash -c \
    'umount /sys/fs/cgroup/unified && exec bash "$0" "$@"' "$0" "$@"
fi
mkdir -p "$OUT"
exec > >(tee "$OUT/podman.log") 2>&1

step() { echo "\$ $*"; "$@"; local rc=$?; [ $rc -eq 0 ] || echo "(exit status $rc)"; return $rc; }
FAILED=()
check() { local name=$1; shift; if step "$@"; then echo "[ok] $name"; else FAILED+=("$name"); echo "[FAILED] $name"; fi; }

echo "== machine"
uname -srm; grep PRETTY_NAME /etc/os-release
step nvidia-smi -L || true
mount | grep -E 'cgroup' | head -12
echo "capabilities: $(grep CapEff /proc/self/status)"; echo "limits: nofile $(ulimit -Hn) nproc $(ulimit -Hu)"

echo "== cudapkgs in its own venv (the hooks run as /tmp/cpv/bin/cudapkgs, with no PATH)"
rm -rf /tmp/cpv
step python3 -m venv --system-site-packages /tmp/cpv
if ! step /tmp/cpv/bin/pip install -q --no-index --no-deps --no-compile "$DIR"/whl/*.whl; then
  # A rehearsal on another Python than the device's 3.12: its dependencies from the index.
  [ -n "$NOGPU" ] && step /tmp/cpv/bin/pip install -q "$(ls "$DIR"/whl/cudapkgs-*.whl)" || exit 2
fi
# The image's own Python packages (nvidia-ml-py for NVML, attrs, PyYAML, rich) come after ours.
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$(echo /tmp/cpv/lib/python3*/site-packages)/zz-image-site.pth"
CP=/tmp/cpv/bin/cudapkgs
step $CP --version || true

echo "== podman, crun, conmon from Debian packages, unpacked under $W/prefix"
rm -rf "$W"; mkdir -p "$W/prefix" "$W/bin" "$W/lib" "$W/etc" "$W/storage" "$W/run"
for deb in "$DIR"/debs/*.deb; do dpkg-deb -x "$deb" "$W/prefix" || exit 3; done
# Only the libraries this machine lacks go on the loader path (its own newer ones win).
for so in "$W"/prefix/lib/x86_64-linux-gnu/*.so.* "$W"/prefix/usr/lib/x86_64-linux-gnu/*.so.*; do
  [ -e "$so" ] || continue
  b=$(basename "$so"); ldconfig -p | grep -q " $b " || ln -sf "$so" "$W/lib/$b"
done
echo "libraries carried for this machine: $(ls "$W/lib" | grep -c '\.so\.[0-9]*$') ($(ls "$W/lib" | grep -E '\.so\.[0-9]+$' | tr '\n' ' '))"
for b in crun conmon; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$W/lib" "$W/prefix/usr/bin/$b" > "$W/bin/$b"; chmod +x "$W/bin/$b"
done
cat > "$W/etc/containers.conf" <<EOF
[containers]
netns = "none"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "crun"
conmon_path = ["$W/bin/conmon"]
[engine.runtimes]
crun = ["$W/bin/crun"]
EOF
printf '[storage]\ndriver = "vfs"\nrunroot = "%s"\ngraphroot = "%s"\n' "$W/run" "$W/storage" > "$W/etc/storage.conf"
echo 'unqualified-search-registries = []' > "$W/etc/registries.conf"
if [ ! -e /etc/containers/policy.json ]; then
  mkdir -p /etc/containers && echo '{"default":[{"type":"insecureAcceptAnything"}]}' > /etc/containers/policy.json
  echo "wrote /etc/containers/policy.json (there was none)"
fi
export CONTAINERS_CONF=$W/etc/containers.conf CONTAINERS_STORAGE_CONF=$W/etc/storage.conf CONTAINERS_REGISTRIES_CONF=$W/etc/registries.conf
podman() { LD_LIBRARY_PATH=$W/lib "$W/prefix/usr/bin/podman" "$@"; }
crun() { "$W/bin/crun" "$@"; }
step podman --version
step crun --version | head -1

# podman asks for nofile/nproc limits above what this VM grants (crun: "setrlimit: Operation
# not permitted"): ask for modest ones.
ULIMITS=(--ulimit nofile=8192:8192 --ulimit nproc=8192:8192)

echo "== the spec, generated here by cudapkgs"
mkdir -p /var/run/cdi /etc/cdi
if [ -n "$NOGPU" ]; then
  # The hooks as `cdi generate` would emit them from this venv (HookProgram.at(None)), over /dev/null.
  /tmp/cpv/bin/python - "$HERE/check_saxpy.py" > /var/run/cdi/rehearsal.json <<'PY'
import json, sys
from cudapkgs.containers.generate import HookProgram
p = HookProgram.at(None)
hook = lambda *a: {"hookName": "createContainer", "path": p.path, "args": [*p.prefix, *a], "env": ["NVIDIA_CTK_DEBUG=false"]}
node = {"path": "/dev/nvidia0", "hostPath": "/dev/null"}
print(json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
  "devices": [{"name": "0", "containerEdits": {"deviceNodes": [node]}}, {"name": "all", "containerEdits": {"deviceNodes": [node]}}],
  "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
    "mounts": [{"hostPath": sys.argv[1], "containerPath": "/usr/local/nvidia/bin/check_saxpy.py", "options": ["ro", "nosuid", "nodev", "bind"]}],
    "hooks": [hook("create-symlinks", "--link", "check_saxpy.py::/usr/local/nvidia/bin/link.py"), hook("enable-cuda-compat", "--host-driver-version=580.159.04"),
              hook("update-ldcache", "--folder", "/usr/local/nvidia/bin"), hook("disable-device-node-modification")]}}))
PY
else
  check generate $CP cdi generate --device-name-strategy index,uuid --device-name-strategy type-index --output /var/run/cdi/nvidia.json
  cp /var/run/cdi/nvidia.json "$OUT/spec.json"
  check generate-management $CP cdi generate --mode management --output /var/run/cdi/nvidia-management.json
  cp /var/run/cdi/nvidia-management.json "$OUT/spec-management.json"
fi
check validate $CP cdi validate --check-host /var/run/cdi/*.json
step $CP cdi list
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 2>/dev/null | head -1)
echo "GPU 0 UUID: ${UUID:-none}"

echo "== an image without a registry"
check import podman import --change 'ENV=PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD=["/bin/sh"]' "$DIR/rootfs.tar.gz" $IMAGE
step podman images

echo "== podman run with CDI devices"
RUN=(podman run --rm "${ULIMITS[@]}")
if [ -n "$NOGPU" ]; then
  check rehearsal-all "${RUN[@]}" --device nvidia.com/gpu=all $IMAGE sh -c 'ls -l /dev/nvidia0 /usr/local/nvidia/bin; cat /etc/ld.so.conf.d/*; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES'
else
  check podman-all "${RUN[@]}" --device nvidia.com/gpu=all $IMAGE nvidia-smi -L
  check podman-0 "${RUN[@]}" --device nvidia.com/gpu=0 $IMAGE nvidia-smi -L
  check podman-uuid "${RUN[@]}" --device "nvidia.com/gpu=$UUID" $IMAGE nvidia-smi -L
  check podman-type-index-1 "${RUN[@]}" --device nvidia.com/gpu=gpu1 $IMAGE nvidia-smi -L
  check podman-two "${RUN[@]}" --device nvidia.com/gpu=0 --device nvidia.com/gpu=1 $IMAGE nvidia-smi -L
  check podman-management "${RUN[@]}" --device management.nvidia.com/gpu=all $IMAGE sh -c 'nvidia-smi -L && ls /dev/nvidia*'
  step "${RUN[@]}" --device nvidia.com/gpu=0 $IMAGE sh -c 'ls -l /dev/nvidia*; cat /etc/ld.so.conf.d/*; ls -l /usr/local/nvidia/lib64/libcuda.so*' || true
fi

echo "== saxpy's closure inside the container"
SAXPY="$(cat "$DIR/saxpy/saxpy-path")/bin/saxpy"
mkdir -p "$W/saxpy-out"
step "${RUN[@]}" --device nvidia.com/gpu=0 $IMAGE /lib64/ld-linux-x86-64.so.2 --list "$SAXPY" || true
if [ -z "$NOGPU" ]; then
  check saxpy "${RUN[@]}" --device nvidia.com/gpu=0 -v "$W/saxpy-out:/out" $IMAGE "$SAXPY" 16777216 /out/y.f32
  check saxpy-check python3 "$HERE/check_saxpy.py" "$W/saxpy-out/y.f32" 16777216
fi

echo "== crun on an OCI bundle edited by cudapkgs cdi inject"
B=$W/bundle; mkdir -p "$B/rootfs"
step tar -xzf "$DIR/rootfs.tar.gz" -C "$B/rootfs"
(cd "$B" && step crun spec) && python3 - "$B/config.json" "${NOGPU:+rehearsal}" <<'PY'
import json, sys
path = sys.argv[1]
c = json.load(open(path))
c["process"]["terminal"] = False
c["process"]["args"] = ["sh", "-c", "nvidia-smi -L || ls -l /dev/nvidia0" if sys.argv[2] else "nvidia-smi -L"]
c["process"]["env"] = ["PATH=/usr/local/nvidia/bin:/usr/bin:/bin"]
c["process"]["rlimits"] = []
c["root"]["readonly"] = False  # the update-ldcache hook writes /etc/ld.so.conf.d and /etc/ld.so.cache (podman's default too)
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
json.dump(c, open(path, "w"), indent=2)
PY
check inject $CP cdi inject /var/run/cdi nvidia.com/gpu=all --bundle "$B"
cp "$B/config.json" "$OUT/bundle-config.json"
echo "-- the spec's hooks by hand, as the runtime starts them (no PATH, OCI state on stdin):"
python3 - "$B" <<'PY'
import json, subprocess, sys
bundle = sys.argv[1]
state = json.dumps({"ociVersion": "1.0.2", "id": "by-hand", "status": "creating", "pid": 1, "bundle": bundle})
for hook in json.load(open(f"{bundle}/config.json")).get("hooks", {}).get("createContainer", []):
    r = subprocess.run(hook["args"], executable=hook["path"], env=dict(e.split("=", 1) for e in hook.get("env", [])) | {"NVIDIA_CTK_DEBUG": "true"},
                       input=state, capture_output=True, text=True)
    print(f"{hook['args'][:6]} ... exit {r.returncode}: {(r.stderr or '').strip()[-600:]}")
PY
check crun-run crun run -b "$B" cudapkgs-cdi-test

echo "== summary"
if [ ${#FAILED[@]} -eq 0 ]; then echo "ALL PASSED"; else echo "FAILED: ${FAILED[*]}"; exit 1; fi
