#!/bin/sh
# start_layout.sh BINARY...: fails unless each BINARY gathers the code of a
# container start ahead of the rest (hook/start_order.ld): an output section
# .text.start that holds main and the steps every start runs. A build that
# lost the script, or a script gone stale for those steps, fails here
# (regenerate it: scripts/start_order.py).
set -u
status=0
for binary in "$@"; do
    # .text.start's first and last address
    range=$(readelf -SW "$binary" | awk '$2 == ".text.start" { print $4, $6 }')
    if [ -z "$range" ]; then
        echo "$binary: no .text.start section (hook/start_order.ld not applied)" >&2
        status=1
        continue
    fi
    start=$((0x${range% *}))
    end=$((start + 0x${range#* }))
    for function in 'main' 'gpubind::node::load_node(' 'gpubind::decide::oci::load_spec(' \
        'gpubind::node::node_fingerprint[abi:cxx11](' 'gpubind::config::load_trusted_config()'; do
        address=$(nm -C "$binary" | awk -v f="$function" '
            { name = $0; sub(/^[0-9a-f]+ [A-Za-z] /, "", name) }
            ($2 == "T" || $2 == "t") && index(name, f) == 1 { print $1; exit }')
        if [ -z "$address" ]; then
            echo "$binary: no function $function" >&2
            status=1
        elif [ $((0x$address)) -lt $start ] || [ $((0x$address)) -ge $end ]; then
            echo "$binary: $function at 0x$address, outside .text.start" >&2
            status=1
        fi
    done
done
exit $status
