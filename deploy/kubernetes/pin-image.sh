#!/bin/sh
# pin-image.sh IMAGE DIR: a release's manifests. Writes this directory's
# gpubind.yaml and uninstall.yaml into DIR with every `image:` set to IMAGE,
# which must name the node image by digest (NAME@sha256:<64 hex digits>, a tag
# before the @ allowed, as `podman push --digestfile` gives it): every node then
# runs exactly the image the release built and checked, never what a tag is
# moved to later. The repository's manifests keep a tag for local builds.
# `scripts/package manifests` runs it (GPUBIND_NODE_IMAGE); exit status 2 and
# nothing written when IMAGE is not by digest.
set -eu
fail() {
    echo "pin-image.sh: $*" >&2
    exit 2
}
[ $# -eq 2 ] || fail "usage: pin-image.sh NAME@sha256:DIGEST DIR"
image=$1 out=$2
# Only a reference's characters (nothing sed or YAML would read otherwise).
case $image in
'' | *[!A-Za-z0-9._/:@-]*) fail "'$image' is not an image reference" ;;
esac
printf '%s\n' "$image" | grep -Eqx '[A-Za-z0-9][A-Za-z0-9._/:-]*@sha256:[0-9a-f]{64}' ||
    fail "'$image' does not name the image by digest (NAME@sha256:<64 hex digits>)"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for name in gpubind.yaml uninstall.yaml; do
    tmp=$(mktemp "$out/.$name.XXXXXX")
    sed "s|^\( *\)image: .*\$|\1image: $image|" "$here/$name" >"$tmp"
    # Every image line, and only those, changed.
    lines=$(grep -c '^ *image: ' "$here/$name" || true)
    pinned=$(grep -c "^ *image: $image\$" "$tmp" || true)
    if [ "$lines" = 0 ] || [ "$pinned" != "$lines" ]; then
        rm -f "$tmp"
        fail "$name: $pinned of $lines image lines pinned"
    fi
    chmod 0644 "$tmp"
    mv -f "$tmp" "$out/$name"
    echo "$out/$name: $lines images pinned to $image"
done
