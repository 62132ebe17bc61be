#!/usr/bin/env bash
# Builds the kubectl plugin for a release (`make cli`): for each target, a
# static release binary `kubectl-koord_queue` (the images' profile: release
# code, no symbols; glibc linked in on Linux, as images/build.sh does), an
# archive `kubectl-koord_queue_<version>_<os>_<arch>.tar.gz` holding it, and
# the krew manifest (cli/krew/koord-queue.yaml with the version and each
# archive's sha256 filled in).
#
#   CLI_OUT                  where they go (default: <target dir>/cli)
#   CLI_TARGETS              rust targets to build (default: the host's; the
#                            toolchain here has x86_64-unknown-linux-gnu only)
#   CARGO, CARGO_TARGET_DIR  as for cargo
#
# Prints one line per archive on stdout: `<archive> <sha256>`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cargo=${CARGO:-cargo}
target_dir=${CARGO_TARGET_DIR:-$root/target}
out=${CLI_OUT:-$target_dir/cli}
die() { printf 'cli: error: %s\n' "$*" >&2; exit 1; }

version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")
[ -n "$version" ] || die "no version in Cargo.toml's [workspace.package]"
host=$(rustc -vV | sed -n 's/^host: //p')
targets=${CLI_TARGETS:-$host}
mkdir -p "$out"
manifest=$(sed "s/{{VERSION}}/$version/g" "$root/cli/krew/koord-queue.yaml")

for target in $targets; do
  case $target in
    x86_64-unknown-linux-gnu) os=linux arch=amd64 ;;
    aarch64-unknown-linux-gnu) os=linux arch=arm64 ;;
    x86_64-apple-darwin) os=darwin arch=amd64 ;;
    aarch64-apple-darwin) os=darwin arch=arm64 ;;
    *) die "no krew platform for target $target" ;;
  esac
  flags=${RUSTFLAGS:-}
  case $target in *-linux-gnu) flags="$flags -C target-feature=+crt-static" ;; esac
  RUSTFLAGS="$flags" "$cargo" build -q --profile image -p koord-queue-cli --target "$target"
  stage=$(mktemp -d)
  cp "$target_dir/$target/image/kubectl-koord_queue" "$stage/"
  archive="$out/kubectl-koord_queue_${version}_${os}_${arch}.tar.gz"
  tar -C "$stage" --owner=0 --group=0 -czf "$archive" kubectl-koord_queue
  rm -rf "$stage"
  sha=$(sha256sum "$archive" | cut -d' ' -f1)
  manifest=${manifest//"{{SHA256_${os}_${arch}}}"/$sha}
  echo "$archive $sha"
done
printf '%s\n' "$manifest" > "$out/koord-queue.yaml"
