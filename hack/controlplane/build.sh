#!/usr/bin/env bash
# Build one control-plane component from its wrapper module into .bin/.
#
#   hack/controlplane/build.sh <etcd|kubernetes|kustomize|kwok|metacontroller> [BIN_DIR]
#
# A component is rebuilt only when its pinned versions (go.mod, go.sum), this
# script or the Go version change, or one of its binaries is missing: the
# stamp file .bin/.<component>.stamp holds the hash of those inputs.
#
# kwok's launcher also needs files of the module it was built from (its Stage
# YAMLs), so its build writes .bin/kwok.version (key=value lines: release,
# module, source = the module's directory in the Go module cache).
#
# Metacontroller has two wrappers: metacontroller-v4/ (preferred) and
# metacontroller/ (v1.5.20, the fallback). The module proxy serves v4 on some
# days and refuses it (403) on others, and v4's go.sum cannot be written while
# it is refused, so the v4 wrapper is resolved at build time in a scratch copy
# (.bin/.metacontroller-v4/). If its download is refused or fails, v1.5.20 is
# built instead. Which one was built, and why, goes to .bin/metacontroller.version
# (key=value lines), which the launcher reads to pick flags and CRDs.
# NODEWARDEN_METACONTROLLER=auto (default) | v4 (v4 or fail) | v1 (v1.5.20 only).
# After a fallback, a later run that finds everything else up to date only asks
# the proxy for v4 again (well under a second when refused); it builds only
# when the answer changed.
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
export GOPROXY="${GOPROXY:-$(go env GOPROXY)}"  # the go tool's own configuration

