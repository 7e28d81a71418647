#!/bin/sh
# no_simulator.sh CONTROL BINARY...: fails when a BINARY carries a symbol of
# the simulated node (lib/sim: gpubind::sim, gpubind::elf; lib/fake's embedded
# blobs). CONTROL, a program that links the simulator (the CLI), must show
# them: the check proves it can see what it looks for.
set -u
pattern='gpubind::sim::|gpubind::elf::|gpubind_blob_'
symbols() { nm -C "$1" 2>/dev/null | grep -E "$pattern"; }
control=$1
shift
if ! symbols "$control" >/dev/null; then
    echo "no_simulator.sh: $control shows no simulator symbol: the check cannot see them" >&2
    exit 1
fi
status=0
for binary in "$@"; do
    found=$(symbols "$binary" | head -3)
    if [ -n "$found" ]; then
        echo "$binary carries the simulator:" >&2
        echo "$found" >&2
        status=1
    fi
done
exit $status
