#!/usr/bin/env bash
# The real-GPU check: gpubind against the node's own NVIDIA driver, as root.
# Machines without a GPU run the simulated node's tests instead; this script
# is for a node with the driver (it changes nothing outside WORK).
#
#   tests/gpu/check.sh BIN WORK [BUSYBOX]
#
# BIN holds gpubind, gpubind-hook, gpubind-runtime and gpubind-nvml; runc is
# taken from PATH; BUSYBOX is a static busybox (default: the one in PATH).
# The image is made from this host's glibc and busybox, with cuda-probe
# (tests/gpu/cuda_probe.c, built here) in it. Each check prints PASS or FAIL
# with what it saw; the exit status is the number of failures.
set -uo pipefail
bin=$(realpath "$1")
work=$(realpath -m "$2")
busybox=${3:-$(command -v busybox)}
here=$(cd "$(dirname "$0")" && pwd)
gpubind=$bin/gpubind
failures=0

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
step() { echo; echo "== $*"; }
# check LABEL COMMAND...: PASS when it exits 0
check() { local label=$1; shift; if "$@"; then pass "$label"; else fail "$label (exit $?)"; fi; }

umount "$work/bpf" 2>/dev/null
rm -rf "$work" && mkdir -p "$work/state" "$work/cdi" "$work/bpf"
# cgroup v2: the device programs kept for reuse on a bpffs of this check's own.
bpf_dir=""
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && mount -t bpf -o mode=0700 bpf "$work/bpf"; then
  bpf_dir=$work/bpf/gpubind
  trap 'umount "$work/bpf"' EXIT
