#!/usr/bin/env bash
# The Debian packages the tests use beyond Rust, installed when missing: a software Vulkan
# device (Mesa lavapipe) for the wgpu backend's tests, and Chromium (with a font) for the web
# page's real-browser test. PostgreSQL comes with `.ci/postgres.sh`.
#
#   bash .ci/deps.sh              the test packages above
#   bash .ci/deps.sh PACKAGE...   the named packages (other scripts install through this one)
#
# Only missing packages are installed, and nothing already installed is upgraded: apt-get's plan
# is simulated first, and when it would upgrade an installed package (a newer dependency of a
# missing one) the script lists those upgrades and installs nothing, unless
# ARIA_ALLOW_UPGRADE=1. It prints every package it installs. Without root (or sudo) or apt-get
# it says what is missing and exits non-zero; the tests that need a package then skip (recorded)
# or fail under CI=true. ARIA_NO_INSTALL=1 never installs anything.
set -euo pipefail

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

want=()
if [ $# -gt 0 ]; then
    for p in "$@"; do installed "$p" || want+=("$p"); done
else
    for p in mesa-vulkan-drivers libvulkan1; do installed "$p" || want+=("$p"); done
    if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
        && [ -z "${ARIA_CHROMIUM:-}" ]; then
        want+=(chromium fonts-dejavu-core)
    fi
fi
[ ${#want[@]} -eq 0 ] && exit 0

if [ "${ARIA_NO_INSTALL:-0}" = 1 ]; then
    echo "deps.sh: missing ${want[*]} (ARIA_NO_INSTALL=1: not installing)" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "deps.sh: no apt-get; install ${want[*]} by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "deps.sh: missing ${want[*]}; installing needs root (or sudo without a password)" >&2
        exit 1
    fi
fi
opts=(-y -q --no-install-recommends --no-upgrade)
echo "deps.sh: missing ${want[*]}" >&2
$SUDO apt-get update -q >/dev/null
# apt-get's plan: `Inst NAME [OLD] (NEW ...)` upgrades an installed package, `Inst NAME (NEW ...)`
# installs a new one.
plan="$(DEBIAN_FRONTEND=noninteractive apt-get install -s "${opts[@]}" "${want[@]}" | grep '^Inst ' || true)"
upgrades="$(grep -E '^Inst [^ ]+ \[' <<<"$plan" || true)"
if [ -n "$upgrades" ] && [ "${ARIA_ALLOW_UPGRADE:-0}" != 1 ]; then
    {
        echo "deps.sh: installing ${want[*]} would upgrade these installed packages:"
        sed -E 's/^Inst ([^ ]+) \[([^]]+)\] \(([^ ]+).*/  \1 \2 -> \3/' <<<"$upgrades"
        echo "deps.sh: nothing installed; set ARIA_ALLOW_UPGRADE=1 to allow that, or install ${want[*]} by hand"
    } >&2
    exit 1
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install "${opts[@]}" "${want[@]}" >/dev/null
{
    echo "deps.sh: installed:"
    sed -E -e 's/^Inst ([^ ]+) \[([^]]+)\] \(([^ ]+).*/  \1 \3 (upgraded from \2)/' \
        -e 's/^Inst ([^ ]+) \(([^ ]+).*/  \1 \2/' <<<"$plan"
} >&2
