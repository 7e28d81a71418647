#!/bin/sh
# list_matches.sh NATIVE_GPUBIND ARM64_GPUBIND ARM64_LDCONFIG
#
# An arm64 gpubind (run through qemu-user) simulates an arm64 node, its cache
# made by Debian's arm64 ldconfig, and lists what a container asking for every
# GPU and capability gets; the build machine's gpubind does the same on its
# own node of the same driver. The two lists must hold the same paths, the
# library directory (x86_64- or aarch64-linux-gnu) aside, and the arm64 one
# must name arm64 libraries only. Needs root (the nodes are made with mknod).
set -eu
native=$1 arm=$2 ldconfig=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "list_matches: $*" >&2; exit 1; }

# The same driver on both: 4 GPUs, a MIG device, IMEX channels; no 32-bit
# libraries on either side (an arm64 node has none).
spec="--gpus 4 --mig 1:1:0 --imex-channels 2 --driver-version 550.54.15 --no-compat32"
"$native" simulate $spec "$work/native" >/dev/null || fail "the native gpubind could not simulate"
"$arm" simulate $spec --ldconfig "$ldconfig" "$work/arm64" >/dev/null ||
    fail "the arm64 gpubind could not simulate"

# The arm64 node's libraries are AArch64 objects, filed by arm64's ldconfig.
"$ldconfig" -p -C "$work/arm64/etc/ld.so.cache" >"$work/cache.txt"
grep -q 'libcuda.so.1 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libcuda.so.1' "$work/cache.txt" ||
    fail "the arm64 node's ld.so.cache does not file libcuda.so.1 as AArch64: $(cat "$work/cache.txt")"
if grep -q 'x86-64' "$work/cache.txt"; then fail "the arm64 node's cache lists x86-64 libraries"; fi

listed() {  # gpubind node out
    "$1" list --root "$2" --capabilities all --mig-config --mig-monitor >"$3.raw" ||
        fail "$1 list --root $2 failed"
    sed -e "s|$2||g" -e 's|/usr/lib/x86_64-linux-gnu|LIBDIR|g' \
        -e 's|/usr/lib/aarch64-linux-gnu|LIBDIR|g' "$3.raw" | sort >"$3"
}
listed "$native" "$work/native" "$work/native.list"
listed "$arm" "$work/arm64" "$work/arm64.list"
[ "$(wc -l <"$work/native.list")" -gt 20 ] || fail "the native list is short: $(cat "$work/native.list")"
grep -q 'LIBDIR/libcuda.so' "$work/arm64.list" || fail "the arm64 list has no libcuda"
grep -q '/dev/nvidia0' "$work/arm64.list" || fail "the arm64 list has no /dev/nvidia0"
if ! diff -u "$work/native.list" "$work/arm64.list"; then
    fail "the arm64 list differs from the native one (above: - native, + arm64)"
fi
echo "list_matches: $(wc -l <"$work/arm64.list") paths, the same on both"
