#!/usr/bin/env bash
# Fuzz every parser that reads outside input, each target for a fixed time (default 30 s, to
# keep CI time reasonable; 6 targets ≈ 3 min of fuzzing after the build).
#
# Installs the nightly toolchain and cargo-fuzz if missing (`cargo install cargo-fuzz`), builds
# every target of the fuzz/ crate once (`cargo +nightly fuzz build`), then runs each one, its
# corpus starting from fuzz/seeds/<target> (and fuzz/corpus/<target> when kept):
#   header        safetensors header parser + weight loader, checked against the reference
#                 `safetensors` parser;
#   packed        aria-quant packed-weight files (dequantize + products of accepted tensors);
#   request       the server's POST /v1/generate body (JSON, multipart parts, base64 uploads)
#                 through parsing and validation with the default limits; an accepted request
#                 must respect every limit;
#   audio         uploaded audio read as .wav and as .flac (hound / symphonia), then prepared
#                 as audio-to-audio prepares it;
#   model_config  a checkpoint's model_config.json (DiT, conditioners, autoencoder); accepted
#                 sizes must be sane;
#   direction     steering direction files (finite unit directions of the declared shape).
# Exits non-zero on the first crash, panic, failed property, timeout (-timeout) or memory
# blow-up (-rss_limit_mb); the reproducer lands in fuzz/artifacts/<target>/.
# Usage: .ci/fuzz.sh [seconds per target] [target ...] (default: every target).
# Cold: ~2 min to install cargo-fuzz, several minutes to build (the server target links the
# whole pipeline), + the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(header packed request audio model_config direction)
fi

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cargo +nightly fuzz build --fuzz-dir fuzz

# Per-target libFuzzer options: the longest input and the dictionary.
opts() {
    case "$1" in
        header) echo "-max_len=4096 -dict=fuzz/header.dict" ;;
        packed) echo "-max_len=8192 -dict=fuzz/packed.dict" ;;
        request) echo "-max_len=8192 -dict=fuzz/request.dict" ;;
        audio) echo "-max_len=8192 -dict=fuzz/audio.dict" ;;
        model_config) echo "-max_len=8192 -dict=fuzz/model_config.dict" ;;
        direction) echo "-max_len=4096 -dict=fuzz/direction.dict" ;;
        *) echo "unknown fuzz target: $1" >&2; return 1 ;;
    esac
}

for t in "${targets[@]}"; do
    o="$(opts "$t")"
    mkdir -p "fuzz/corpus/$t"
    echo "== fuzz target $t: ${secs} s"
    # shellcheck disable=SC2086 # $o is a list of options
    cargo +nightly fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 $o
done
