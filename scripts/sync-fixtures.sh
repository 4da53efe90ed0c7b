#!/usr/bin/env bash
# Copy the shared parity fixtures into the repository's fixtures/ folder and report what changed.
#
# New fixture cases arrive in the shared fixtures folder beside the checkout (../shared/fixtures
# relative to the repository root) first; this script brings the repository's copy up to date.
# The aria-testing test `fixtures_in_sync` fails, naming the stale files, while the copy differs.
#
# Usage: scripts/sync-fixtures.sh [SOURCE]   (SOURCE defaults to ../shared/fixtures)
# Files only in the repository's copy are listed, never deleted.
set -euo pipefail
cd "$(dirname "$0")/.."
src="${1:-../shared/fixtures}"
dest="fixtures"
if [ ! -f "$src/README.md" ]; then
    echo "sync-fixtures: no fixtures at $src (expected a README.md there)" >&2
    exit 1
fi
mkdir -p "$dest"
added=0 changed=0 same=0
while IFS= read -r -d '' f; do
    rel="${f#"$src"/}"
    if [ ! -e "$dest/$rel" ]; then
        echo "added   $rel"
        added=$((added + 1))
    elif cmp -s "$f" "$dest/$rel"; then
        same=$((same + 1))
        continue
    else
        echo "changed $rel"
        changed=$((changed + 1))
    fi
    mkdir -p "$(dirname "$dest/$rel")"
    rm -f "$dest/$rel"
    cp "$f" "$dest/$rel"
    chmod u+w,a+r "$dest/$rel"
done < <(find "$src" -type f -print0 | sort -z)
extra=0
while IFS= read -r -d '' f; do
    rel="${f#"$dest"/}"
    if [ ! -e "$src/$rel" ]; then
        echo "only in the repository (kept): $rel"
        extra=$((extra + 1))
    fi
done < <(find "$dest" -type f -print0 | sort -z)
echo "sync-fixtures: $added added, $changed changed, $same unchanged, $extra only in the repository"
