#!/usr/bin/env bash
# Run aria-core's mapping-free tests under miri (undefined-behaviour checks of tensor views,
# strided copies, dtype conversion, zero-size layouts and the safetensors header parser).
#
# Installs the nightly miri and rust-src components if missing, then runs
#   cargo +nightly miri test -p aria-core --test tensor
#   cargo +nightly miri test -p aria-core --lib -- loader::tests
# File mapping (memmap2) is outside what miri can execute, so the loader's integration tests
# (tests/loader.rs) stay with the normal test run.
# Cold: ~7 min on 2 cores (miri builds its own std and the dependencies), then ~3 min of tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
rustup +nightly component add miri rust-src
cargo +nightly miri setup
cargo +nightly miri test -p aria-core --test tensor
cargo +nightly miri test -p aria-core --lib -- loader::tests