fi
# GPU_CHECK_NODE: a simulated node to try this script on (no CUDA there)
node=${GPU_CHECK_NODE:-}
cat >"$work/config.toml" <<EOF
[node]
state-dir = "$work/state"
bpf-dir = "$bpf_dir"
${node:+driver-root = \"$node\"
dev-root = \"$node\"
proc-root = \"$node/proc\"}
[cdi]
dir = "$work/cdi"
hook = "$bin/gpubind-hook"
spec-dirs = ["$work/cdi"]
[log]
file = "$work/gpubind.log"
level = "debug"
EOF
export GPUBIND_CONFIG=$work/config.toml

step "the node, as the driver's own tools see it"
uname -r
head -1 /proc/driver/nvidia/version
nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,driver_version,compute_cap --format=csv,noheader \
  | tee "$work/smi.csv"
ls -l /dev/nvidia* 2>&1
grep -i nvidia /proc/devices
ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so|libnvidia-ptxjit'
stat -fc 'cgroup fs: %T' /sys/fs/cgroup
command -v runc && runc --version | head -1

step "gpubind info (the node described once, NVML asked for what only it knows)"
"$gpubind" info --refresh | tee "$work/info.txt"
check "gpubind info exits 0" test "${PIPESTATUS[0]}" -eq 0
"$gpubind" info --json >"$work/info.json"
driver=$(head -1 /proc/driver/nvidia/version | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -1)
check "info names the driver version $driver" grep -q "$driver" "$work/info.txt"
while IFS=', ' read -r index uuid bus _; do
  check "info lists GPU $index ($uuid)" grep -q "$uuid" "$work/info.txt"
  busid=$(echo "$bus" | tr 'A-F' 'a-f' | sed 's/^0000//')
  check "info has GPU $index's bus id ${busid}" grep -qi "${busid}" "$work/info.txt"
done <"$work/smi.csv"

step "gpubind list (what a compute,utility container gets)"
"$gpubind" list -c compute,utility | tee "$work/list.txt"
for lib in libcuda.so libnvidia-ml.so libnvidia-ptxjitcompiler.so; do
  host=$(ldconfig -p | awk -v l="$lib" '$1 ~ "^"l"\\.1$" && /x86-64/ {print $NF; exit}')
  if [ -n "$host" ]; then
    real=$(realpath "$host")
    check "list has $lib ($real)" grep -qF "$real" "$work/list.txt"
  fi
done
check "list has nvidia-smi" grep -q 'nvidia-smi' "$work/list.txt"
check "list has /dev/nvidiactl" grep -q '/dev/nvidiactl' "$work/list.txt"
while read -r path; do
  [ -e "$path" ] || fail "list names $path, which does not exist"
done < <(grep -oE '(^| )/[^ ]+' "$work/list.txt" | tr -d ' ' | sort -u)

step "gpubind doctor"
"$gpubind" doctor; echo "doctor exit $?"

step "gpubind cdi generate"
check "cdi generate" "$gpubind" cdi generate -o "$work/cdi/nvidia.json"
check "the CDI spec is JSON" python3 -m json.tool "$work/cdi/nvidia.json" /dev/null
"$gpubind" cdi list --spec "$work/cdi/nvidia.json"

step "the image: this host's glibc, busybox and cuda-probe"
image=$work/image
mkdir -p "$image"/{bin,usr/bin,proc,sys,dev,tmp,etc,lib64,lib/x86_64-linux-gnu}
cp "$busybox" "$image/bin/busybox"
for tool in sh ls cat true grep wc env; do ln -s busybox "$image/bin/$tool"; done
for lib in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libgcc_s.so.1; do
  [ -e "/lib/x86_64-linux-gnu/$lib" ] && cp -L "/lib/x86_64-linux-gnu/$lib" "$image/lib/x86_64-linux-gnu/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$image/lib64/"
echo /lib/x86_64-linux-gnu >"$image/etc/ld.so.conf"
ldconfig -r "$image"
cc -O2 -o "$image/usr/bin/cuda-probe" "$here/cuda_probe.c" -ldl \
  || cp "$bin/cuda-probe" "$image/usr/bin/cuda-probe"

# bundle NAME ENV... : a bundle whose container runs the probe script ($SCRIPT
# instead where set; $CDI: a CDI device the spec names by annotation)
bundle() {
  local name=$1; shift
  python3 - "$work/$name" "$image" "$bin/gpubind-hook" "$GPUBIND_CONFIG" "$@" <<'EOF'
import json, os, sys
path, image, hook, config, *env = sys.argv[1:]
hooked = "hook" in os.path.basename(path)
os.makedirs(path, exist_ok=True)
script = os.environ.get("SCRIPT") or (
    "nvidia-smi -L; echo smi=$?; cuda-probe; echo probe=$?; "
    "ls /dev | grep nvidia | tr '\\n' ' '; echo; ls /proc/driver/nvidia/gpus 2>&1")
uid = int(os.environ.get("PROBE_UID", "0"))
spec = {
    "ociVersion": "1.0.2",
    "process": {"user": {"uid": uid, "gid": uid}, "args": ["/bin/sh", "-c", script],
                "env": ["PATH=/usr/bin:/bin"] + env, "cwd": "/", "noNewPrivileges": True},
    "root": {"path": "rootfs", "readonly": False},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
               {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
               {"destination": "/sys", "type": "sysfs", "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"]}],
    "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]},
              "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
}
if hooked:  # poststop too: it undoes what a start set on the node (a GPU share)
    spec["hooks"] = {stage: [{"path": hook, "args": ["gpubind-hook", stage],
                              "env": [f"GPUBIND_CONFIG={config}"]}]
                     for stage in ("prestart", "poststop")}
if os.environ.get("CDI"):
    spec["annotations"] = {"cdi.k8s.io/gpubind-check": os.environ["CDI"]}
json.dump(spec, open(f"{path}/config.json", "w"))
EOF
}

# run NAME RUNTIME: a fresh overlay of the image for each start
run() {
  local name=$1 runtime=$2 root=$work/$1/rootfs layer=$work/$1/layer
  mkdir -p "$root" "$layer/upper" "$layer/work"
  mount -t overlay overlay -o "lowerdir=$image,upperdir=$layer/upper,workdir=$layer/work" "$root"
  "$runtime" --root "$work/runc" run --bundle "$work/$name" "gpubind-check-$name" >"$work/$name.out" 2>&1
  local rc=$?
  umount "$root"
  rm -rf "$layer"
  cat "$work/$name.out"
  return $rc
}

