#!/usr/bin/env bash
# Print the directory holding CAPA's CRDs (config/crd/bases) of the release
# pinned in go.mod beside this script, from the Go module cache; `go mod
# download` fetches the module through the Go module proxy when it is absent.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="sigs.k8s.io/cluster-api-provider-aws/v2"
version="$(awk -v m="$module" '$1 == "require" && $2 == m {print $3} $1 == m {print $2}' "$here/go.mod")"
if [[ -z "$version" ]]; then
  echo "crd-dir.sh: no version of $module in $here/go.mod" >&2
  exit 1
fi
json="$(cd "$here" && GOTOOLCHAIN=local GOFLAGS=-mod=mod GOSUMDB=off GONOSUMDB='*' \
  go mod download -json "$module@$version")"
dir="$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
if [[ -z "$dir" || ! -d "$dir/config/crd/bases" ]]; then
  echo "crd-dir.sh: go mod download gave no CRD directory:" >&2
  printf '%s\n' "$json" >&2
  exit 1
fi
echo "$dir/config/crd/bases"
