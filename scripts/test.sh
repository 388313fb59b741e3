#!/usr/bin/env bash
# The whole test suite: installs what is missing, then runs every stage.
# Usage: bash scripts/test.sh        (CI runs exactly this through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."

stage() { printf '\n==> %s\n' "$*"; }

# --- 1. Tools -----------------------------------------------------------------
# Debian packages, named by a binary each provides.
declare -A PKG=(
  [aarch64-linux-gnu-gcc]=gcc-aarch64-linux-gnu
  [qemu-aarch64]=qemu-user
  [llvm-symbolizer-16]=llvm-16
  [llvm-symbolizer-19]=llvm-19
  [clang-16]=clang-16
  [ld64.lld-16]=lld-16
)
missing=()
for bin in "${!PKG[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("${PKG[$bin]}")
done
[ -f /usr/include/libunwind.h ] || missing+=(libunwind-dev)
[ -d /usr/aarch64-linux-gnu/lib ] || missing+=(libc6-dev-arm64-cross)
if [ ${#missing[@]} -gt 0 ]; then
  stage "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
installed_targets=$(rustup target list --installed)
for t in aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin; do
  grep -qx "$t" <<<"$installed_targets" || rustup target add "$t"
done
rustup component list --installed | grep -q '^clippy' || rustup component add clippy
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt

# --- 2. Style -------------------------------------------------------------------
stage "cargo fmt --check"
cargo fmt --all -- --check
stage "cargo clippy (host)"
cargo clippy --workspace --all-targets -- -D warnings

# --- 3. Tests on the host (x86_64 Linux) -------------------------------------------
stage "cargo test (host)"
cargo test --workspace

# --- 4. The same suite on AArch64, under qemu-aarch64 (.cargo/config.toml) ------
stage "cargo test (aarch64-unknown-linux-gnu under qemu)"
cargo test --workspace --target aarch64-unknown-linux-gnu
