#!/usr/bin/env bash
# Whole-process cost of `stallscope record`: CPU% of one core and peak RSS, over DURATION seconds
# (default 60) at 1 Hz and 10 Hz with 1, 4 and 8 fake GPUs (tests/fakes/nvml, steady 90% util),
# following a 20-process tree (sh + 19 sleeps) so the process sampler is exercised too.
# Usage: bench/overhead.sh [BUILD_DIR] [DURATION_S]
# Targets (issue 2): 1 Hz, 8 GPUs: <= 0.1% of a core and <= 6 MB RSS; 10 Hz: <= 0.5%.
set -euo pipefail
BUILD=${1:-build}
DURATION=${2:-60}
BIN=$BUILD/stallscope
FAKE=$BUILD/tests/fakes/nvml/libnvidia-ml.so.1
[ -x "$BIN" ] && [ -f "$FAKE" ] || { echo "build first: make build" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "needs GNU time: apt-get install time" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

scenario() {  # $1 = number of GPUs
  local n=$1 f="$TMP/gpus$1.json"
  {
    echo '{"driver_version":"550.54.15","gpus":['
    for ((i = 0; i < n; i++)); do
      [ $i -gt 0 ] && echo ','
      echo "{\"name\":\"NVIDIA H100 80GB HBM3\",\"uuid\":\"GPU-$i\",\"memory_total_mib\":81559,"
      echo "\"memory_used_mib\":20000,\"power_limit_w\":700,\"pattern\":{\"kind\":\"sawtooth\","
      echo "\"util_high\":100,\"util_low\":0,\"period_s\":2.0,\"duty\":0.5},"
      echo "\"processes\":[{\"pid\":$((1000 + i)),\"used_memory_mib\":19000}]}"
    done
    echo ']}'
  } >"$f"
  echo "$f"
}

# A 20-process tree to follow: one shell with 19 sleeping children.
sh -c 'for i in $(seq 19); do sleep 100000 & done; wait' &
TREE=$!

printf '%-6s %-5s %10s %12s %10s\n' rate gpus cpu_pct peak_rss_mb samples
for rate in 1 10; do
  interval=$([ $rate = 1 ] && echo 1s || echo 100ms)
  for n in 1 4 8; do
    sc=$(scenario $n)
    out="$TMP/rec.jsonl"
    STALLSCOPE_NVML_LIB=$FAKE STALLSCOPE_FAKE_NVML_SCENARIO=$sc \
      /usr/bin/time -f '%U %S %M' -o "$TMP/time" \
      "$BIN" record -i $interval --duration ${DURATION}s --pid $TREE -o "$out" 2>/dev/null
    read -r user sys rss_kb <"$TMP/time"
    samples=$(($(wc -l <"$out") - 2))
    cpu=$(awk -v u="$user" -v s="$sys" -v d="$DURATION" 'BEGIN { printf "%.3f", (u + s) / d * 100 }')
    rss=$(awk -v k="$rss_kb" 'BEGIN { printf "%.1f", k / 1024 }')
    printf '%-6s %-5s %10s %12s %10s\n' "${rate}Hz" "$n" "$cpu" "$rss" "$samples"
  done
done
