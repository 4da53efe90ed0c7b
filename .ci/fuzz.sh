#!/usr/bin/env bash
# Fuzz the safetensors header parser and weight loader, then the packed-weight reader, each for
# a fixed time (default 60 s).
#
# Installs cargo-fuzz if missing (`cargo install cargo-fuzz`), then runs the `header` target of
# the fuzz/ crate on the nightly toolchain: arbitrary bytes go through `parse_header`, are compared
# with the reference `safetensors` parser, and every tensor of an accepted file is loaded. The
# corpus starts from fuzz/seeds/header. Exits non-zero on a crash, a panic or a disagreement
# (the reproducer lands in fuzz/artifacts/header/).
# Usage: .ci/fuzz.sh [seconds]. Cold: ~2 min to install cargo-fuzz, ~1 min to build, + the run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

mkdir -p fuzz/corpus/header
cargo +nightly fuzz run --fuzz-dir fuzz header fuzz/corpus/header fuzz/seeds/header -- \
    -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -dict=fuzz/header.dict

# The packed-weight reader (aria-quant): the same bytes-as-a-file approach, seeded with small
# valid packed files.
mkdir -p fuzz/corpus/packed
cargo +nightly fuzz run --fuzz-dir fuzz packed fuzz/corpus/packed fuzz/seeds/packed -- \
    -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -dict=fuzz/packed.dict
