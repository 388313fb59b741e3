#!/usr/bin/env bash
# The main job in one command: build and run the crash example (it crashes on
# purpose), show its markup report, then the same report symbolized by
# llvm-symbolizer. Installs llvm-19 from Debian if no llvm-symbolizer is there.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v llvm-symbolizer-19 >/dev/null && ! command -v llvm-symbolizer-16 >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq llvm-19 >/dev/null
fi
cargo build --quiet --example crash || exit 1
target=${CARGO_TARGET_DIR:-target}
report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$target/debug/examples/crash" "${1:-segv}" 2>"$report"
status=$?
echo "== the crash example exited with status $status (128 + signal)"
echo "== its report, as printed on standard error:"
cat "$report"
echo
# The example ends by its signal; anything else means it did not run.
if [ "$status" -le 128 ]; then
  echo "== the crash example did not crash" >&2
  exit 1
fi
echo "== symbolized with llvm-symbolizer --filter-markup:"
scripts/symbolize.sh "$report" "$target/debug"
