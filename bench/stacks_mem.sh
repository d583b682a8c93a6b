#!/usr/bin/env bash
# Memory and time of `diagnose` against the size of stacks.jsonl (issue 40 "decide and
# document"): a recorded run (tests/data/runs/logging) whose stacks.jsonl gets FRAMES more
# distinct frame lines (each used by one stack and one sample), so the reader holds them all up
# to its bound (stacks::StackLog::kMaxFrames) and skips the rest with a warning.
#   bench/stacks_mem.sh [BUILD_DIR] [FRAMES...]     default: 1000000 10000000
# Prints per size: file size, peak RSS (/usr/bin/time -v), wall time, the reader's warning.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
shift || true
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(1000000 10000000)
BIN=$(realpath "$BUILD/stallscope")
[[ -x "$BIN" ]] || { echo "$BIN: not built (make build)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-stacks-mem.XXXXXX")
trap 'rm -rf "$work"' EXIT
for n in "${SIZES[@]}"; do
  rm -rf "$work/run"
  cp -r "$root/tests/data/runs/logging" "$work/run"
  # Ids past the recorded file's own (frame, stack) ids; samples at the run's start time.
  /usr/bin/python3 - "$work/run/stacks.jsonl" "$n" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
lines = open(path).read().splitlines()
frames = stacks = 0
t = None
for l in lines:
    j = json.loads(l)
    if isinstance(j, dict) and "frame" in j: frames = max(frames, j["frame"] + 1)
    if isinstance(j, dict) and "stack" in j: stacks = max(stacks, j["stack"] + 1)
    if isinstance(j, list) and t is None: t, pid = j[0], j[1]
end = lines.pop() if '"end"' in lines[-1] else None
with open(path, "w") as out:
    out.write("\n".join(lines) + "\n")
    for i in range(n):
        out.write('{"frame":%d,"file":"/home/u/proj/gen_%d.py","function":"f%d","line":%d,"text":"x = %d"}\n'
                  % (frames + i, i % 1000, i, i % 5000 + 1, i))
        out.write('{"stack":%d,"frames":[%d]}\n' % (stacks + i, frames + i))
        out.write('[%d,%d,%d,%d]\n' % (t, pid, pid, stacks + i))
    if end: out.write(end + "\n")
PY
  size=$(du -m "$work/run/stacks.jsonl" | cut -f1)
  /usr/bin/time -v -o "$work/time.txt" "$BIN" diagnose "$work/run" >"$work/out.txt" 2>&1 || true
  kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.txt")
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
  printf '%9d extra frames  stacks.jsonl %5d MB  peak RSS %7.1f MB  wall %s\n' "$n" "$size" \
    "$(echo "$kb / 1024" | bc -l)" "$wall"
  grep -a "stacks.jsonl" "$work/out.txt" | sed "s/^/    /" | head -3 || true
done
