#!/usr/bin/env bash
# Build and test the aria-cpu, aria-core and aria-quant CPU kernels for aarch64 (NEON) under qemu-user.
#
# Installs, if missing, Debian's Rust toolchain with an arm64 standard library, the aarch64 cross
# linker and qemu-user, links the toolchain into rustup as `debian-web`, then runs their
# tests for aarch64-unknown-linux-gnu twice: with QEMU_CPU=cortex-a72 (plain NEON) and with qemu's
# default CPU model. The cross linker and the qemu runner are set here (not in .cargo/config.toml,
# where they would also apply to native builds on an ARM machine).
set -euo pipefail
cd "$(dirname "$0")/.."

need_install=0
for bin in qemu-aarch64 aarch64-linux-gnu-gcc; do
    command -v "$bin" >/dev/null 2>&1 || need_install=1
done
dpkg -s libstd-rust-web-dev:arm64 >/dev/null 2>&1 || need_install=1
dpkg -s rustc-web >/dev/null 2>&1 || need_install=1
if [ "$need_install" = 1 ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO dpkg --add-architecture arm64
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q \
        rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
fi
if ! rustup toolchain list | grep -q '^debian-web'; then
    rustup toolchain link debian-web /usr
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER="${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-aarch64-linux-gnu-gcc}"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER:-qemu-aarch64}"

# Code behind `cfg(target_arch = "aarch64")` is only compiled here: its warnings are errors too.
export RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
target_dir="${CARGO_TARGET_DIR:-target}"
export CARGO_TARGET_DIR="$target_dir"
echo "== aarch64 tests, QEMU_CPU=cortex-a72 (NEON only)"
QEMU_CPU=cortex-a72 cargo +debian-web test --target aarch64-unknown-linux-gnu -p aria-core -p aria-cpu -p aria-quant "$@"
echo "== aarch64 tests, qemu default CPU"
env -u QEMU_CPU cargo +debian-web test --target aarch64-unknown-linux-gnu -p aria-core -p aria-cpu -p aria-quant "$@"
