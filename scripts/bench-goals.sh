#!/usr/bin/env bash
# Runs the walk benchmarks side by side in one run and prints the README's
# performance tables from that run alone: nanoseconds per frame on stacks of
# distinct functions (SFrame-only and frame-pointer-only builds) with the
# speed goals judged there, for every unwinder at every depth of the
# recursion, the other operations, the stack through the C
# library (nested `qsort` calls, walked by DWARF CFI), the 16-deep walk by
# parts, and each speed goal with its ratio and verdict (met, or missed and
# by how much: the share of the walk's time it would have to lose).
#
# Usage:
#   scripts/bench-goals.sh            full run (a few minutes)
#   scripts/bench-goals.sh --quick    short run (STACKMARK_BENCH_QUICK=1): checks
#                                     that every bench runs, not for figures
#   scripts/bench-goals.sh --spread N
#                                     the stacks of distinct functions and the
#                                     16-deep recursion, each unwinder in N
#                                     fresh processes: min, median and max, and
#                                     the speed goals judged on the medians
#   scripts/bench-goals.sh --report DIR
#                                     tables from an earlier run's DIR
#                                     (DIR/criterion and DIR/bench.log)
#
# A run writes to ${CARGO_TARGET_DIR:-target}/bench-goals/ (emptied first,
# so no figure comes from an older run) and exits non-zero if any figure a
# table needs is missing. libunwind is benchmarked on x86_64 only.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every result under criterion's directory $1, a line each: its id
# ("depth16/stackmark/sframe") and its time in ns, the slope where
# criterion fitted one (what it prints), else the mean.
results() {
  python3 - "$1" <<'PY'
import json, os, sys
for root, _, files in os.walk(sys.argv[1]):
    if os.path.basename(root) == "new" and "benchmark.json" in files:
        with open(os.path.join(root, "benchmark.json")) as f:
            name = json.load(f)["full_id"]
        with open(os.path.join(root, "estimates.json")) as f:
            est = json.load(f)
        print(name, (est.get("slope") or est["mean"])["point_estimate"])
PY
}

