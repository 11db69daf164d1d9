#!/usr/bin/env bash
# Put Debian's Prometheus server and promtool into .bin/ (no root, nothing installed system-wide).
#
#   hack/prometheus/install.sh [BIN_DIR]
#
# The local stack runs `prometheus` (docs/local-stack.md); the tests run
# `promtool check rules` / `promtool test rules` on kustomize/components/prometheus-rules/.
# Both come from Debian's `prometheus` package, fetched with `apt-get download`
# (apt checks it against the signed archive) and unpacked with `dpkg -x`: the
# package's dependencies (web UI JavaScript, adduser, init scripts) are for a
# system service and are not needed here. If apt cannot fetch it (no package
# lists, say), the pinned version is fetched from the archive's pool and
# checked against the SHA-256 below. If the archive has replaced the pinned
# version (a security update), apt's current one is taken, and the record says so.
# .bin/prometheus.version records what was unpacked; nothing is fetched again
# while it names the same pin and both binaries are there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin_dir="$(mkdir -p "${1:-$repo/.bin}" && cd "${1:-$repo/.bin}" && pwd)"

VERSION="2.42.0+ds-5+deb12u1"          # Debian 12 (bookworm)
SHA256_AMD64="81d59a24fce84f7fbe97a45a4f2914b6a5881b5cd1db2a6a0e129e515e1a5f55"
# The fallback download comes from the first Debian mirror apt's own sources name.
apt_mirror() {
  local sources=() found
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] && sources+=("$f")
  done
  (( ${#sources[@]} )) || return 0
  found="$(sed -n -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([a-z]+:\/\/[^[:space:]]+).*/\2/p; s/^URIs:[[:space:]]*([^[:space:]]+).*/\1/p' \
    "${sources[@]}" || true)"
  printf '%s\n' "$found" | grep -v -e security -e '^$' | head -n1 || true
}
MIRROR="${DEBIAN_MIRROR:-$(apt_mirror)}"
record="$bin_dir/prometheus.version"
say() { echo "prometheus: $*"; }

if [[ -x "$bin_dir/prometheus" && -x "$bin_dir/promtool" && -f "$record" ]] \
   && grep -qx "pin=$VERSION" "$record"; then
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
started=$SECONDS
arch="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
how=""
if (cd "$work" && apt-get download -q "prometheus=$VERSION") >"$work/apt.log" 2>&1; then
  how="apt-get download prometheus=$VERSION"
elif [[ "$arch" == amd64 && -n "$MIRROR" ]]; then
  url="$MIRROR/pool/main/p/prometheus/prometheus_${VERSION}_amd64.deb"
  say "apt-get download failed ($(tail -n1 "$work/apt.log")); fetching $url"
  if python3 - "$url" "$work/prometheus_${VERSION}_amd64.deb" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=120) as r, open(sys.argv[2], "wb") as f:
    while chunk := r.read(1 << 20):
        f.write(chunk)
PY
  then
    echo "$SHA256_AMD64  $work/prometheus_${VERSION}_amd64.deb" | sha256sum -c --quiet \
      || { say "checksum mismatch for $url" >&2; exit 1; }
    how="$url (sha256 $SHA256_AMD64)"
  fi
fi
if [[ -z "$how" ]]; then
  say "the pinned $VERSION is not available; taking the version apt offers"
  (cd "$work" && rm -f ./*.deb && apt-get download -q prometheus) >"$work/apt.log" 2>&1 \
    || { say "apt-get download prometheus failed:" >&2; cat "$work/apt.log" >&2; exit 1; }
  how="apt-get download prometheus (the pinned $VERSION was not available)"
fi

deb="$(ls "$work"/prometheus_*.deb)"
dpkg-deb -x "$deb" "$work/root"
install -m 0755 "$work/root/usr/bin/prometheus" "$work/root/usr/bin/promtool" "$bin_dir/"
release="$("$bin_dir/promtool" --version 2>&1 | sed -n 's/^promtool, version \([^ ]*\).*/\1/p')"
cat > "$record" <<REC
pin=$VERSION
release=$release
package=$(basename "$deb")
source=$how
REC
say "$(basename "$deb") unpacked into $bin_dir (prometheus, promtool $release) in $((SECONDS - started)) s"
