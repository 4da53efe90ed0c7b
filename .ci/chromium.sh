#!/usr/bin/env bash
# Run the web page's real-browser test: headless Chromium drives the page that `aria serve`
# ships, fills the form, waits for the audio player and saves a screenshot under target/.
#
# Installs Debian's `chromium` if no Chromium is on PATH (or named by ARIA_CHROMIUM), then runs
# `cargo test -p aria-serve --test browser` with CI=true, so that a missing browser fails instead
# of skipping. Extra arguments are passed to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

have_browser() {
    [ -n "${ARIA_CHROMIUM:-}" ] && [ -x "${ARIA_CHROMIUM}" ] && return 0
    command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
        || command -v google-chrome >/dev/null 2>&1
}

if ! have_browser; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
        chromium fonts-dejavu-core
fi

CI=true cargo test -p aria-serve --test browser "$@" -- --nocapture
