#!/usr/bin/env bash
# Fuzzes each target for SECONDS (default 60) with cargo fuzz (libFuzzer,
# nightly), starting from the saved inputs in tests/data/fuzz/<target>/ and
# the real SFrame sections in ../shared/sframe-testcases. Fails on any
# finding; the crashing input is left in fuzz/artifacts/<target>/ and should
# be saved in tests/data/fuzz/<target>/ once fixed.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^stackmark-fuzz$')
fi
if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

# Seeds: the saved inputs, plus every real SFrame section (address + bytes).
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  cp -n tests/data/fuzz/"$t"/* "fuzz/corpus/$t/" 2>/dev/null || true
done
if [ -d ../shared/sframe-testcases ] && [[ " ${targets[*]} " == *" sframe_parse "* ]]; then
  python3 - <<'PY'
import json, glob, os, struct
for f in glob.glob('../shared/sframe-testcases/*.json'):
    d = json.load(open(f))
    out = 'fuzz/corpus/sframe_parse/testcase-' + os.path.basename(f)[:-5]
    open(out, 'wb').write(struct.pack('<Q', d['section_base']) + bytes(d['content']))
PY
fi

total=0
for t in "${targets[@]}"; do
  echo "==> fuzzing $t for ${secs}s"
  log=$(mktemp)
  status=0
  (cd fuzz && cargo +nightly fuzz run "$t" "corpus/$t" -- \
      -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048) >"$log" 2>&1 || status=$?
  grep -E '^(#[0-9]+.*DONE|==[0-9]+==|SUMMARY|thread .* panicked)' "$log" | tail -n 20 || true
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rm -f "$log"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $t found a failure (see fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  echo "fuzz: $t: ${runs:-0} executions, no finding"
  total=$((total + ${runs:-0}))
done
echo "fuzz: ${total} executions in all, no finding"