version_of() { (cd "$module_dir" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$1"); }
time_of() { (cd "$module_dir" && go list -m -f '{{if .Replace}}{{.Replace.Time}}{{else}}{{.Time}}{{end}}' "$1"); }
say() { echo "controlplane: $*"; }

# compile <module dir>: go build "${packages[@]}" into $bin_dir with $ldflags.
compile() {
  local dir="$1" log="$bin_dir/.$component.build.log" target
  if (( ${#packages[@]} == 1 )); then target=(-o "$bin_dir/${outputs[0]}"); else target=(-o "$bin_dir/"); fi
  # -v names each package as it compiles; show a running count instead of the flood.
  if ! (cd "$dir" && go build -v -trimpath -ldflags "$ldflags" "${target[@]}" "${packages[@]}") 2>&1 \
    | tee "$log" \
    | awk -v c="$component" '/^#|: /{print; next} {n++; if (n % 200 == 0) {printf "controlplane: %s: %d packages compiled\n", c, n; fflush()}}'
  then
    echo "controlplane: building $component FAILED; full log: $log" >&2
    return 1
  fi
}

up_to_date() {  # up_to_date <stamp> <want>: every output (and record) there and built from these inputs
  local out
  for out in "${outputs[@]}"; do [[ -x "$bin_dir/$out" ]] || return 1; done
  [[ -z "${record:-}" || -f "$bin_dir/$record" ]] || return 1
  [[ -f "$1" && "$(cat "$1")" == "$2" ]]
}

# ---- Metacontroller: v4 when the proxy serves it, else v1.5.20 ----------------
mc_v4="$here/metacontroller-v4"
mc_v1="$here/metacontroller"
mc_record="$bin_dir/metacontroller.version"
mc_scratch="$bin_dir/.metacontroller-v4"

# The module and version a wrapper's `replace metacontroller => …` line names.
mc_replacement() { sed -n 's/^replace metacontroller => \([^ ]*\) \([^ ]*\).*$/\1@\2/p' "$1/go.mod"; }
# The release a wrapper builds: its `metacontroller-release:` comment, else the replaced version.
mc_release() {
  local r; r="$(sed -n 's|^// metacontroller-release: *\([^ ]*\).*$|\1|p' "$1/go.mod")"
  echo "${r:-$(mc_replacement "$1" | cut -d@ -f2)}"
}
# The command a wrapper builds: what its tools.go imports.
mc_package() { sed -n 's/^import _ "\(.*\)"$/\1/p' "$1/tools.go"; }
mc_field() { sed -n "s/^$1=//p" "$mc_record" 2>/dev/null; }

# mc_probe: can v4 be downloaded? On failure, sets mc_why to the reason.
mc_probe() {
  local module out err
  module="$(mc_replacement "$mc_v4")"
  [[ -n "$module" ]] || { mc_why="no replace line for metacontroller in $mc_v4/go.mod"; return 1; }
  if out="$(cd "$bin_dir" && timeout 120 go mod download -json "$module" 2>&1)"; then return 0; fi
  err="$(printf '%s\n' "$out" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' | sed 's/\\n\\t/ /g; s/\\n/ /g; s/\\t/ /g; s/\\"/"/g')"
  [[ -n "$err" ]] || err="$(printf '%s' "$out" | tr '\n' ' ' | cut -c1-400)"
  err="$(printf '%s' "$err" | sed -E 's#[a-z]+://[^/ ]+#<the module proxy>#g')"  # its host is configuration
  if [[ "$err" == *" 403 "* || "$err" == *"403 Forbidden"* ]]; then
    mc_why="$(mc_release "$mc_v4") ($module) is refused by the module proxy (go env GOPROXY): ${err#*: }"
  else
    mc_why="$(mc_release "$mc_v4") ($module) could not be downloaded: $err"
  fi
  return 1
}

# mc_resolve: v4's dependencies and go.sum, in the scratch copy. Sets mc_why on failure.
mc_resolve() {
  local out
  rm -rf "$mc_scratch" && mkdir -p "$mc_scratch"
  cp "$mc_v4/go.mod" "$mc_v4/tools.go" "$mc_scratch/"
  [[ -f "$mc_v4/go.sum" ]] && cp "$mc_v4/go.sum" "$mc_scratch/"
  if out="$(cd "$mc_scratch" && GOFLAGS='-mod=mod -buildvcs=false' go mod tidy 2>&1)"; then return 0; fi
  mc_why="$(mc_release "$mc_v4") ($(mc_replacement "$mc_v4")) downloaded, but resolving its dependencies failed: $(printf '%s' "$out" | grep -v '^go: downloading' | tail -n 3 | tr '\n' ' ')"
  return 1
}

build_metacontroller() {
  local mode="${NODEWARDEN_METACONTROLLER:-auto}" stamp="$bin_dir/.metacontroller.stamp" want f inputs=()
  case "$mode" in auto|v4|v1) ;; *)
    echo "build.sh: NODEWARDEN_METACONTROLLER must be auto, v4 or v1, not '$mode'" >&2; exit 2 ;;
  esac
  outputs=(metacontroller)
  for f in "$mc_v4"/{go.mod,go.sum,tools.go} "$mc_v1"/{go.mod,go.sum,tools.go}; do [[ -f "$f" ]] && inputs+=("$f"); done
  want="$( (cat "${inputs[@]}" "$0"; go version; echo "mode=$mode") | sha256sum | cut -d' ' -f1)"

  if up_to_date "$stamp" "$want" && [[ -f "$mc_record" ]]; then
    if [[ "$(mc_field retry)" != "v4" ]]; then
      say "metacontroller is up to date ($(mc_field release): $(mc_field reason))"
      exit 0
    fi
    # A fallback: ask once more for v4, which is quick, and build only if it is now served.
    if ! mc_probe; then
      say "metacontroller is up to date ($(mc_field release), the fallback: $mc_why)"
      exit 0
    fi
    say "metacontroller: $(mc_release "$mc_v4") is now served by the module proxy; building it instead of $(mc_field release)"
  fi

  local chosen reason retry=""
  mc_why=""
  if [[ "$mode" == v1 ]]; then
    chosen="$mc_v1"; reason="forced by NODEWARDEN_METACONTROLLER=v1"
  elif mc_probe && mc_resolve; then
    chosen="$mc_scratch"; reason="preferred; the module proxy serves it"
  elif [[ "$mode" == v4 ]]; then
    echo "controlplane: metacontroller: NODEWARDEN_METACONTROLLER=v4, but $mc_why" >&2
    exit 1
  else
    chosen="$mc_v1"; retry=v4
    reason="fallback: $mc_why"
  fi

  module_dir="$chosen"
  local release module_path
  if [[ "$chosen" == "$mc_scratch" ]]; then release="$(mc_release "$mc_v4")"; else release="$(mc_release "$mc_v1")"; fi
  packages=("$(mc_package "$chosen")")
  ldflags="-s -w -X main.version=$release"
  say "metacontroller: building $release ($reason) into $bin_dir"
  local start=$SECONDS
  compile "$chosen" || {
    [[ "$chosen" == "$mc_scratch" ]] && echo "controlplane: NODEWARDEN_METACONTROLLER=v1 builds v1.5.20 instead" >&2
    exit 1
  }
  module_path="$(cd "$chosen" && go list -m -f '{{if .Replace}}{{.Replace.Path}}@{{.Replace.Version}}{{else}}{{.Path}}@{{.Version}}{{end}}' metacontroller)"
  {
    echo "release=$release"
    echo "module=$module_path"
    echo "source=$(cd "$chosen" && go list -m -f '{{if .Replace}}{{.Replace.Dir}}{{else}}{{.Dir}}{{end}}' metacontroller)"
    echo "gomod=$chosen"
    echo "package=${packages[0]}"
    echo "reason=$(printf '%s' "$reason" | tr '\n' ' ')"
    echo "retry=$retry"
  } > "$mc_record.tmp"
  mv "$mc_record.tmp" "$mc_record"
  echo "$want" > "$stamp"
  say "built metacontroller $release in $((SECONDS - start))s (recorded in $mc_record)"
}

if [[ "$component" == metacontroller ]]; then
  build_metacontroller
  exit 0
fi

# ---- the others: one wrapper each ---------------------------------------------
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
  kwok)
    packages=(sigs.k8s.io/kwok/cmd/kwok); outputs=(kwok); record=kwok.version; record_module=sigs.k8s.io/kwok
    kwok_release="$(version_of sigs.k8s.io/kwok)"
    # What `kwok --version` prints (the release build sets it the same way).
    ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_release#v}" ;;
  *) echo "build.sh: unknown component $component" >&2; exit 2 ;;
esac

stamp="$bin_dir/.$component.stamp"
want="$(cat "$module_dir/go.mod" "$module_dir/go.sum" "$0" <(go version) | sha256sum | cut -d' ' -f1)"
if up_to_date "$stamp" "$want"; then
  say "$component is up to date (${outputs[*]})"
  exit 0
fi

say "building $component (${outputs[*]}) into $bin_dir — a cold build takes minutes"
start=$SECONDS
compile "$module_dir" || exit 1
if [[ -n "${record:-}" ]]; then
  {
    echo "release=$(version_of "$record_module")"
    echo "module=$record_module@$(version_of "$record_module")"
    echo "source=$(cd "$module_dir" && go list -m -f '{{if .Replace}}{{.Replace.Dir}}{{else}}{{.Dir}}{{end}}' "$record_module")"
    echo "gomod=$module_dir"
  } > "$bin_dir/$record.tmp"
  mv "$bin_dir/$record.tmp" "$bin_dir/$record"
fi
echo "$want" > "$stamp"
say "built $component in $((SECONDS - start))s${record:+ (recorded in $bin_dir/$record)}"