all_uuids=$(cut -d, -f2 "$work/smi.csv" | tr -d ' ')
# A simulated node's nvidia-smi knows only -L: its UUIDs from gpubind info.
[ -n "$all_uuids" ] || all_uuids=$(awk '$1 == "UUID:" {print $2}' "$work/info.txt")
first_uuid=$(echo "$all_uuids" | head -1)
caps=NVIDIA_DRIVER_CAPABILITIES=compute,utility

step "a container without gpubind: no GPU"
bundle bare NVIDIA_VISIBLE_DEVICES=all "$caps"
run bare runc
check "no libcuda without gpubind" grep -q 'probe=1' "$work/bare.out"

step "gpubind-hook, NVIDIA_VISIBLE_DEVICES=all"
bundle hook-all NVIDIA_VISIBLE_DEVICES=all "$caps"
check "runc run with the hook" run hook-all runc
for uuid in $all_uuids; do
  check "nvidia-smi in the container lists $uuid" grep -q "(UUID: $uuid)" "$work/hook-all.out"
  check "CUDA ran a kernel on $uuid" grep -qi "$uuid: a PTX kernel ran" "$work/hook-all.out"
done
if [ -n "$bpf_dir" ]; then
  check "its device program is kept for the next start" bash -c "ls '$bpf_dir' | grep -q '^dev-'"
fi

step "gpubind-hook, NVIDIA_VISIBLE_DEVICES=$first_uuid"
bundle hook-uuid "NVIDIA_VISIBLE_DEVICES=$first_uuid" "$caps"
check "runc run with one GPU by UUID" run hook-uuid runc
check "CUDA sees exactly one device" grep -q ', 1 device(s)' "$work/hook-uuid.out"
check "nvidia-smi lists exactly that GPU" test "$(grep -c '(UUID: GPU-' "$work/hook-uuid.out")" -eq 1

step "gpubind-hook, NVIDIA_VISIBLE_DEVICES=none (driver files, no GPU)"
bundle hook-none NVIDIA_VISIBLE_DEVICES=none "$caps"
run hook-none runc
check "nvidia-smi runs and lists no GPU" bash -c "grep -q 'No devices' '$work/hook-none.out' && ! grep -q '(UUID: GPU-' '$work/hook-none.out'"
check "no /dev/nvidia0" bash -c "! grep -q 'nvidia0' '$work/hook-none.out'"

step "gpubind-hook, NVIDIA_REQUIRE_CUDA the driver cannot meet"
bundle hook-require NVIDIA_VISIBLE_DEVICES=all "$caps" 'NVIDIA_REQUIRE_CUDA=cuda>=99.0'
# Refused for that reason, the driver's CUDA version named: not any failure.
refusal='gpubind-hook: check requirement NVIDIA_REQUIRE_CUDA: cuda>=99.0 not satisfied: the driver supports CUDA [0-9]'
if run hook-require runc >/dev/null; then fail "cuda>=99.0 started"
elif grep -q "$refusal" "$work/hook-require.out"; then pass "cuda>=99.0 refused: $(grep -o -m1 'the driver supports CUDA [0-9.]*' "$work/hook-require.out")"
else fail "cuda>=99.0 failed, but not refused for CUDA: $(tail -c 300 "$work/hook-require.out")"; fi
bundle hook-require12 NVIDIA_VISIBLE_DEVICES=all "$caps" 'NVIDIA_REQUIRE_CUDA=cuda>=12.0'
check "cuda>=12.0 starts" run hook-require12 runc

step "through gpubind-runtime (the shim), NVIDIA_VISIBLE_DEVICES=all"
bundle shim NVIDIA_VISIBLE_DEVICES=all "$caps"
check "gpubind-runtime run" run shim "$bin/gpubind-runtime"
check "CUDA ran a kernel through the shim" grep -q 'a PTX kernel ran' "$work/shim.out"
check "nvidia-smi runs through the shim" grep -q "(UUID: $first_uuid)" "$work/shim.out"

