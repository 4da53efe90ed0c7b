#!/usr/bin/env bash
# The device check of the wgpu backend, for a machine with a real GPU (Vulkan, Metal or DX12).
#
# 1. prints the adapter wgpu picks (a software adapter such as llvmpipe is reported, and fails
#    the check unless ARIA_ALLOW_SOFTWARE_ADAPTER=1);
# 2. runs the op harness on wgpu (its report: worst error per op and format), the wgpu
#    backend's own tests and the fixture replays (release, CI=true: a missing adapter or
#    fixture fails instead of skipping);
# 3. times the e2e bench (`cargo xtask bench e2e`) on the CPU and on wgpu for a random
#    real-shape checkpoint, so the two can be compared in one run. Extra arguments go to the
#    bench (default `--seconds 10 --reps 1`).
#
# Knobs: ARIA_WGPU_GEMM_TILE, ARIA_WGPU_ATTN_QUERIES, ARIA_WGPU_ATTN_KEYS, ARIA_WGPU_ELEMENTWISE,
# ARIA_WGPU_MAX_BINDING_BYTES (see aria_wgpu::Knobs) apply to every step.
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

if ! ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libvulkan1
fi

echo "== adapter"
out="$(CI=true cargo test --release -p aria-wgpu --test wgpu_backend \
    linear_views_and_mixed_operands -- --nocapture 2>&1)" || { echo "$out"; exit 1; }
adapter="$(echo "$out" | grep -m1 '^wgpu adapter:' || true)"
echo "${adapter:-no adapter line}"
if echo "$adapter" | grep -qi 'llvmpipe\|swiftshader\|software'; then
    if [ "${ARIA_ALLOW_SOFTWARE_ADAPTER:-0}" != 1 ]; then
        echo "the adapter is a software one: not a GPU check (ARIA_ALLOW_SOFTWARE_ADAPTER=1 to go on)"
        exit 1
    fi
fi

echo "== op tests and fixture replays"
CI=true cargo test --release -p aria-testing --test op_harness wgpu -- --nocapture
CI=true cargo test --release -p aria-wgpu --test wgpu_backend -- --nocapture
CI=true cargo test --release -p aria --features wgpu --test wgpu_parity -- --nocapture

echo "== e2e bench"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--seconds 10 --reps 1)
echo "-- cpu"
ARIA_BENCH_DEVICE=cpu cargo run --release -p xtask --features wgpu -- bench e2e "${args[@]}"
echo "-- wgpu"
ARIA_BENCH_DEVICE=wgpu cargo run --release -p xtask --features wgpu -- bench e2e "${args[@]}"
