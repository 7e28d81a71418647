#!/bin/sh
# The gpubind node installer's entrypoint (the image of Containerfile, run by
# gpubind.yaml's DaemonSet):
#   install  (an init container, privileged, the host's / mounted) installs
#            gpubind into the host whose / is mounted at $GPUBIND_HOST_ROOT and
#            registers it with $GPUBIND_ENGINE, the node's CDI spec included;
#            then exits, leaving the install in place (pods still running
#            through gpubind-runtime need it to be stopped);
#   remove   (uninstall.yaml's init container) takes out exactly what the
#            install put there, then exits;
#   wait     (the pod's long-running container, with no privilege and no host
#            mount) does nothing until the pod is stopped: a DaemonSet's pod
#            needs a container that runs.
#
#   GPUBIND_HOST_ROOT   the host's / here (default /host)
#   GPUBIND_ENGINE      containerd (default) or crio
#   GPUBIND_SETUP_ARGS  more `gpubind setup` options (--set-default, --install-dir DIR)
set -eu
action=${1:-install}
host=${GPUBIND_HOST_ROOT:-/host}
# shellcheck disable=SC2086 # GPUBIND_SETUP_ARGS is a list of options
set -- --host-root "$host" --engine "${GPUBIND_ENGINE:-containerd}" --cdi ${GPUBIND_SETUP_ARGS:-}
case $action in
install) exec gpubind setup "$@" ;;
remove) exec gpubind setup --remove "$@" ;;
wait)
    # PID 1 of its container: stop at once on SIGTERM, the sleep with it.
    sleeper=
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM INT
    while :; do
        sleep 3600 &
        sleeper=$!
        wait "$sleeper"
    done
    ;;
*)
    echo "entrypoint.sh: '$action' is not install, remove or wait" >&2
    exit 2
    ;;
esac