step "GPU shares: two containers on $first_uuid, each given a quarter of its memory"
# Each allocates 80 % of its share (must succeed) and 120 % (must fail with
# CUDA_ERROR_OUT_OF_MEMORY, 2), both containers at once, through the hook,
# the shim and a CDI device; where gpubind info names no mechanism, a share
# is refused with one line instead.
total_mib=$(nvidia-smi -i "$first_uuid" --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -d ' ')
[ -n "$total_mib" ] || total_mib=$(($(awk '$1 == "Memory:" {print $2; exit}' "$work/info.txt") * 1024))
quarter=$((total_mib / 4))
low=$((quarter * 1048576 * 8 / 10)) high=$((quarter * 1048576 * 12 / 10))
export SCRIPT="cuda-probe alloc $low; cuda-probe alloc $high"
share_env=("NVIDIA_VISIBLE_DEVICES=$first_uuid" "$caps" "GPUBIND_GPU_MEMORY=${quarter}MiB")
if grep -q '^GPU shares: .*enforced by MPS' "$work/info.txt"; then
  echo "$(grep '^GPU shares:' "$work/info.txt"): the MPS check below"
elif grep -q '^GPU shares: .*enforced by' "$work/info.txt"; then
  echo "$(grep '^GPU shares:' "$work/info.txt"); a quarter: $quarter MiB"
  for via in hook shim cdi; do
    runtime=runc
    [ "$via" = hook ] || runtime=$bin/gpubind-runtime
    for k in 1 2; do
      if [ "$via" = cdi ]; then
        CDI="nvidia.com/gpu=$first_uuid" bundle "share-$via-$k" "$caps" "GPUBIND_GPU_MEMORY=${quarter}MiB"
      else
        bundle "share-$via-$k" "${share_env[@]}"
      fi
      run "share-$via-$k" "$runtime" >/dev/null &
    done
    wait
    for k in 1 2; do
      out=$work/share-$via-$k.out
      check "$via, container $k: 80 % of its share allocated" grep -q "alloc $low result=0" "$out"
      check "$via, container $k: 120 % refused, out of memory" grep -q "alloc $high result=2" "$out"
    done
  done
  check "nothing left set after the containers (state-dir/shares empty)" \
    bash -c "[ -z \"\$(ls -A '$work/state/shares' 2>/dev/null)\" ]"
else
  echo "$(grep '^GPU shares:' "$work/info.txt")"
  bundle share-refused-hook "${share_env[@]}"
  if run share-refused-hook runc >/dev/null; then fail "a share started on a node that cannot enforce it"
  elif grep -q 'check share GPUBIND_GPU_MEMORY=.*this node cannot enforce a GPU share' "$work/share-refused-hook.out"; then
    pass "a share is refused in one line: $(grep -o -m1 'cannot enforce a GPU share: .*' "$work/share-refused-hook.out" | cut -c1-120)"
  else fail "a share failed, but not refused for the node: $(tail -c 300 "$work/share-refused-hook.out")"; fi
fi
unset SCRIPT

step "GPU shares under MPS: two containers, a quarter of $first_uuid each (gpubind mps)"
control=$(command -v nvidia-cuda-mps-control || true)
if ! grep -q '^GPU shares: .*enforced by MPS' "$work/info.txt"; then
  echo "SKIP gpubind info names another mechanism, or none: $(grep '^GPU shares:' "$work/info.txt")"
else
  total_mib=$(nvidia-smi -i "$first_uuid" --query-gpu=memory.total --format=csv,noheader,nounits | tr -d ' ')
  quarter=$((total_mib / 4))
  share=$((quarter * 1024 * 1024))
  cat >>"$work/config.toml" <<EOF