report() {
  local dir=$1
  [ -d "$dir/criterion" ] && [ -f "$dir/bench.log" ] || {
    echo "bench-goals: $dir holds no run (criterion/ and bench.log)" >&2
    return 1
  }
  results "$dir/criterion" >"$dir/times"
  python3 - "$dir" <<'PY'
import os, re, sys

sys.path.insert(0, "scripts")
from speed_goals import DEPTHS, DISTINCT, OPTIONAL, SPEED_GOALS, build, fmt, met

run = sys.argv[1]
times = {}
with open(os.path.join(run, "times")) as f:
    for line in f:
        name, t = line.split()
        times[name] = float(t)

# Frames each unwinder walked, as the benches print them:
# "depth 16: stackmark/sframe 27 frames, stackmark/fp 27 frames".
frames = {}
# The same for the stack through the C library: "qsort 8: stackmark 34
# frames (context 1, cfi 33)" (8 levels of `qsort`).
qsort_frames = {}
# And for the stacks of distinct functions: "distinct 16: stackmark/sframe
# 28 frames", "distinct-fp 64: libunwind 79 frames".
distinct_frames = {}
# Instructions per frame: "callgrind sframe 16 warm: 29572 instructions, 10
# walks, 27 frames".
callgrind = {}
header = {}
report_shape = "every module"
cuts = []
with open(os.path.join(run, "bench.log")) as f:
    for line in f:
        m = re.match(r"depth (\d+): (.*)", line)
        if m:
            for who, n in re.findall(r"([\w/-]+) (\d+) frames", m.group(2)):
                frames[(int(m.group(1)), who)] = int(n)
        m = re.match(r"callgrind (\w+) (\d+) (\w+): (\d+) instructions, (\d+) walks, (\d+) frames", line)
        if m:
            ir, walks, n = int(m.group(4)), int(m.group(5)), int(m.group(6))
            callgrind[(m.group(1), int(m.group(2)), m.group(3))] = (ir / walks, n)
        m = re.match(r"(distinct(?:-fp)?) (\d+): ([\w/-]+) (\d+) frames", line)
        if m:
            distinct_frames[(m.group(1), int(m.group(2)), m.group(3))] = int(m.group(4))
        m = re.match(r"qsort (\d+): ([\w/-]+) (\d+) frames", line)
        if m:
            qsort_frames[(int(m.group(1)), m.group(2))] = int(m.group(3))
        m = re.match(r"depth16 part ([\w-]+): (\d+) frames", line)
        if m:
            cuts.append((m.group(1), int(m.group(2))))
        m = re.match(r"markup report: (\d+) frames, (\d+) modules", line)
        if m:
            report_shape = f"{m.group(1)} frames, {m.group(2)} modules"
        m = re.match(r"bench-goals: (\w+): (.*)", line)
        if m:
            header[m.group(1)] = m.group(2).strip()

UNWINDERS = [
    ("stackmark, SFrame", "stackmark/sframe", "stackmark/sframe"),
    ("stackmark, frame pointers only", "stackmark/fp", "stackmark/fp"),
    ("stackmark, SFrame, cold", "stackmark/sframe-cold", "stackmark/sframe"),
    ("libunwind `unw_backtrace`", "libunwind", "libunwind"),
    ("framehop (`.eh_frame`)", "framehop", "framehop"),
    ("`backtrace` crate `trace`", "backtrace-rs", "backtrace-rs"),
    ("glibc `backtrace()`", "glibc", "glibc"),
]
missing = []


# Which of the optional unwinders (`OPTIONAL`) ran.
ran = {who for (_, who) in frames}


def per_frame(depth, bench, counted):
    t = times.get(f"depth{depth}/{bench}")
    n = frames.get((depth, counted))
    if t is None or not n:
        if counted not in OPTIONAL or counted in ran:
            missing.append(f"depth{depth}/{bench}")
        return None
    return t / n, n


for key in ("commit", "machine", "load"):
    if key in header:
        print(f"{key}: {header[key]}")
print()
print("ns per frame (frames walked)")
print()
print("| unwinder | " + " | ".join(f"{d} deep" for d in DEPTHS) + " |")
print("| --- |" + " --- |" * len(DEPTHS))
pf = {}
for label, bench, counted in UNWINDERS:
    cells = []
    for d in DEPTHS:
        r = per_frame(d, bench, counted)
        pf[(bench, d)] = r and r[0]
        cells.append("not run" if r is None else f"{fmt(r[0])} ({r[1]})")
    print(f"| {label} | " + " | ".join(cells) + " |")

# Stacks of distinct functions: the goals are judged here.
dran = {who for (_, _, who) in distinct_frames}
dpf = {}
print()
print("Stacks of distinct C functions (a Rust frame after every sixteenth), ns per frame (frames walked)")
print()
print("| build | unwinder | " + " | ".join(f"{d} functions" for d in DEPTHS) + " |")
print("| --- | --- |" + " --- |" * len(DEPTHS))
for label, kind, bench, counted in DISTINCT:
    cells = []
    for d in DEPTHS:
        t = times.get(f"{kind}{d}/{bench}")
        n = distinct_frames.get((kind, d, counted))
        if t is None or not n:
            if counted not in OPTIONAL or counted in dran:
                missing.append(f"{kind}{d}/{bench}")
            cells.append("not run")
            continue
        dpf[(kind, bench, d)] = t / n
        cells.append(f"{fmt(t / n)} ({n})")
    print(f"| {build(kind)} | {label} | " + " | ".join(cells) + " |")

print()
print("The same stacks in instructions per frame (callgrind, the walk alone)")
print()
print("| walk | " + " | ".join(f"{d} functions" for d in DEPTHS) + " | each frame added, 16 to 256 |")
print("| --- |" + " --- |" * (len(DEPTHS) + 1))
for label, kind, warmth in [
    ("stackmark, SFrame, warm", "sframe", "warm"),
    ("stackmark, SFrame, cold", "sframe", "cold"),
    ("stackmark, frame pointers, warm", "fp", "warm"),
]:
    cells = []
    for d in DEPTHS:
        v = callgrind.get((kind, d, warmth))
        if v is None:
            missing.append(f"callgrind {kind} {d} {warmth}")
        cells.append("not run" if v is None else f"{v[0] / v[1]:.0f}")
    # The harness's own frames (frame pointers off in the standard
    # library) weigh on a short walk; the slope is the chain's alone.
    lo, hi = callgrind.get((kind, DEPTHS[0], warmth)), callgrind.get((kind, DEPTHS[-1], warmth))
    slope = "—" if not lo or not hi or hi[1] == lo[1] else f"{(hi[0] - lo[0]) / (hi[1] - lo[1]):.0f}"
    print(f"| {label} | " + " | ".join(cells) + f" | {slope} |")

print()
print("| operation | time |")
print("| --- | --- |")
ops = [
    ("`init`/`refresh` (the module table)", "init/refresh", 1e3, "µs"),
    (f"a full markup report ({report_shape})", "markup/report-64-frames-all-modules", 1e3, "µs"),
    # Each iteration looks up 64 pcs.
    ("an SFrame lookup, 64 concatenated pieces, no piece index", "sframe-lookup-64-pieces/plain", 64, "ns"),
    ("an SFrame lookup, 64 concatenated pieces, with the piece index", "sframe-lookup-64-pieces/indexed", 64, "ns"),
    ("a dump of every thread, 16 threads (benches/threads.rs)", "threads/16", 1e6, "ms"),
    ("a dump of every thread, 128 threads", "threads/128", 1e6, "ms"),
]
op = {}
for label, name, scale, unit in ops:
    t = times.get(name)
    if t is None:
        missing.append(name)
    op[name] = t and t / scale
    print(f"| {label} | {'not run' if t is None else fmt(t / scale) + ' ' + unit} |")

# The stack through the C library: nested `qsort` calls, every frame
# walked by its DWARF CFI (the comparator's too: Rust's `.eh_frame` comes
# before its frame pointers), beside libunwind and framehop.
levels = sorted({lv for (lv, _) in qsort_frames})
if len(levels) != 1:
    missing.append("qsort (no frame counts, or more than one stack)")
lv = levels[0] if levels else "?"
qran = {who for (_, who) in qsort_frames}
QSORT = [
    ("stackmark, DWARF CFI", "stackmark", "stackmark"),
    ("stackmark, DWARF CFI, cold", "stackmark-cold", "stackmark"),
    ("libunwind `unw_backtrace`", "libunwind", "libunwind"),
    ("framehop (`.eh_frame` of every module)", "framehop", "framehop"),
]
print()
print(f"A stack through the C library: {lv} nested `qsort` calls (a Rust comparator, glibc's `msort_with_tmp` and `__qsort_r` a level), ns per frame (frames walked)")
print()
print(f"| unwinder | qsort, {lv} levels | stackmark's warm walk faster, per frame |")
print("| --- | --- | --- |")
qpf = {}
for label, bench, counted in QSORT:
    t = times.get(f"qsort{lv}/{bench}")
    n = qsort_frames.get((lv, counted))
    if t is None or not n:
        if counted not in OPTIONAL or counted in qran:
            missing.append(f"qsort{lv}/{bench}")
        print(f"| {label} | not run | — |")
        continue
    qpf[bench] = t / n
    ours_q = qpf.get("stackmark")
    faster = f"{qpf[bench] / ours_q:.2f}×" if ours_q and bench in OPTIONAL else "—"
    print(f"| {label} | {fmt(t / n)} ({n}) | {faster} |")

# The 16-deep walk cut short at the borders of its parts: each part's
# cost is the difference between two cuts.
PARTS = {
    "empty": "set-up: the table pinned, the reader and walker built",
    "frame0": "frame 0, and the first probe",
    "through-recursion": "the frames up to the recursion's end",
    "before-start-code": "the harness's frames below the recursion",
    "whole": "glibc's start code and the walk's end",
}
print()
print("The 16-deep SFrame walk by parts (walks cut short by smaller buffers)")
print()
print("| part | frames | ns | ns per frame |")
print("| --- | --- | --- | --- |")
if [name for name, _ in cuts] != list(PARTS):
    missing.append("depth16-parts (frame counts)")
prev_t, prev_n = 0.0, 0
for name, n in cuts:
    t = times.get(f"depth16-parts/{name}")
    if t is None:
        missing.append(f"depth16-parts/{name}")
        continue
    dt, dn = t - prev_t, n - prev_n
    per = f"{fmt(dt / dn)}" if dn > 0 else "—"
    print(f"| {PARTS.get(name, name)} | {dn} | {fmt(dt)} | {per} |")
    prev_t, prev_n = t, n
whole = times.get("depth16-parts/whole")
if whole is not None and cuts:
    print(f"| the whole walk | {cuts[-1][1]} | {fmt(whole)} | {fmt(whole / cuts[-1][1]) if cuts[-1][1] else '—'} |")

print()
print("Goals, on the stacks of distinct functions")
print()
print("| goal | " + " | ".join(f"{d} functions" for d in DEPTHS) + " |")
print("| --- |" + " --- |" * len(DEPTHS))


def verdict(value, goal, at_least, unit):
    if value is None:
        return "not run"
    if met(value, goal, at_least):
        return f"{fmt(value)}{unit}, met"
    # How far off, as a share of the walk's time it would have to lose.
    short = 1 - value / goal if at_least else 1 - goal / value
    return f"{fmt(value)}{unit}, missed by {short:.0%}"


# Judged on the stacks of distinct functions; the recursion's table above
# is for comparison only.
for label, a, b, goal, at_least, unit in SPEED_GOALS:
    cells = []
    for d in DEPTHS:
        x = dpf.get(a + (d,))
        y = dpf.get(b + (d,)) if b else 1
        cells.append(verdict(None if x is None or y is None else x / y, goal, at_least, unit))
    print(f"| {label} | " + " | ".join(cells) + " |")
for label, name, goal in [
    ("full markup report ≤ 20 µs", "markup/report-64-frames-all-modules", 20),
    ("init ≤ 200 µs", "init/refresh", 200),
]:
    print(f"| {label} | {verdict(op[name], goal, False, ' µs')} | | |")
print(f"| a dump of 128 threads ≤ 20 ms | {verdict(op['threads/128'], 20, False, ' ms')} | | |")

if missing:
    print(f"\nbench-goals: no result for: {', '.join(sorted(set(missing)))}", file=sys.stderr)
    sys.exit(1)
PY
}

