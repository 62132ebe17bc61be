#!/usr/bin/env bash
# Builds the four images of Koord-Queue (webhook, scheduler, certs, dashboard) as OCI
# archives, from images/Containerfile:
#
#   1. static binaries on the host: `cargo build --profile image` for the
#      host's *-linux-gnu target with `-C target-feature=+crt-static` (glibc
#      linked in; nothing to download, no musl target needed);
#   2. an image per binary with the first builder that works — buildah,
#      podman, docker — `FROM scratch`, so no base image is pulled and no
#      container is run; when none works, Debian's buildah is installed with
#      apt-get (as root);
#   3. each image saved as $IMAGES_OUT/koord-queue-<component>.oci.tar
#      (`oci-archive`), tagged koord-queue/koord-queue-<component>:<version>.
#
# Usage: images/build.sh [all|binaries]      (`make images`, `make image-binaries`)
#
#   IMAGES_OUT                where the archives go (default: <target dir>/images)
#   BUILDER                   buildah, podman or docker (default: the first that works)
#   IMAGE_PREFIX              repository prefix (default: koord-queue/; the chart's default)
#   KOORD_QUEUE_GIT_REVISION  the revision recorded (default: the checkout's HEAD, else unknown)
#   CARGO, CARGO_TARGET_DIR   as for cargo
#
# Prints one line per image on stdout: `<component> <archive> <size in bytes>`.
# Exits 3 when no builder works and none can be installed (no root, no apt).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cargo=${CARGO:-cargo}
target_dir=${CARGO_TARGET_DIR:-$root/target}
out=${IMAGES_OUT:-$target_dir/images}
prefix=${IMAGE_PREFIX:-koord-queue/}
components=(webhook scheduler certs dashboard)
log() { printf 'images: %s\n' "$*" >&2; }
die() { printf 'images: error: %s\n' "$*" >&2; exit 1; }
no_builder() { printf 'images: no builder: %s\n' "$*" >&2; exit 3; }

# The workspace version (also the chart's appVersion) and the source URL.
workspace_value() {
  sed -n '/^\[workspace\.package\]/,/^\[/s/^'"$1"' *= *"\(.*\)"/\1/p' "$root/Cargo.toml"
}
version=$(workspace_value version)
source_url=$(workspace_value repository)
[ -n "$version" ] || die "no version in [workspace.package] of Cargo.toml"

# The same rule as the binaries' --version (buildinfo/): the override, else
# the HEAD of the repository whose top level is this tree, else unknown.
revision=${KOORD_QUEUE_GIT_REVISION:-}
if [ -z "$revision" ]; then
  top=$(git -C "$root" rev-parse --show-toplevel 2>/dev/null || true)
  if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$root" ]; then
    revision=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || true)
  fi
  revision=${revision:-unknown}
fi
export KOORD_QUEUE_GIT_REVISION=$revision

build_binaries() {
  local host
  host=$(rustc -vV | sed -n 's/^host: //p')
  case "$host" in
    *-linux-gnu) ;;
    *) die "static binaries are built for a *-linux-gnu host; this host is $host" ;;
  esac
  # Run from a test (`cargo test` sets these for the test process), they would
  # differ from a shell's and rebuild everything: ring's build script reruns
  # when CARGO_MANIFEST_DIR changes.
  local v
  for v in $(compgen -e); do
    case "$v" in
      CARGO_PKG_*|CARGO_MANIFEST_*|CARGO_BIN_EXE_*|CARGO_CRATE_NAME|CARGO_PRIMARY_PACKAGE|CARGO_TARGET_TMPDIR)
        unset "$v" ;;
    esac
  done
  log "building static binaries ($host, profile image, revision $revision)"
  local start=$SECONDS
  # With --target, RUSTFLAGS reach the binaries only, not build scripts.
  RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    "$cargo" build --profile image --target "$host" --locked \
    -p koord-queue-webhook -p koord-queue-scheduler -p koord-queue-certs -p koord-queue-dashboard --bins >&2
  log "built the binaries in $((SECONDS - start))s"
  context="$out/context"
  mkdir -p "$context"
  for c in "${components[@]}"; do
    local bin="$target_dir/$host/image/koord-queue-$c"
    [ -x "$bin" ] || die "$bin was not built"
    install -m 0555 "$bin" "$context/koord-queue-$c"
  done
}

# A builder that actually builds: a docker client without a daemon, or a
# podman without its storage, does not count.
works() {
  case "$1" in
    buildah) command -v buildah >/dev/null 2>&1 && buildah --version >/dev/null 2>&1 ;;
    podman) command -v podman >/dev/null 2>&1 && podman info >/dev/null 2>&1 ;;
    docker) command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

pick_builder() {
  if [ -n "${BUILDER:-}" ]; then
    works "$BUILDER" || die "BUILDER=$BUILDER does not work here"
    echo "$BUILDER"; return
  fi
  for b in buildah podman docker; do
    if works "$b"; then echo "$b"; return; fi
  done
  log "no working buildah, podman or docker; installing Debian's buildah"
  if [ "$(id -u)" != 0 ]; then
    no_builder "installing buildah needs root (apt-get install buildah); install buildah, podman or docker"
  fi
  command -v apt-get >/dev/null 2>&1 || no_builder "no apt-get: install buildah, podman or docker"
  # Quiet, and no prompts; a stale package list is refreshed once.
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends buildah >&2 \
    || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends buildah >&2; } \
    || no_builder "apt-get install buildah failed"
  works buildah || die "buildah was installed but does not run"
  echo buildah
}

build_images() {
  local builder
  builder=$(pick_builder)
  log "building the images with $builder"
  # buildah keeps its own storage under the output directory (vfs: no
  # overlay mounts, works in any container), and never runs a container.
  local work="$out/.buildah"
  local buildah=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
  export BUILDAH_ISOLATION=chroot
  for c in "${components[@]}"; do
    local tag="${prefix}koord-queue-$c:$version"
    local archive="$out/koord-queue-$c.oci.tar"
    local args=(-f "$root/images/Containerfile" --target "$c"
      --build-arg "VERSION=$version" --build-arg "REVISION=$revision"
      --build-arg "SOURCE=$source_url" -t "$tag")
    local start=$SECONDS
    rm -f "$archive"
    case "$builder" in
      buildah)
        "${buildah[@]}" bud --quiet "${args[@]}" "$context" >&2
        "${buildah[@]}" push --quiet "$tag" "oci-archive:$archive:$tag" >&2
        "${buildah[@]}" rmi "$tag" >/dev/null 2>&1 || true
        ;;
      podman)
        podman build --quiet "${args[@]}" "$context" >&2
        podman save --format oci-archive -o "$archive" "$tag" >&2
        ;;
      docker)
        # docker >= 25 saves an OCI image layout (index.json, blobs/).
        docker build --quiet "${args[@]}" "$context" >&2
        docker save -o "$archive" "$tag" >&2
        ;;
    esac
    log "$tag -> $archive ($(stat -c %s "$archive") bytes, $((SECONDS - start))s)"
    printf '%s %s %s\n' "$c" "$archive" "$(stat -c %s "$archive")"
  done
}

mkdir -p "$out"
case "${1:-all}" in
  binaries) build_binaries ;;
  all) build_binaries; build_images ;;
  *) die "usage: images/build.sh [all|binaries]" ;;
esac
