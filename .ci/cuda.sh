#!/usr/bin/env bash
# Compile every CUDA kernel of aria-cuda to PTX with NVRTC, on a machine without a GPU or a
# CUDA toolkit.
#
# NVRTC comes from the PyPI wheel nvidia-cuda-nvrtc-cu12 (libnvrtc and its builtins, ~90 MB),
# fetched once with `pip download` into a cache outside the repository and unpacked there (no
# environment is installed into). The kernels include no system headers, so the wheel alone is
# enough. The test then runs with ARIA_REQUIRE_NVRTC=1: a missing libnvrtc fails instead of
# skipping, and any kernel that does not compile (or lacks an entry point the backend launches)
# fails the step. Extra arguments are passed to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_VERSION="${ARIA_NVRTC_WHEEL_VERSION:-12.9.86}"
CACHE="${ARIA_NVRTC_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aria-ci/nvrtc-$WHEEL_VERSION}"
LIB="$CACHE/nvidia/cuda_nvrtc/lib"

if ! ls "$LIB"/libnvrtc.so.* >/dev/null 2>&1; then
    PY="$(command -v python3 || command -v python)"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
        "nvidia-cuda-nvrtc-cu12==$WHEEL_VERSION" -d "$tmp"
    mkdir -p "$CACHE"
    "$PY" -m zipfile -e "$tmp"/nvidia_cuda_nvrtc_cu12-*.whl "$CACHE"
fi
ls "$LIB"/libnvrtc.so.* >/dev/null

export LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ARIA_REQUIRE_NVRTC=1 cargo test -p aria-cuda --test nvrtc "$@" -- --nocapture