[mps]
root = "$work/mps"
memory = "${quarter}M"
compute = 25
EOF
  # gpubind mps leaves the compute mode as it is: exclusive-process, set here.
  nvidia-smi -i "$first_uuid" -c EXCLUSIVE_PROCESS
  "$gpubind" mps --gpu "$first_uuid" &
  mps_pid=$!
  for _ in $(seq 100); do [ -e "$work/mps/$first_uuid/limits" ] && break; sleep 0.1; done
  check "gpubind mps wrote the daemon's ceilings" test -e "$work/mps/$first_uuid/limits"
  mps_ask() { echo "$1" | CUDA_MPS_PIPE_DIRECTORY="$work/mps/$first_uuid/pipe" "$control"; }
  allocs="cuda-probe alloc $((share * 8 / 10)); sleep 2; cuda-probe alloc $((share * 12 / 10))"
  SCRIPT=$allocs bundle shim-mps-a "NVIDIA_VISIBLE_DEVICES=$first_uuid" "$caps" \
    "GPUBIND_GPU_MEMORY=${quarter}MiB" GPUBIND_GPU_COMPUTE=25
  PROBE_UID=1000 SCRIPT=$allocs bundle shim-mps-b "NVIDIA_VISIBLE_DEVICES=$first_uuid" "$caps" \
    "GPUBIND_GPU_MEMORY=${quarter}MiB" GPUBIND_GPU_COMPUTE=25
  run shim-mps-a "$bin/gpubind-runtime" >/dev/null &
  a=$!
  run shim-mps-b "$bin/gpubind-runtime" >/dev/null &
  b=$!
  sleep 1
  mps_ask get_server_list | tee "$work/mps-servers"
  check "the MPS server list names a server while both run" test -s "$work/mps-servers"
  wait "$a" "$b"
  for c in a b; do
    check "container $c: 80 % of its share allocates" \
      grep -q "alloc $((share * 8 / 10)) result=0" "$work/shim-mps-$c.out"
    check "container $c: 120 % of its share is out of memory" \
      grep -q "alloc $((share * 12 / 10)) result=2" "$work/shim-mps-$c.out"
  done
  check "the daemon's active thread percentage is the compute share" \
    test "$(mps_ask get_default_active_thread_percentage)" = 25.0
  kill -TERM "$mps_pid"
  wait "$mps_pid"
  check "gpubind mps quit its daemon" test ! -e "$work/mps/$first_uuid/pipe/control"
  nvidia-smi -i "$first_uuid" -c DEFAULT
fi

step "where the hook's time goes: 20 starts, medians of its debug timings (debug logging included)"
: >"$work/gpubind.log"
for _ in $(seq 20); do run hook-all runc >/dev/null; done
python3 - "$work/gpubind.log" <<'EOF'
import re, statistics, sys
fields = {}
for line in open(sys.argv[1]):
    for part in re.findall(r"(?:timing|execution): (.*)", line):
        for name, us in re.findall(r"([a-z][a-z ,]*?) (\d+) us", part):
            fields.setdefault(name.strip(" ,"), []).append(int(us))
    m = re.search(r"device cgroup \S+ located in (\d+) us", line)
    if m:
        fields.setdefault("device cgroup: located", []).append(int(m[1]))
    m = re.search(r"\(read in (\d+) us, ready in (\d+) us\)", line)
    if m:
        fields.setdefault("device program: runtime's read", []).append(int(m[1]))
        fields.setdefault("device program: ours ready", []).append(int(m[2]))
    m = re.search(r"fingerprint (\d+) us, reading and parsing (\d+) us", line)
    if m:
        fields.setdefault("description: fingerprint", []).append(int(m[1]))
        fields.setdefault("description: read and parse", []).append(int(m[2]))
for name, xs in fields.items():
    print(f"{name:<32} {statistics.median(xs):6.0f} us  (n={len(xs)})")
EOF

step "the log's warnings and errors"
grep -E '\[(warning|error)\]' "$work/gpubind.log" | sort | uniq -c | head -20

step "result: $failures failure(s)"
exit "$failures"
