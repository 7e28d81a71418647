#!/bin/sh
# validate.sh SEAL GPUBIND GO_SOURCE OUT_DIR
#
# gpubind's CDI specs judged by the CDI reference library (issue 23):
# cdi_validate.go, built against Debian's
# golang-github-container-orchestrated-devices-container-device-interface-dev
# (0.5.2, the library podman 4.3 reads specs with) with GOPATH=/usr/share/gocode
# and no modules, so no network. Its binary and Go's build cache stay in
# OUT_DIR (the build tree): a rerun only relinks.
#
# Then, sealed (SEAL: tests/support/seal.c; root, for mknod): a simulated node
# with 4 GPUs (a MIG device), IMEX channels, 2 HCAs, 2 NVMe controllers,
# NVSwitches, GDS, gdrcopy and DRM; `gpubind cdi refresh` writes its specs;
#   - every spec is read by the library without error, the families' kinds
#     (nvidia.com/mofed, gdrcopy, gds, nvswitch) among them;
#   - nvidia.com/gpu=0 with nvidia.com/mofed=mlx5_0 injected into an empty OCI
#     spec gives exactly /dev/nvidia0, the GPU spec's common nodes,
#     /dev/infiniband/uverbs0 and /dev/infiniband/rdma_cm (not uverbs1), each
#     with the simulated node's own numbers; nvidia.com/gds=all the nvidia-fs
#     nodes and /etc/cufile.json read-only;
#   - a spec corrupted on purpose (a device node without a path) is refused,
#     by the reading and by the injection: the checks above can fail.
# No Go toolchain or no library is a failure saying what to install, never a skip.
set -eu
fail() { echo "validate.sh: FAIL: $*" >&2; exit 1; }

