#!/usr/bin/env bash
# The whole test suite: installs what is missing, then runs every stage.
# Usage: bash scripts/test.sh        (CI runs exactly this through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."

stage() { printf '\n==> %s\n' "$*"; }

# Disk. A CI machine's disk can be small: one run ran out of space after
# 600 s, with the host and AArch64 builds (6 GB together) both kept.
# Incremental state (1.7 GB of those) only helps a rebuild, which CI never
# does, and each stage's build is deleted once no later stage uses it
# (drop_build), so the run needs the largest stage's build (under 2 GB), not
# their sum. STACKMARK_KEEP_BUILDS=1 keeps them, for a developer's rerun.
export CARGO_INCREMENTAL=0
drop_build() {
  [ "${STACKMARK_KEEP_BUILDS:-0}" = 1 ] && return 0
  stage "deleting $* (no later stage uses it)"
  rm -rf "$@"
  df -h . | tail -1
}

# Every stage runs even after another failed, so one run reports every
# failure; the failed stages are listed at the end and make the exit status.
failed_stages=()
check() {
  local name=$1
  shift
  stage "$name"
  "$@" || failed_stages+=("$name")
}

# Every cargo test run is also logged here, for the closing summary.
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
# A hang (a deadlock a test did not catch) fails the stage after 20 minutes
# (the host suite, builds included, takes a few) rather than holding up
# the run.
run_tests() { timeout --kill-after=30 1200 cargo test "$@" 2>&1 | tee -a "$LOG"; }

# --- 1. Tools -----------------------------------------------------------------
# Debian packages.
# gdb and libc6-dbg: tests/gdb_oracle.rs (gdb names glibc's frames, down to
# clone3, only with its debug symbols). libstdc++6 and libstdc++6-arm64-cross:
# tests/offline/cfi_conformance.rs reads their .eh_frame (the cross one otherwise
# comes only as a dependency). mold: tests/offline/recipe.rs links with it.
# valgrind: scripts/bench-goals.sh counts instructions with callgrind.
# golang-go: symbolize/tests/pprof.rs reads stackmark-symbolize --pprof's
# profiles with the real `go tool pprof`, the consumer they are made for.
PACKAGES=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user llvm-16 llvm-19 clang-16 lld-16
  libunwind-dev binutils gdb libc6-dbg libstdc++6 libstdc++6-arm64-cross mold valgrind golang-go)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  stage "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  # A mirror that fails once (a reset connection, a mirror being synced)
  # must not fail the run: apt retries each download, and the whole step is
  # tried three times.
  for attempt in 1 2 3; do
    if $SUDO apt-get -o Acquire::Retries=3 update -qq &&
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o Acquire::Retries=3 \
        install -y -qq "${missing[@]}" >/dev/null; then
      break
    fi
    [ "$attempt" -lt 3 ] || exit 1
    stage "installing Debian packages failed (attempt $attempt); trying again in 20 s"
    sleep 20
  done
fi
installed_targets=$(rustup target list --installed)
for t in aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin; do
  grep -qx "$t" <<<"$installed_targets" || rustup target add "$t" || {
    sleep 20
    rustup target add "$t"
  }
done
# Mozilla's dump_syms, pinned: symbolize/tests/ check stackmark-symbolize's
# Breakpad source on the symbol files it writes. Built once (a few minutes
# on 2 cores), without its symbol-server download support.
DUMP_SYMS_VERSION=2.3.9
if ! dump_syms --version 2>/dev/null | grep -qx "dump_syms $DUMP_SYMS_VERSION"; then
  stage "installing dump_syms $DUMP_SYMS_VERSION"
  install_dump_syms() {
    cargo install dump_syms --locked --version "$DUMP_SYMS_VERSION" \
      --no-default-features --features cli
  }
  # A registry that fails once must not fail the run.
  install_dump_syms || { sleep 20; install_dump_syms; }
fi
rustup component list --installed | grep -q '^clippy' || rustup component add clippy
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt

# --- 2. Style -------------------------------------------------------------------
check "cargo fmt --check" cargo fmt --all -- --check
check "cargo clippy (host)" cargo clippy --workspace --all-targets -- -D warnings
# The library as users build it: without the internals feature its tests
# turn on, so no item only they use may be left to warn.
check "cargo clippy (library, default features)" cargo clippy -p stackmark --lib -- -D warnings
check "layer check (scripts/check-layers.py)" python3 scripts/check-layers.py
check "cargo doc (warnings are errors)" env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
# The internals too: the tests, benches and fuzz targets read their docs.
check "cargo doc (internals feature)" env RUSTDOCFLAGS="-D warnings" \
  cargo doc --no-deps --quiet -p stackmark --features internals

# --- 3. Tests on the host (x86_64 Linux) -------------------------------------------
# The tests that need no process of their own share one binary
# (tests/offline/): 31 integration-test binaries instead of 45. The whole
# script took 1,468 s before that change (CI of b220030) and 1,514 s after
# it (a run of 4a787db on this 2-core machine), with 38 more tests.
check "cargo test (host)" run_tests --workspace
drop_build target/debug target/recipe-host

# --- 4. The same suite on AArch64, under qemu-aarch64 (.cargo/config.toml) ------
# qemu-user can hang a forked child (.cargo/config.toml says why and what
# avoids it). Should a run still hang, it is stopped after 15 minutes (it
# takes about 3) and run once more; test failures are never retried. Only
# the finished run's results count in the summary.
run_tests_under_qemu() {
  local attempt rc out
  out=$(mktemp)
  for attempt in 1 2; do
    rc=0
    timeout --kill-after=30 900 cargo test "$@" 2>&1 | tee "$out" || rc=$?
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || break
    stage "the run under qemu hung (attempt $attempt, exit $rc)"
  done
  cat "$out" >>"$LOG"
  rm -f "$out"
  return "$rc"
}
check "cargo test (aarch64-unknown-linux-gnu under qemu)" \
  run_tests_under_qemu --workspace --target aarch64-unknown-linux-gnu
drop_build target/debug target/aarch64-unknown-linux-gnu target/recipe-aarch64-unknown-linux-gnu

# --- 5. Benchmarks: a short run of every bench, for the report's every figure ----
# Runs, not figures: a bench that panics or a result the README's tables
# need and the run lacks fails the stage. No timing is judged here.
check "bench smoke run (scripts/bench-goals.sh --quick)" bash scripts/bench-goals.sh --quick
check "bench spread smoke run (scripts/bench-goals.sh --spread 2)" bash scripts/bench-goals.sh --spread 2

# --- 6. Fuzz smoke run (cargo fuzz, nightly): each target, bounded ------------------
check "fuzz smoke run (${STACKMARK_FUZZ_SECS:-40} s per target)" \
  bash scripts/fuzz.sh "${STACKMARK_FUZZ_SECS:-40}"
drop_build fuzz/target

# --- 7. Apple targets: compile only (nothing here can run macOS code) -----------------
for t in x86_64-apple-darwin aarch64-apple-darwin; do
  check "cargo build --lib ($t)" cargo build --lib --target "$t"
  check "cargo clippy --all-targets ($t)" \
    cargo clippy --workspace --all-targets --target "$t" -- -D warnings
done

# --- Summary ------------------------------------------------------------------------
passed=$({ grep -E '^test result:' "$LOG" || true; } | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
failed=$({ grep -E '^test result:' "$LOG" || true; } | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
printf '\nstackmark: %s passed, %s failed\n' "$passed" "$failed"
if [ ${#failed_stages[@]} -gt 0 ]; then
  printf 'stackmark: failed stage: %s\n' "${failed_stages[@]}"
  exit 1
fi
