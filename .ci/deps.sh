#!/usr/bin/env bash
# The Debian packages the tests use beyond Rust, installed when missing (one apt-get run):
# a software Vulkan device (Mesa lavapipe) for the wgpu backend's tests, and Chromium (with a
# font) for the web page's real-browser test. PostgreSQL comes with `.ci/postgres.sh`.
# Without root or apt it says what is missing and exits non-zero; the tests that need a
# package then skip (or fail under CI=true).
set -euo pipefail

want=()
dpkg -s mesa-vulkan-drivers >/dev/null 2>&1 || want+=(mesa-vulkan-drivers)
dpkg -s libvulkan1 >/dev/null 2>&1 || want+=(libvulkan1)
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
    && [ -z "${ARIA_CHROMIUM:-}" ]; then
    want+=(chromium fonts-dejavu-core)
fi
[ ${#want[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "deps.sh: no apt-get; install ${want[*]} by hand" >&2
    exit 1
fi
echo "deps.sh: installing ${want[*]}" >&2
$SUDO apt-get update -q >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${want[@]}" >&2
