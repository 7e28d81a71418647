# Shared by the scripts: stage timing and the ctest wrapper. Source it.

# stage NAME: ends the running stage (printing "== name (1m02s)") and starts
# NAME ("== NAME"); `stage ""` ends the last one. stage_summary prints them all.
stage_name=""
stage_start=$SECONDS
stage_lines=()
fmt_seconds() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
# The compiler cache's hits and misses so far ("" without ccache): a stage
# that compiled says how many of its objects the cache had, so that a slow
# run shows whether the cache was cold.
ccache_counts() {
    command -v ccache >/dev/null || return 0
    ccache --print-stats 2>/dev/null | awk '
        $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
        $1 == "cache_miss" { m += $2 }
        END { print h + 0, m + 0 }'
}
stage_ccache=""
stage() {
    local now=$SECONDS
    if [ -n "$stage_name" ]; then
        local took cache="" counts
        took=$(fmt_seconds $((now - stage_start)))
        counts=$(ccache_counts)
        if [ -n "$counts" ] && [ -n "$stage_ccache" ] && [ "$counts" != "$stage_ccache" ]; then
            read -r h1 m1 <<<"$counts"
            read -r h0 m0 <<<"$stage_ccache"
            cache=", ccache: $((h1 - h0)) hits, $((m1 - m0)) misses"
        fi
        echo "== $stage_name ($took$cache)"
        stage_lines+=("$(printf '   %-44s %s%s' "$stage_name" "$took" "$cache")")
    fi
    stage_name=$1
    stage_start=$now
    stage_ccache=$(ccache_counts)
    if [ -n "$stage_name" ]; then echo "== $stage_name"; fi
    return 0
}
stage_summary() {
    stage ""
    echo "== stages"
    printf '%s\n' "${stage_lines[@]}"
    printf '   %-44s %s\n' total "$(fmt_seconds "$SECONDS")"
}

# disk_free_gb DIR: the GB free on DIR's filesystem. warn_low_disk DIR GB:
# one line when less is free (a full run of scripts/test writes about 15 GB of
# build trees: a compiler out of space reads like a broken build).
disk_free_gb() { df -P -BG "$1" | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }
warn_low_disk() {
    local free
    free=$(disk_free_gb "$1")
    if [ "$free" -lt "$2" ]; then
        echo "warning: $free GB free on $1's filesystem; a full run needs about $2 GB" >&2
    fi
    return 0
}

# show_build_failure LOG: what a failed build's log says went wrong (the
# compiler's error lines, not the last screens of command lines) and the
# space left where it wrote.
show_build_failure() {
    local log=$1
    echo "--- the errors in $log:"
    grep -E -m 30 'error:|FAILED:|No space left|Killed signal|fatal|Error [0-9]' "$log" | cut -c 1-400 || true
    echo "--- its last lines:"
    tail -n 15 "$log" | cut -c 1-400
    echo "--- disk: $(disk_free_gb "$(dirname "$log")") GB free on $(dirname "$log")'s filesystem"
}

# run_ctest DIR ARGS...: ctest with every test required to run (a skipped or
# not-run test fails).
run_ctest() {
    local dir=$1 log rc=0
    shift
    log=$(mktemp)
    ctest --test-dir "$dir" --output-on-failure --no-tests=error -j"$(nproc)" "$@" 2>&1 | tee "$log" || rc=$?
    if grep -q '\*\*\*Skipped\|Not Run' "$log"; then
        echo "a test was skipped: every test must run here" >&2
        rc=1
    fi
    rm -f "$log"
    return $rc
}

# use_ccache: where ccache is installed, sets ccache_args (the CMake launcher
# arguments) and keys its objects by paths relative to the checkout, so that
# another clone of the same sources (CI's fresh one) finds what this one
# compiled. The cache lives outside the checkout; a cold one builds as
# without it. Precompiled headers need the sloppiness named.
ccache_args=()
use_ccache() {
    command -v ccache >/dev/null || return 0
    export CCACHE_BASEDIR=$top CCACHE_NOHASHDIR=true
    export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
    ccache_args=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
}

# check_format: every C and C++ file of the product and the tests as the
# project's .clang-format has it; lists the files that are not (fix them with
# `clang-format -i FILE`, or `git clang-format` for the changed lines). One
# clang-format for all the files (a process per file took ten times longer).
check_format() {
    local files out
    mapfile -t files < <(git -C "$top" ls-files 'lib/*.cpp' 'lib/*.hpp' 'lib/*.c' 'lib/*.h' \
        'cli/*.cpp' 'cli/*.hpp' 'hook/*.cpp' 'hook/*.hpp' 'plugin/*.cpp' 'plugin/*.hpp' \
        'tests/*.cpp' 'tests/*.hpp' 'tests/*.c')
    if ! out=$(cd "$top" && clang-format --dry-run -Werror "${files[@]}" 2>&1); then
        echo "not formatted as .clang-format says (clang-format -i FILE):" >&2
        sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/  \1/p' <<<"$out" | sort -u >&2
        grep -q ': error: ' <<<"$out" || echo "$out" >&2
        return 1
    fi
    echo "${#files[@]} files formatted"
}
