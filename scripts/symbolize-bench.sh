#!/usr/bin/env bash
# Times stackmark-symbolize against llvm-symbolizer-19 on a profile log of
# 100,000 frames: the profile example's stacks, each written out as a
# backtrace (`{{{bt}}}` lines), repeated. Each tool runs RUNS times (default
# 3) per source; the best wall time of each is printed.
#
#   scripts/symbolize-bench.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
target=${CARGO_TARGET_DIR:-target}
cargo build -q --example profile
cargo build -q --release -p stackmark-symbolize
tool="$target/release/stackmark-symbolize"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$target/debug/examples/profile" 2 1000 >"$work/profile.txt" 2>/dev/null
python3 - "$work/profile.txt" "$work/log.txt" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
out = [l for l in lines if l.startswith(('{{{reset', '{{{module', '{{{mmap'))]
stacks = [re.findall(r'\{\{\{pc:([^}]*)\}\}\}', l)[::-1] for l in lines if '{{{pc:' in l]
n = 0
while n < 100000:
    for pcs in stacks:
        out.append('stackmark: sample')
        out += ['{{{bt:%d:%s}}} sframe' % (i, p) for i, p in enumerate(pcs)]
        n += len(pcs)
        if n >= 100000:
            break
open(sys.argv[2], 'w').write('\n'.join(out) + '\n')
PY
frames=$(grep -c '{{{bt:' "$work/log.txt")
# The modules the log names that exist here, and their debug files.
files=("$target/debug/examples/profile")
while IFS=: read -r name id; do
  [ -f "$name" ] || continue
  files+=("$name")
done < <(sed -n 's/.*{{{module:[0-9]*:\([^:]*\):elf:\([0-9a-f]*\)}}}.*/\1:\2/p' "$work/log.txt")
scripts/build-id-tree.sh "$work/tree" "${files[@]}" 2>/dev/null
mkdir -p "$work/gsym"
i=0
for f in "${files[@]}"; do
  id=$(readelf -n "$f" | sed -n 's/^[[:space:]]*Build ID: //p' | head -n 1)
  dbg=/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
  [ -f "$dbg" ] && f=$dbg
  dump_syms --inlines -s "$work/breakpad" "$f" >/dev/null 2>&1 || true
  llvm-gsymutil-19 --convert "$f" -o "$work/gsym/$i.gsym" >/dev/null 2>&1 || true
  i=$((i + 1))
done
best() { # COMMAND...: the best wall time of $runs runs, in seconds
  local b="" t
  for _ in $(seq "$runs"); do
    t=$( { TIMEFORMAT=%R; time "$@" <"$work/log.txt" >/dev/null 2>&1; } 2>&1)
    if [ -z "$b" ] || awk -v t="$t" -v b="$b" 'BEGIN { exit !(t < b) }'; then b=$t; fi
  done
  echo "$b"
}
echo "frames: $frames ($(grep -c 'stackmark: sample' "$work/log.txt") stacks), best of $runs runs"
echo "llvm-symbolizer-19 --filter-markup (DWARF by build ID): $(best llvm-symbolizer-19 --filter-markup --debug-file-directory=/usr/lib/debug --debug-file-directory="$work/tree") s"
echo "stackmark-symbolize --debug-file-directory:            $(best "$tool" --debug-file-directory /usr/lib/debug --debug-file-directory "$work/tree") s"
echo "stackmark-symbolize --breakpad (dump_syms):            $(best "$tool" --breakpad "$work/breakpad") s"
echo "stackmark-symbolize --gsym (llvm-gsymutil):            $(best "$tool" --gsym "$work/gsym") s"
