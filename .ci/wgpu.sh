#!/usr/bin/env bash
# Run the wgpu backend tests on a software Vulkan device (Mesa lavapipe).
#
# Installs, if missing, mesa-vulkan-drivers and libvulkan1, then runs the op harness on wgpu,
# the wgpu backend's own tests and the fixture replays of `aria` (tests/wgpu_parity.rs) with CI=true, so that a missing
# adapter fails instead of skipping. Extra arguments are passed to `cargo test`.
# Cold: ~5-8 minutes on 2 cores (mostly building wgpu); the tests themselves take ~1 s.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q mesa-vulkan-drivers libvulkan1
fi

# The GL and surface paths are unused; keep the loader from probing a display.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# The op harness (every op × format × shape against the CPU) and what is particular to wgpu.
CI=true cargo test -p aria-testing --test op_harness "$@" -- --nocapture
CI=true cargo test -p aria-wgpu --test wgpu_backend "$@" -- --nocapture
# The fixture replays (DiT, sampler, SAME-S/L decoders, T5Gemma f32, e2e through the pipeline).
CI=true cargo test -p aria --features wgpu --test wgpu_parity "$@" -- --nocapture
