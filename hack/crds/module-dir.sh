#!/usr/bin/env bash
# module-dir.sh MODULE: print the directory, in the Go module cache, of the
# release of MODULE pinned in go.mod beside this script; `go mod download`
# fetches it through the Go module proxy when it is absent, and checks it
# against go.sum.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -ne 1 ]]; then
  echo "usage: module-dir.sh MODULE (one of the modules $here/go.mod requires)" >&2
  exit 2
fi
module="$1"
version="$(awk -v m="$module" '$1 == "require" && $2 == m {print $3} $1 == m {print $2}' "$here/go.mod")"
if [[ -z "$version" ]]; then
  echo "module-dir.sh: no version of $module in $here/go.mod" >&2
  exit 1
fi
json="$(cd "$here" && GOTOOLCHAIN=local GOFLAGS=-mod=mod GOSUMDB=off GONOSUMDB='*' \
  go mod download -json "$module@$version")"
dir="$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
if [[ -z "$dir" || ! -d "$dir" ]]; then
  echo "module-dir.sh: go mod download gave no directory for $module@$version:" >&2
  printf '%s\n' "$json" >&2
  exit 1
fi
echo "$dir"
