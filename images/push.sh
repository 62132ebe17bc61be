#!/usr/bin/env bash
# Pushes the four images `make images` built (OCI archives) to a registry, as
#   $REGISTRY/koord-queue-webhook:<version>
#   $REGISTRY/koord-queue-scheduler:<version>
#   $REGISTRY/koord-queue-certs:<version>
# with the first tool that works: skopeo, buildah, podman, docker.
#
# Usage: REGISTRY=registry.example.com/platform images/push.sh   (`make push`)
#
#   REGISTRY     the repository prefix (required)
#   TLS_VERIFY   false for a plain-HTTP or self-signed registry (default true;
#                skopeo, buildah and podman only: docker follows its daemon)
#   PUSHER       skopeo, buildah, podman or docker (default: the first that works)
#   IMAGES_OUT   where the archives are (default: <target dir>/images)
#
# Prints one line per image on stdout: `<component> <reference>`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
target_dir=${CARGO_TARGET_DIR:-$root/target}
out=${IMAGES_OUT:-$target_dir/images}
tls=${TLS_VERIFY:-true}
log() { printf 'push: %s\n' "$*" >&2; }
die() { printf 'push: error: %s\n' "$*" >&2; exit 1; }

[ -n "${REGISTRY:-}" ] || die "set REGISTRY (e.g. REGISTRY=registry.example.com/platform)"
registry=${REGISTRY%/}
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")

works() {
  case "$1" in
    skopeo|buildah) command -v "$1" >/dev/null 2>&1 && "$1" --version >/dev/null 2>&1 ;;
    podman|docker) command -v "$1" >/dev/null 2>&1 && "$1" info >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}
pusher=${PUSHER:-}
if [ -z "$pusher" ]; then
  for p in skopeo buildah podman docker; do
    if works "$p"; then pusher=$p; break; fi
  done
fi
[ -n "$pusher" ] && works "$pusher" || die "no working skopeo, buildah, podman or docker (make images installs buildah)"

# buildah keeps a private store next to the archives, as images/build.sh does.
buildah=(buildah --root "$out/.buildah/storage" --runroot "$out/.buildah/run" --storage-driver vfs)

for c in webhook scheduler certs dashboard; do
  archive="$out/koord-queue-$c.oci.tar"
  [ -f "$archive" ] || die "$archive is missing: run make images first"
  dest="$registry/koord-queue-$c:$version"
  log "$archive -> $dest ($pusher)"
  case "$pusher" in
    skopeo)
      skopeo copy --quiet --dest-tls-verify="$tls" "oci-archive:$archive" "docker://$dest" >&2 ;;
    buildah)
      id=$("${buildah[@]}" pull --quiet "oci-archive:$archive")
      "${buildah[@]}" push --quiet --tls-verify="$tls" "$id" "docker://$dest" >&2
      "${buildah[@]}" rmi "$id" >/dev/null 2>&1 || true ;;
    podman)
      id=$(podman pull --quiet "oci-archive:$archive")
      podman push --quiet --tls-verify="$tls" "$id" "docker://$dest" >&2 ;;
    docker)
      name=$(docker load -i "$archive" | sed -n 's/^Loaded image: //p' | tail -1)
      docker tag "$name" "$dest"
      docker push "$dest" >&2 ;;
  esac
  printf '%s %s\n' "$c" "$dest"
done