if [ "${1:-}" != --sealed ]; then
    [ $# -eq 4 ] || { echo "usage: validate.sh SEAL GPUBIND GO_SOURCE OUT_DIR" >&2; exit 2; }
    seal=$1 cli=$2 source=$3 out=$4
    gopath=/usr/share/gocode
    library=$gopath/src/github.com/container-orchestrated-devices/container-device-interface
    command -v go >/dev/null 2>&1 ||
        fail "no Go toolchain ('go' is not in PATH): install golang-go (scripts/deps does)"
    [ -d "$library/pkg/cdi" ] ||
        fail "the CDI reference library is not in $library: install" \
            "golang-github-container-orchestrated-devices-container-device-interface-dev (scripts/deps does)"
    mkdir -p "$out/go-cache"
    out=$(cd "$out" && pwd)  # Go wants its cache absolute
    # Go's environment only: no user's go env file, no module proxy, no cgo.
    if ! env GOENV=off GO111MODULE=off GOPATH="$gopath" GOCACHE="$out/go-cache" GOPROXY=off \
        GOFLAGS= CGO_ENABLED=0 GOTOOLCHAIN=local \
        go build -o "$out/cdi_validate" "$source" >"$out/go-build.log" 2>&1; then
        cat "$out/go-build.log" >&2
        fail "cannot build $source with $(go version) against $library"
    fi
    exec "$seal" /bin/sh "$0" --sealed "$cli" "$out/cdi_validate"
fi

cli=$2 validator=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
node=$work/node specs=$work/cdi cfg=$work/config.toml

"$cli" simulate "$node" --gpus 4 --mig 1:1:0 --imex-channels 2 --hcas 2 --nvmes 2 \
    --nvswitch --gds --gdrcopy --drm >"$work/simulate.out" 2>&1 ||
    fail "gpubind simulate: $(cat "$work/simulate.out")"
cat >"$cfg" <<EOF
[node]
driver-root = "$node"
dev-root = "$node"
proc-root = "$node/proc"
sys-root = "$node/sys"
state-dir = "$work/state"
bpf-dir = "$work/bpf"
[log]
file = "$work/gpubind.log"
[cdi]
dir = "$specs"
EOF
"$cli" cdi refresh --config "$cfg" --dir "$specs" >"$work/refresh.out" 2>&1 ||
    fail "gpubind cdi refresh: $(cat "$work/refresh.out")"

# --- Every spec, read by the library ---
set -- "$specs"/*
[ -e "$1" ] || fail "gpubind cdi refresh wrote nothing in $specs"
status=0
"$validator" "$@" >"$work/read.out" 2>&1 || status=$?
cat "$work/read.out"
[ "$status" -eq 0 ] || fail "the CDI library refused gpubind's specs (exit $status)"
[ "$(grep -c '^ok ' "$work/read.out")" -eq $# ] ||
    fail "not one 'ok' line for each of the $# specs"
for kind in nvidia.com/gpu nvidia.com/imex-channel nvidia.com/mofed nvidia.com/gdrcopy \
    nvidia.com/gds nvidia.com/nvswitch; do
    grep -q "^ok $kind " "$work/read.out" || fail "no spec of kind $kind among them"
done
grep -q "^ok nvidia.com/mofed 3 devices " "$work/read.out" ||
    fail "the mofed spec does not offer mlx5_0, mlx5_1 and all"

# --- Injection into an empty OCI spec ---
inject() {  # name devices...: the lines of $work/<name>.out, or fail
    name=$1
    shift
    status=0
    "$validator" --inject "$(echo "$@" | tr ' ' ,)" --dirs "$specs" >"$work/$name.out" 2>&1 ||
        status=$?
    [ "$status" -eq 0 ] || fail "injecting $*: exit $status: $(cat "$work/$name.out")"
    grep '^device ' "$work/$name.out" | cut -d' ' -f2 | sort >"$work/$name.paths"
}
# Each injected node as the simulated node has it: a character device of the same numbers.
same_numbers() {  # name
    grep '^device ' "$work/$1.out" | while read -r _ path type numbers; do
        host=$node$path
        [ -c "$host" ] || fail "$1: injected $path is not a character device of the node ($host)"
        [ "$type" = c ] || fail "$1: injected $path has type $type, not c"
        [ "$(stat -c '%Hr:%Lr' "$host")" = "$numbers" ] ||
            fail "$1: injected $path is $numbers, the node's $(stat -c '%Hr:%Lr' "$host")"
    done
}

# The GPU spec's common nodes: what GPU 1 alone gives, less /dev/nvidia1.
inject gpu1 nvidia.com/gpu=1
grep -vx /dev/nvidia1 "$work/gpu1.paths" >"$work/common.paths" || true
grep -qx /dev/nvidia1 "$work/gpu1.paths" || fail "nvidia.com/gpu=1 gave no /dev/nvidia1"
grep -qx /dev/nvidiactl "$work/common.paths" || fail "the GPU spec's common nodes lack /dev/nvidiactl"
if grep -E '^/dev/(nvidia[0-9]+|infiniband/.*)$' "$work/common.paths"; then
    fail "the GPU spec's common nodes hold a GPU's or an HCA's node"
fi
same_numbers gpu1

inject gpu-hca nvidia.com/gpu=0 nvidia.com/mofed=mlx5_0
{
    cat "$work/common.paths"
    printf '%s\n' /dev/nvidia0 /dev/infiniband/uverbs0 /dev/infiniband/rdma_cm
} | sort >"$work/gpu-hca.want"
diff -u "$work/gpu-hca.want" "$work/gpu-hca.paths" ||
    fail "nvidia.com/gpu=0 with nvidia.com/mofed=mlx5_0 gave other device nodes (- wanted, + got)"
if grep -qx /dev/infiniband/uverbs1 "$work/gpu-hca.paths"; then fail "mlx5_0 gave uverbs1"; fi
same_numbers gpu-hca
grep -qx 'device /dev/infiniband/uverbs0 c 231:192' "$work/gpu-hca.out" ||
    fail "uverbs0 is not 231:192: $(grep uverbs0 "$work/gpu-hca.out")"
grep -qx 'env NVIDIA_VISIBLE_DEVICES=void' "$work/gpu-hca.out" ||
    fail "the GPU spec's NVIDIA_VISIBLE_DEVICES=void was not injected"
grep -q '^hook createRuntime ' "$work/gpu-hca.out" || fail "the GPU spec's createRuntime hook was not injected"

inject gds nvidia.com/gds=all
[ "$(grep -c '^/dev/nvidia-fs[0-9]*$' "$work/gds.paths")" -eq 16 ] ||
    fail "nvidia.com/gds=all did not give the 16 nvidia-fs nodes: $(cat "$work/gds.paths")"
if grep -v '^/dev/nvidia-fs[0-9]*$' "$work/gds.paths"; then
    fail "nvidia.com/gds=all gave nodes that are not nvidia-fs ones"
fi
same_numbers gds
grep '^mount /etc/cufile.json ' "$work/gds.out" | grep -q "^mount /etc/cufile.json $node/etc/cufile.json .*\bro\b" ||
    fail "nvidia.com/gds=all did not mount $node/etc/cufile.json read-only at /etc/cufile.json"

# --- A spec broken on purpose is refused ---
broken=$work/broken
cp -r "$specs" "$broken"
mofed=$broken/nvidia.com-mofed.json
[ -f "$mofed" ] || fail "no $mofed to break"
grep -q '"path": "/dev/infiniband/uverbs1",' "$mofed" || fail "no uverbs1 path line in $mofed to remove"
sed -i '/"path": "\/dev\/infiniband\/uverbs1",/d' "$mofed"
status=0
"$validator" "$broken"/* >"$work/broken.out" 2>&1 || status=$?
[ "$status" -ne 0 ] || fail "a device node without a path passed: $(cat "$work/broken.out")"
grep -q "^error $mofed: " "$work/broken.out" ||
    fail "the broken spec is not the one refused: $(cat "$work/broken.out")"
[ "$(grep -c '^ok ' "$work/broken.out")" -eq $(($# - 1)) ] ||
    fail "the intact specs beside the broken one were not all ok: $(cat "$work/broken.out")"
echo "as it must, the library refused: $(grep '^error ' "$work/broken.out")"
status=0
"$validator" --inject nvidia.com/gpu=0 --dirs "$broken" >"$work/broken-inject.out" 2>&1 || status=$?
[ "$status" -ne 0 ] || fail "the injection over a directory holding a broken spec passed"
echo "validate.sh: ok: $# specs read, injections as the node has them, a broken spec refused"