# The walks the goals are judged on (the stacks of distinct functions) and
# the 16-deep recursion, each unwinder in N fresh processes (short runs): a
# walk's time depends on where the process's code and data land, which
# address-space randomisation changes from one process to the next. Prints
# min, median and max per frame, and each speed goal judged on the medians
# with its range over the processes.
spread() {
  local n=$1 out log i
  out=$(realpath -m "${CARGO_TARGET_DIR:-target}/bench-goals-spread")
  rm -rf "$out"
  mkdir -p "$out"
  export CRITERION_HOME=$out/criterion STACKMARK_BENCH_QUICK=1
  log=$out/bench.log
  local stacks='distinct(-fp)?(16|64|256)'
  for i in $(seq "$n"); do
    cargo bench --bench walk -- \
      "^(depth16/(stackmark/sframe|framehop|glibc)|$stacks/(stackmark/(sframe|sframe-cold|fp)|framehop))\$" \
      >>"$log" 2>&1 || {
      echo "bench-goals: the walk bench failed (its output: $log)" >&2
      exit 1
    }
    if [ "$(uname -m)" = x86_64 ]; then
      cargo bench --bench libunwind -- "^(depth16|$stacks)/libunwind\$" >>"$log" 2>&1 || {
        echo "bench-goals: the libunwind bench failed (its output: $log)" >&2
        exit 1
      }
    fi
    # This process's results, tagged with its number, then none left for
    # the next to be mistaken for.
    results "$CRITERION_HOME" | sed "s/^/$i /" >>"$out/times"
    rm -rf "$CRITERION_HOME"
    printf '.' >&2
  done
  echo >&2
  python3 - "$out/times" "$log" "$n" <<'PY'
import re, statistics, sys

sys.path.insert(0, "scripts")
from speed_goals import DEPTHS, DISTINCT, OPTIONAL, SPEED_GOALS, build, fmt, met

# times[(stack, bench)][process] = ns a walk
times = {}
for line in open(sys.argv[1]):
    proc, name, t = line.split()
    stack, bench = name.split("/", 1)
    times.setdefault((stack, bench), {})[proc] = float(t)
# Frames each walked, as the benches print them ("depth 16: stackmark/sframe
# 27 frames, ...", "distinct-fp 64: libunwind 79 frames").
frames = {}
for line in open(sys.argv[2]):
    m = re.match(r"depth 16: (.*)", line)
    if m:
        for who, k in re.findall(r"([\w/-]+) (\d+) frames", m.group(1)):
            frames[("depth16", who)] = int(k)
    m = re.match(r"(distinct(?:-fp)?) (\d+): ([\w/-]+) (\d+) frames", line)
    if m:
        frames[(m.group(1) + m.group(2), m.group(3))] = int(m.group(4))


def per_frame(stack, bench, counted):
    """ns a frame in each process, by process; {} if not run."""
    k = frames.get((stack, counted))
    return {p: t / k for p, t in times.get((stack, bench), {}).items()} if k else {}


def cell(xs):
    if not xs:
        return "not run"
    return f"{fmt(min(xs))} / {fmt(statistics.median(xs))} / {fmt(max(xs))}"


# pf[(kind, bench, depth)]: each process's ns a frame on that stack.
pf = {}
missing = []
print(f"Each walk in {sys.argv[3]} processes (short runs), ns per frame: min / median / max")
print()
print("| build | unwinder | " + " | ".join(f"{d} functions" for d in DEPTHS) + " |")
print("| --- | --- |" + " --- |" * len(DEPTHS))
for label, kind, bench, counted in DISTINCT:
    cells = []
    for d in DEPTHS:
        pf[(kind, bench, d)] = per_frame(f"{kind}{d}", bench, counted)
        if not pf[(kind, bench, d)] and counted not in OPTIONAL:
            missing.append(f"{kind}{d}/{bench}")
        cells.append(cell(list(pf[(kind, bench, d)].values())))
    print(f"| {build(kind)} | {label} | " + " | ".join(cells) + " |")
print()
print("| the 16-deep recursion | frames | min / median / max |")
print("| --- | --- | --- |")
for who in ("stackmark/sframe", "libunwind", "framehop", "glibc"):
    xs = list(per_frame("depth16", who, who).values())
    if xs:
        print(f"| {who} | {frames[('depth16', who)]} | {cell(xs)} |")
    elif who == "stackmark/sframe":
        missing.append(f"depth16/{who}")


def values(a, b, d):
    """Per process, the per-frame time of `a` (a `(kind, bench)`) on the
    stack of `d` functions, over that of `b` where `b` is given (and ran in
    that process too)."""
    x = pf.get(a + (d,), {})
    y = pf.get(b + (d,), {}) if b else {p: 1 for p in x}
    return [x[p] / y[p] for p in x if p in y]


print()
print("Goals on the medians (the range over the processes in brackets)")
print()
print("| goal | " + " | ".join(f"{d} functions" for d in DEPTHS) + " |")
print("| --- |" + " --- |" * len(DEPTHS))
for label, a, b, goal, at_least, unit in SPEED_GOALS:
    cells = []
    for d in DEPTHS:
        xs = values(a, b, d)
        if not xs:
            cells.append("not run")
            continue
        med = statistics.median(xs)
        verdict = "met" if met(med, goal, at_least) else "missed"
        cells.append(f"{fmt(med)}{unit} ({fmt(min(xs))}–{fmt(max(xs))}), {verdict}")
    print(f"| {label} | " + " | ".join(cells) + " |")
if missing:
    sys.exit(f"bench-goals: no result in the spread's runs for: {', '.join(missing)}")
PY
}

