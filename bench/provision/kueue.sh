#!/usr/bin/env bash
# Provisions Kueue v0.17.0 for the comparison benchmark (issue 22) into the
# version-keyed cache: the manager (cmd/kueue) and the module's own scheduler
# performance test (test/performance/scheduler/{minimalkueue,runner}).
#
# Only the benchmark's provisioning runs this (`make provision-kueue`, which
# `make bench-kueue` and `make bench-kueue-perf` depend on); `make
# test` and CI never do, because the cold build takes minutes.
# Idempotent: a cached binary is not rebuilt. Prints the bin directory last.
#
#   KOORD_QUEUE_CACHE   cache root (default: ~/.cache/koord-queue)
set -euo pipefail

KUEUE_VERSION=v0.17.0
MODULE=sigs.k8s.io/kueue

cache=${KOORD_QUEUE_CACHE:-$HOME/.cache/koord-queue}
bin="$cache/bin"
store="$cache/store/kueue-$KUEUE_VERSION"
log() { printf 'provision-kueue: %s\n' "$*" >&2; }
die() { printf 'provision-kueue: error: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "'go' is not installed: Kueue $KUEUE_VERSION needs Go 1.26"
mkdir -p "$bin" "$store"

# The cache's names: the manager is kueue; the perf test's two binaries get a
# prefix so they cannot be mistaken for ours.
declare -A packages=(
  [kueue]=cmd/kueue
  [kueue-minimalkueue]=test/performance/scheduler/minimalkueue
  [kueue-perf-runner]=test/performance/scheduler/runner
)

for name in kueue kueue-minimalkueue kueue-perf-runner; do
  dest="$store/$name"
  if [ ! -x "$dest" ]; then
    log "building $name ($MODULE/${packages[$name]}@$KUEUE_VERSION)"
    start=$SECONDS
    gobin=$(mktemp -d "$cache/tmp.XXXXXX")
    # go install pkg@version builds in module mode from the module's own
    # go.mod (no replace directives), so the pins are Kueue's (k8s.io v0.35.3).
    CGO_ENABLED=0 GOBIN="$gobin" go install -trimpath -ldflags "-s -w" \
      "$MODULE/${packages[$name]}@$KUEUE_VERSION"
    mv "$gobin/$(basename "${packages[$name]}")" "$dest"
    rm -rf "$gobin"
    log "built $name in $((SECONDS - start))s"
  fi
  ln -sfn "$dest" "$bin/$name"
done

# The module's CRDs and the perf test's configs, for the benchmark to load.
src=$(go env GOMODCACHE)/$MODULE@$KUEUE_VERSION
[ -d "$src" ] || go mod download "$MODULE@$KUEUE_VERSION"
if [ ! -d "$store/crds" ]; then
  mkdir -p "$store/crds"
  cp "$src"/config/components/crd/bases/*.yaml "$store/crds/"
  chmod -R u+w "$store/crds"
fi
# The manager's webhook configurations: the benchmark registers them by URL.
if [ ! -f "$store/webhooks.yaml" ]; then
  cp "$src/config/components/webhook/manifests.yaml" "$store/webhooks.yaml"
  chmod u+w "$store/webhooks.yaml"
fi
if [ ! -d "$store/perf-configs" ]; then
  cp -r "$src/test/performance/scheduler/configs" "$store/perf-configs"
  chmod -R u+w "$store/perf-configs"
fi
ln -sfn "$store" "$cache/kueue"
printf '%s\n' "$bin"
