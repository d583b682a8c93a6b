#!/usr/bin/env bash
# Throughput cost of `stallscope run` on the compute-bound example: the same job bare and under
# `run` (hooks on, 1 s sampling), alternated PAIRS times; prints steps/s of each and the ratio of
# the medians. Target (issue 3): <= 1% throughput change.
# Usage: bench/run_overhead.sh [BUILD_DIR] [PAIRS] [STEPS]
set -euo pipefail
BUILD=${1:-build}
PAIRS=${2:-5}
STEPS=${3:-150}
PY=/usr/bin/python3
JOB=(examples/train.py --situation compute --steps "$STEPS" --print-every 1000)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rate() { sed -n 's/.*steps\/s=\([0-9.]*\).*/\1/p' "$1" | tail -1; }
bare=() wrapped=()
for ((i = 0; i < PAIRS; i++)); do
  "$PY" "${JOB[@]}" >"$TMP/bare.txt" 2>&1
  bare+=("$(rate "$TMP/bare.txt")")
  "$BUILD/stallscope" run --quiet --out "$TMP/run$i" -- "$PY" "${JOB[@]}" >"$TMP/wrapped.txt" 2>&1
  wrapped+=("$(rate "$TMP/wrapped.txt")")
  echo "pair $((i + 1)): bare ${bare[-1]} steps/s, under run ${wrapped[-1]} steps/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mb=$(median "${bare[@]}")
mw=$(median "${wrapped[@]}")
awk -v b="$mb" -v w="$mw" 'BEGIN { printf "median bare %.3f steps/s, under run %.3f steps/s, ratio %.4f (%+.2f%%)\n", b, w, w / b, (w / b - 1) * 100 }'
