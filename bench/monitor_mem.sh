#!/usr/bin/env bash
# The monitor's memory over a long session (issue: "24 hours of 1 Hz sampling with 8 GPUs: RSS
# flat within 1 MB; `run` with 100k steps: bounded monitor memory"), on the real binary:
#
# 1. `stallscope record -i 50ms` (the CLI's minimum) over 8 fake GPUs (tests/fakes/nvml,
#    tests/data/nvml/eight_gpus.json), following a shell whose two children exit and are
#    replaced every 0.5 s (pids churn), for RECORD_S seconds (default 300: 6,000 samples; 4320
#    gives the 86,400 samples of a day at 1 Hz). VmRSS of the monitor at 20% and at the end.
# 2. `stallscope run` of a Python job with explicit markers (3 phases + step() per step,
#    STEPS steps, default 100,000, ~0.3 ms each) that forks 4 short-lived "workers" (each with its
#    own ring) every 5,000 steps. The job reads its parent's (the monitor's) VmRSS after 20,000
#    steps (the 2 MiB ring has wrapped by then, so its pages are all mapped) and at the end.
#
# Prints VmRSS (and RssAnon) early and late, the growth and PASS/MISS against <= 1 MB (1024 kB);
# exit 1 on a MISS. Usage: bench/monitor_mem.sh [BUILD_DIR] [RECORD_S] [STEPS]
set -euo pipefail
BUILD=${1:-build}
RECORD_S=${2:-300}
STEPS=${3:-100000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$BUILD" && pwd)
BIN=$BUILD/stallscope
FAKE=$BUILD/tests/fakes/nvml/libnvidia-ml.so.1
[ -x "$BIN" ] && [ -f "$FAKE" ] && [ -d "$BUILD/python/stallscope" ] || {
  echo "build first: ninja -C $BUILD stallscope fake_nvml (and the python package)" >&2
  exit 1
}
TMP=$(mktemp -d)
tree_pid=
cleanup() {
  [ -n "$tree_pid" ] && kill "$tree_pid" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
LIMIT_KB=1024
status=0

field_kb() {  # $1 pid, $2 field of /proc/PID/status (VmRSS, RssAnon)
  awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}

verdict() {  # $1 what, $2 early kB, $3 late kB, $4 early anon, $5 late anon
  local growth=$(($3 - $2)) result=PASS
  [ $growth -le $LIMIT_KB ] || { result=MISS; status=1; }
  printf '%-44s VmRSS %6d -> %6d kB (RssAnon %6d -> %6d): growth %5d kB  %s (<= %d kB)\n' \
    "$1" "$2" "$3" "$4" "$5" "$growth" "$result" "$LIMIT_KB"
}

# --- 1. record ---------------------------------------------------------------------------------
sh -c 'while :; do sleep 0.5 & sleep 0.5 & wait; done' </dev/null >/dev/null 2>&1 &
tree_pid=$!
STALLSCOPE_NVML_LIB=$FAKE STALLSCOPE_FAKE_NVML_SCENARIO=$ROOT/tests/data/nvml/eight_gpus.json \
  "$BIN" record -i 50ms --duration "${RECORD_S}s" --pid "$tree_pid" --force \
  -o "$TMP/rec.jsonl" 2>"$TMP/record.err" &
rec=$!
sleep $((RECORD_S / 5))
early=$(field_kb $rec VmRSS) early_anon=$(field_kb $rec RssAnon)
sleep $((RECORD_S - RECORD_S / 5 - 2))
late=$(field_kb $rec VmRSS) late_anon=$(field_kb $rec RssAnon)
wait $rec || { cat "$TMP/record.err" >&2; exit 1; }
samples=$(grep -c '^{"type":"sample"' "$TMP/rec.jsonl")
verdict "record 8 GPUs, $samples samples at 50 ms" "$early" "$late" "$early_anon" "$late_anon"

# --- 2. run ------------------------------------------------------------------------------------
cat >"$TMP/job.py" <<'EOF'
import os, sys, time
import stallscope

steps = int(sys.argv[1])
monitor = os.getppid()  # `stallscope run` started us


def rss(field):
    with open(f"/proc/{monitor}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":"))


early = None
for step in range(1, steps + 1):
    with stallscope.phase("data_loading"):
        pass
    with stallscope.phase("forward_pass"):
        time.sleep(0.0002)
    with stallscope.phase("backward_pass"):
        pass
    stallscope.step()
    if step % 5000 == 0:  # an epoch: DataLoader workers come and go, each with its own ring
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                with stallscope.phase("worker_fetch"):
                    pass
                os._exit(0)
            os.waitpid(pid, 0)
    if step == 20000:
        time.sleep(0.3)  # let the monitor drain (every 100 ms)
        early = (rss("VmRSS"), rss("RssAnon"))
time.sleep(0.3)
late = (rss("VmRSS"), rss("RssAnon"))
print(f"MEM {early[0]} {late[0]} {early[1]} {late[1]}", flush=True)
EOF
start=$(date +%s)
PYTHONPATH=$BUILD/python STALLSCOPE_NVML_LIB=$FAKE \
  STALLSCOPE_FAKE_NVML_SCENARIO=$ROOT/tests/data/nvml/eight_gpus.json \
  "$BIN" run --quiet --no-auto --out "$TMP/run" -- /usr/bin/python3 "$TMP/job.py" "$STEPS" \
  >"$TMP/run.out" 2>"$TMP/run.err" || { cat "$TMP/run.err" >&2; exit 1; }
read -r _ early late early_anon late_anon < <(grep '^MEM ' "$TMP/run.out")
verdict "run, $STEPS steps in $(($(date +%s) - start)) s" "$early" "$late" "$early_anon" "$late_anon"
exit $status
