#!/usr/bin/env bash
# Symbolizes a stackmark report (markup) with llvm-symbolizer.
#
#   scripts/symbolize.sh REPORT [BINARY_DIR...]
#
# REPORT is a file holding the markup (or - for standard input). The
# binaries are found by build ID under BINARY_DIRs (default: $CARGO_TARGET_DIR,
# else target/), and the files the report's module elements name that exist
# on this machine (system libraries); a .build-id tree is made for them in a
# temporary directory.
# /usr/lib/debug (Debian's -dbg packages) is searched first: naming any
# directory replaces that default, and the tree links stripped system
# libraries, which would otherwise be taken instead of their debug files.
set -euo pipefail
report=${1:--}
shift || true
[ $# -gt 0 ] || set -- "${CARGO_TARGET_DIR:-$(dirname "$0")/../target}"
sym=$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer-16 || command -v llvm-symbolizer || true)
if [ -z "$sym" ]; then
  echo "symbolize: no llvm-symbolizer (install Debian's llvm-19)" >&2
  exit 1
fi
if [ "$report" != - ] && { [ -d "$report" ] || [ ! -r "$report" ]; }; then
  echo "symbolize: cannot read the report $report" >&2
  exit 1
fi
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
# Read once: a report on a pipe cannot be read twice.
cat -- "$report" >"$tree/report"
# {{{module:ID:NAME:elf:BUILD_ID}}}: a name holds no ':'.
named=()
while IFS= read -r f; do
  [ -f "$f" ] && named+=("$f")
done < <(sed -n 's/.*{{{module:[0-9]*:\([^:]*\):elf:[0-9a-f]*}}}.*/\1/p' "$tree/report" | sort -u)
if ! "$(dirname "$0")/build-id-tree.sh" "$tree" "$@" ${named[@]+"${named[@]}"} 2>"$tree/log"; then
  cat "$tree/log" >&2
  exit 1
fi
"$sym" --filter-markup --debug-file-directory=/usr/lib/debug --debug-file-directory="$tree" <"$tree/report"
