#!/usr/bin/env bash
# Build one control-plane component from its wrapper module into .bin/.
#
#   hack/controlplane/build.sh <etcd|kubernetes|kustomize|metacontroller> [BIN_DIR]
#
# A component is rebuilt only when its pinned versions (go.mod, go.sum), this
# script or the Go version change, or one of its binaries is missing: the
# stamp file .bin/.<component>.stamp holds the hash of those inputs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
component="${1:?usage: build.sh <component> [BIN_DIR]}"
bin_dir="$(mkdir -p "${2:-$repo/.bin}" && cd "${2:-$repo/.bin}" && pwd)"
module_dir="$here/$component"
[[ -f "$module_dir/go.mod" ]] || { echo "build.sh: no wrapper module $module_dir" >&2; exit 2; }

# Everything the go tool needs comes from here, not from the caller's shell:
# the checksum database is unreachable from CI (go.sum still pins every hash),
# a toolchain download is never wanted, binaries must be static, and they must
# not carry this repository's git state (the wrappers live inside it).
export GOTOOLCHAIN=local GOSUMDB=off GONOSUMDB='*' GOFLAGS='-mod=readonly -buildvcs=false' CGO_ENABLED=0
export GOPROXY="${GOPROXY:-https://proxy.golang.org}"

version_of() { (cd "$module_dir" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$1"); }
time_of() { (cd "$module_dir" && go list -m -f '{{if .Replace}}{{.Replace.Time}}{{else}}{{.Time}}{{end}}' "$1"); }

ldflags="-s -w"
case "$component" in
  etcd)
    packages=(go.etcd.io/etcd/server/v3); outputs=(etcd) ;;
  kubernetes)
    packages=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
              k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
    outputs=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
    # The same stamp the Kubernetes release build applies, so /version and
    # `kubectl version` report the release we pinned.
    kver="$(version_of k8s.io/kubernetes)"; major="${kver#v}"; major="${major%%.*}"
    minor="$(echo "$kver" | cut -d. -f2)"
    built="$(time_of k8s.io/kubernetes | sed -E 's/^([0-9-]+)[ T]([0-9:]+).*/\1T\2Z/')"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
      ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$built -X $pkg.gitCommit="
    done ;;
  kustomize)
    packages=(sigs.k8s.io/kustomize/kustomize/v5); outputs=(kustomize)
    ldflags+=" -X sigs.k8s.io/kustomize/api/provenance.version=$(version_of sigs.k8s.io/kustomize/kustomize/v5)" ;;
  metacontroller)
    packages=(metacontroller); outputs=(metacontroller)
    ldflags+=" -X main.version=$(version_of metacontroller)" ;;
  *) echo "build.sh: unknown component $component" >&2; exit 2 ;;
esac

stamp="$bin_dir/.$component.stamp"
want="$(cat "$module_dir/go.mod" "$module_dir/go.sum" "$0" <(go version) | sha256sum | cut -d' ' -f1)"
missing=0
for out in "${outputs[@]}"; do [[ -x "$bin_dir/$out" ]] || missing=1; done
if [[ $missing == 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "controlplane: $component is up to date (${outputs[*]})"
  exit 0
fi

echo "controlplane: building $component (${outputs[*]}) into $bin_dir — a cold build takes minutes"
start=$SECONDS
log="$bin_dir/.$component.build.log"
if (( ${#packages[@]} == 1 )); then target=(-o "$bin_dir/${outputs[0]}"); else target=(-o "$bin_dir/"); fi
# -v names each package as it compiles; show a running count instead of the flood.
if ! (cd "$module_dir" && go build -v -trimpath -ldflags "$ldflags" "${target[@]}" "${packages[@]}") 2>&1 \
  | tee "$log" \
  | awk -v c="$component" '/^#|: /{print; next} {n++; if (n % 200 == 0) {printf "controlplane: %s: %d packages compiled\n", c, n; fflush()}}'
then
  echo "controlplane: building $component FAILED; full log: $log" >&2
  exit 1
fi
echo "$want" > "$stamp"
echo "controlplane: built $component in $((SECONDS - start))s"