usage() {
  echo "usage: scripts/bench-goals.sh [--quick | --spread N | --report DIR]" >&2
  exit 2
}

case "${1:-}" in
--report)
  [ $# -eq 2 ] || usage
  report "$2"
  exit
  ;;
--spread)
  [ $# -eq 2 ] && [ "$2" -gt 0 ] 2>/dev/null || usage
  spread "$2"
  exit
  ;;
--quick) [ $# -eq 1 ] || usage; export STACKMARK_BENCH_QUICK=1 ;;
"") ;;
*) usage ;;
esac

out=$(realpath -m "${CARGO_TARGET_DIR:-target}/bench-goals")
rm -rf "$out"
mkdir -p "$out"
export CRITERION_HOME=$out/criterion
log=$out/bench.log
{
  echo "bench-goals: commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "bench-goals: machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, Linux $(uname -r)"
  echo "bench-goals: load: $(cut -d' ' -f1-3 /proc/loadavg) before the run"
} >"$log"
# Progress as it comes: the frame counts and criterion's time lines.
bench() {
  cargo bench --bench "$1" 2>&1 | tee -a "$log" | { grep -E '^(depth|distinct|qsort|init|markup|sframe-lookup|threads)|time:' || true; } || {
    echo "bench-goals: the $1 bench failed (its output: $log)" >&2
    exit 1
  }
}
# Instructions per frame on the distinct stacks (callgrind counts the
# walks alone: `benches/instructions.rs`), one process per stack.
instructions() {
  command -v valgrind >/dev/null || {
    echo "bench-goals: valgrind is missing (scripts/test.sh installs it)" >&2
    exit 1
  }
  local exe kind depth warmth frames ir walks=20
  exe=$(cargo bench --bench instructions --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "instructions" and m.get("executable"):
        print(m["executable"])' | tail -1)
  [ -x "$exe" ] || {
    echo "bench-goals: the instructions bench did not build" >&2
    exit 1
  }
  for kind in sframe fp; do
    for depth in 16 64 256; do
      for warmth in warm cold; do
        [ "$kind" = sframe ] || [ "$warmth" = warm ] || continue
        frames=$(valgrind --tool=callgrind --toggle-collect=counted_walks \
          --callgrind-out-file="$out/callgrind.out" "$exe" "$kind" "$depth" "$warmth" "$walks" \
          2>"$out/callgrind.err" | sed -n 's/^frames //p')
        ir=$(sed -n 's/.*Collected : //p' "$out/callgrind.err")
        echo "callgrind $kind $depth $warmth: ${ir:-?} instructions, $walks walks, ${frames:-?} frames" | tee -a "$log"
      done
    done
  done
}

bench walk
[ "$(uname -m)" != x86_64 ] || bench libunwind
bench threads
instructions
echo
report "$out"
