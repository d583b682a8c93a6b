#!/usr/bin/env bash
# CPU cost of the full-screen `stallscope top` (issue 14: "<= 0.5% of a core at 1 Hz with 8 fake
# GPUs"): the real binary in a detached tmux session (private socket, 120x50) over the fake NVML's
# 8 GPUs (tests/data/nvml/eight_gpus.json), refreshing at 1 Hz. After WARM_S seconds (startup,
# NVML probing and the first paint excluded) it reads utime+stime of the process from
# /proc/PID/stat, again MEASURE_S seconds later, and prints the share of one core and PASS/MISS
# against 0.5%; exit 1 on a MISS. Usage: bench/top_tui_cpu.sh [BUILD_DIR] [MEASURE_S] [WARM_S]
set -euo pipefail
BUILD=${1:-build}
MEASURE_S=${2:-30}
WARM_S=${3:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$BUILD" && pwd)
BIN=$BUILD/stallscope
FAKE=$BUILD/tests/fakes/nvml/libnvidia-ml.so.1
command -v tmux >/dev/null || { echo "tmux is not installed" >&2; exit 1; }
[ -x "$BIN" ] && [ -f "$FAKE" ] || { echo "build first: ninja -C $BUILD stallscope fake_nvml" >&2; exit 1; }
SOCK=stallscope-bench-$$
trap 'tmux -L "$SOCK" kill-server 2>/dev/null || true' EXIT
# exec all the way down: the pane's pid is top's (the front binary execs stallscope-full).
tmux -L "$SOCK" -f /dev/null new-session -d -x 120 -y 50 \
  "exec env LANG=C.UTF-8 STALLSCOPE_FAKE_NVML_SCENARIO=$ROOT/tests/data/nvml/eight_gpus.json $BIN top -i 1s --nvml-lib $FAKE"
PID=$(tmux -L "$SOCK" display-message -p '#{pane_pid}')
TICK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }  # proc(5): utime, stime
sleep "$WARM_S"
grep -q . <(tmux -L "$SOCK" capture-pane -p | grep ' 7 ') || { echo "top did not show 8 GPUs:" >&2; tmux -L "$SOCK" capture-pane -p >&2; exit 1; }
T0=$(date +%s.%N); C0=$(cpu_ticks)
sleep "$MEASURE_S"
T1=$(date +%s.%N); C1=$(cpu_ticks)
awk -v c0="$C0" -v c1="$C1" -v t0="$T0" -v t1="$T1" -v hz="$TICK" -v comm="$(cat /proc/$PID/comm)" -v pid="$PID" 'BEGIN {
  cpu = (c1 - c0) / hz; wall = t1 - t0; pct = cpu / wall * 100
  printf "top (%s, pid %s), 8 fake GPUs, 1 Hz: %.2f s CPU over %.1f s = %.3f%% of a core (target <= 0.5%%): %s\n",
         comm, pid, cpu, wall, pct, pct <= 0.5 ? "PASS" : "MISS"
  exit pct <= 0.5 ? 0 : 1 }'
