#!/usr/bin/env bash
# What `run --stacks` costs (issue 31: <= 0.5% of a core per sampled process at 50 Hz): a job
# whose main thread spins in pure Python 31 frames deep for DURATION_S (default 20) under
# `stallscope run --stacks HZ` (default 50), REPEAT times (default 3). Prints, per run, the
# sampling thread's own CPU time (the end line of stacks.jsonl), samples, µs per sample,
# process_vm_readv calls per sample and the share of one core over the run's wall time.
#   bench/stacks_cost.sh [BUILD_DIR] [DURATION_S] [HZ] [REPEAT]     PYTHON=/usr/bin/python3
# THREADS=N starts N more Python threads in the job, each blocked 10 frames deep (a logging or
# pin-memory thread); STACKS_THREADS=all runs `run --stacks-threads all` (issue 40).
set -euo pipefail
BUILD=${1:-build}
DURATION=${2:-20}
HZ=${3:-50}
REPEAT=${4:-3}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-0}
STACKS_THREADS=${STACKS_THREADS:-main}
BIN=$BUILD/stallscope
[[ -x "$BIN" ]] || { echo "$BIN: not built (make build)" >&2; exit 1; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-stacks-cost-XXXXXX")
trap 'rm -rf "$DIR"' EXIT
cat >"$DIR/job.py" <<PY
import threading, time, stallscope
def waits(n):
    if n == 0:
        threading.Event().wait()
    return waits(n - 1)
for _ in range($THREADS):
    threading.Thread(target=waits, args=(10,), daemon=True).start()
def deep(n):
    if n == 0:
        x = 0
        for i in range(200000):
            x += i
        return x
    return deep(n - 1)
t0 = time.monotonic()
while time.monotonic() - t0 < $DURATION:
    with stallscope.phase("data_loading"):
        deep(30)
    stallscope.step()
PY
for i in $(seq "$REPEAT"); do
  "$BIN" run --quiet --stacks "$HZ" --stacks-threads "$STACKS_THREADS" --out "$DIR/run$i" -- "$PYTHON" "$DIR/job.py" >/dev/null 2>&1
  "$PYTHON" - "$DIR/run$i" <<'PY'
import json, sys
d = sys.argv[1]
end = json.loads(open(d + "/stacks.jsonl").read().splitlines()[-1])
meta = json.load(open(d + "/run.json"))
wall = (meta["end_mono_ns"] - meta["start_mono_ns"]) / 1e9
n = max(end["samples"], 1)
print("cpu %.1f ms  samples %d  %.1f us/sample  %.1f reads/sample  %.3f%% of a core over %.1f s"
      % (end["cpu_s"] * 1e3, end["samples"], end["cpu_s"] * 1e6 / n, end["reads"] / n,
         100 * end["cpu_s"] / wall, wall))
PY
done
