#!/usr/bin/env bash
# Peak memory of `stallscope summary` against recording size: it streams the file, so peak RSS
# must stay flat. Target (summary streaming brief): the large recording (8 fake GPUs, ~136 MB)
# in <= 20 MB peak RSS, and the small one (10x fewer samples) within ~2 MB of it.
#
# Usage: bench/summary_mem.sh [--big-copies N]   (default 700: ~136 MB; the small file is N/10)
# Environment: STALLSCOPE (default build/stallscope), FAKE_NVML (default
# build/tests/fakes/nvml/libnvidia-ml.so.1). Needs GNU time at /usr/bin/time.
# Prints both peak RSS values, their ratio and PASS/MISS; exits 1 on a MISS.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
stallscope=${STALLSCOPE:-$root/build/stallscope}
fake_nvml=${FAKE_NVML:-$root/build/tests/fakes/nvml/libnvidia-ml.so.1}
big_copies=700
if [[ ${1:-} == --big-copies ]]; then big_copies=$2; fi
small_copies=$((big_copies / 10))
limit_kb=$((20 * 1024))

for f in "$stallscope" "$fake_nvml" /usr/bin/time; do
  [[ -e $f ]] || { echo "summary_mem.sh: missing $f (build stallscope and fake_nvml)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-summary-mem.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A real 3 s recording of 8 fake GPUs (30 samples at 100 ms), then its sample lines repeated:
# the header once, lines 2-31 (the samples) N times.
(cd "$work" && STALLSCOPE_FAKE_NVML_SCENARIO="$root/tests/data/nvml/eight_gpus.json" \
  "$stallscope" record -i 100ms --duration 3s --nvml-lib "$fake_nvml" -o "$work/r8.jsonl" \
  --force > /dev/null 2>&1)
make_copies() {  # make_copies N OUT
  local samples
  samples=$(sed -n '2,31p' "$work/r8.jsonl")
  { head -1 "$work/r8.jsonl"; for ((i = 0; i < $1; ++i)); do printf '%s\n' "$samples"; done; } > "$2"
}
make_copies "$small_copies" "$work/small.jsonl"
make_copies "$big_copies" "$work/big.jsonl"

peak_kb() {  # peak_kb FILE: max resident set size of `summary FILE`, in KB
  /usr/bin/time -f "%M" -o "$work/time.txt" "$stallscope" summary "$1" > /dev/null
  tail -1 "$work/time.txt"
}
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

small_bytes=$(stat -c %s "$work/small.jsonl")
big_bytes=$(stat -c %s "$work/big.jsonl")
small_kb=$(peak_kb "$work/small.jsonl")
big_kb=$(peak_kb "$work/big.jsonl")

verdict() { if "$@"; then echo PASS; else echo MISS; fi; }
big_ok=$(verdict test "$big_kb" -le "$limit_kb")
flat_ok=$(verdict test $((big_kb - small_kb)) -le 2048)
printf 'small: %6s MB recording  peak RSS %6.1f MB\n' "$(mb "$small_bytes")" \
  "$(awk -v k="$small_kb" 'BEGIN { print k / 1024 }')"
printf 'big:   %6s MB recording  peak RSS %6.1f MB  (target <= 20 MB: %s)\n' "$(mb "$big_bytes")" \
  "$(awk -v k="$big_kb" 'BEGIN { print k / 1024 }')" "$big_ok"
printf 'ratio big/small peak RSS: %.2f  (file ratio %.1f; within 2 MB: %s)\n' \
  "$(awk -v b="$big_kb" -v s="$small_kb" 'BEGIN { print b / s }')" \
  "$(awk -v b="$big_bytes" -v s="$small_bytes" 'BEGIN { print b / s }')" "$flat_ok"
[[ $big_ok == PASS && $flat_ok == PASS ]]
