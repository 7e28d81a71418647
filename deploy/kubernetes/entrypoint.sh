#!/bin/sh
# The gpubind node installer's entrypoint (the image of Containerfile, run by
# gpubind.yaml's DaemonSet): installs gpubind into the host whose / is
# mounted at $GPUBIND_HOST_ROOT and registers it with $GPUBIND_ENGINE, the
# node's CDI spec included; then waits until the pod is stopped, leaving the
# install in place (pods still running through gpubind-runtime need it to be
# stopped). `entrypoint.sh remove` (uninstall.yaml) takes out exactly what
# the install put there.
#
#   GPUBIND_HOST_ROOT   the host's / here (default /host)
#   GPUBIND_ENGINE      containerd (default) or crio
#   GPUBIND_SETUP_ARGS  more `gpubind setup` options (--set-default, --install-dir DIR)
#   GPUBIND_ONESHOT=1   exit once done instead of waiting
set -eu
action=${1:-install}
host=${GPUBIND_HOST_ROOT:-/host}
# shellcheck disable=SC2086 # GPUBIND_SETUP_ARGS is a list of options
set -- --host-root "$host" --engine "${GPUBIND_ENGINE:-containerd}" --cdi ${GPUBIND_SETUP_ARGS:-}
case $action in
install) gpubind setup "$@" ;;
remove) gpubind setup --remove "$@" ;;
*)
    echo "entrypoint.sh: '$action' is not install or remove" >&2
    exit 2
    ;;
esac
[ "${GPUBIND_ONESHOT:-}" = 1 ] && exit 0
# PID 1 of the pod: stop at once on SIGTERM.
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
