#!/usr/bin/env bash
# Runs Kueue v0.17.0's own scheduler performance test (minimalkueue + runner,
# baseline generator config: 15,000 workloads) on this machine, against the
# kube-apiserver and etcd of our control-plane cache, to tie Kueue's published
# CI figure (351 s wall, docs/performance.md) to this hardware (issue 22).
#
# Needs bench/provision/kueue.sh and tests/provision/provision.sh to have run.
# Writes the runner's artifacts (summary.yaml, minimalkueue.stats.yaml) into
# OUT (default: <cache>/kueue-perf-out; copy what to keep into docs/bench/).
#
#   KOORD_QUEUE_CACHE    cache root (default: ~/.cache/koord-queue)
#   KUEUE_PERF_CONFIG    generator config (default: the module's baseline)
#   KUEUE_PERF_TIMEOUT   the runner's maximum record time (default: 20m; its own
#                        default of 10m is sized for CI hardware)
set -euo pipefail

cache=${KOORD_QUEUE_CACHE:-$HOME/.cache/koord-queue}
bin="$cache/bin"
kueue="$cache/kueue"
out=${1:-$cache/kueue-perf-out}
config=${KUEUE_PERF_CONFIG:-$kueue/perf-configs/baseline/generator.yaml}
die() { printf 'kueue-perf: error: %s\n' "$*" >&2; exit 1; }

for f in kueue-minimalkueue kueue-perf-runner kube-apiserver etcd kubectl; do
  [ -x "$bin/$f" ] || die "$bin/$f missing: run bench/provision/kueue.sh and make provision"
done
[ -f "$config" ] || die "$config missing"

# envtest reads its binaries from one directory under fixed names.
assets="$cache/kueue-perf-assets"
mkdir -p "$assets" "$out"
ln -sfn "$bin/kube-apiserver" "$assets/kube-apiserver"
ln -sfn "$bin/etcd" "$assets/etcd"
ln -sfn "$bin/kubectl" "$assets/kubectl"

start=$SECONDS
KUBEBUILDER_ASSETS="$assets" "$bin/kueue-perf-runner" \
  --o "$out" \
  --crds "$kueue/crds" \
  --generatorConfig "$config" \
  --minimalKueue "$bin/kueue-minimalkueue" \
  --timeout "${KUEUE_PERF_TIMEOUT:-20m}" \
  --withLogs=true --logToFile=true
printf 'kueue-perf: done in %ss; artifacts in %s\n' "$((SECONDS - start))" "$out" >&2
cat "$out/minimalkueue.stats.yaml" 2>/dev/null || true
