#!/usr/bin/env bash
# Whole-process cost of `stallscope record`: CPU time (of one core) and peak RSS.
#
# Default (issue 11): `record -i 100ms --duration DURATION_S` (default 45 s) over 8 fake GPUs
# (tests/fakes/nvml, tests/data/nvml/eight_gpus.json) following a 5-process tree (sh + 4 sleeps),
# plus one 1 s run of the same: the difference between the two is the steady cost per sample,
# without start-up (dlopen, NVML init, the scenario parse). Prints CPU % of a core, µs of CPU per
# sample (whole run and steady), peak RSS; then one full sample in-process from
# build/bench/sample_bench when it was built, and the floor (bench/sample_floor.c: the same
# wake-ups and /proc reads in a bare C loop). Targets end in PASS or MISS; exit 1 on a MISS.
#   --matrix: the older table instead: 1 Hz and 10 Hz x 1, 4, 8 GPUs, a 20-process tree.
# CPU from getrusage(RUSAGE_CHILDREN) (µs resolution), peak RSS from GNU time.
# Usage: bench/overhead.sh [--matrix] [BUILD_DIR] [DURATION_S]
set -euo pipefail
MATRIX=0
if [ "${1:-}" = --matrix ]; then
  MATRIX=1
  shift
fi
BUILD=${1:-build}
DURATION=${2:-$([ $MATRIX = 1 ] && echo 60 || echo 45)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$BUILD/stallscope
FAKE=$BUILD/tests/fakes/nvml/libnvidia-ml.so.1
[ -x "$BIN" ] && [ -f "$FAKE" ] || { echo "build first: make build" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "needs GNU time: apt-get install time" >&2; exit 1; }
TMP=$(mktemp -d)
root=
cleanup() {
  [ -n "$root" ] && kill $(pgrep -P "$root") "$root" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

# Runs `record` once; prints "cpu_s max_rss_kb samples".
measure() {  # $1 scenario, $2 interval, $3 duration (s), $4 root pid
  local out="$TMP/rec.jsonl"
  STALLSCOPE_NVML_LIB=$FAKE STALLSCOPE_FAKE_NVML_SCENARIO=$1 /usr/bin/python3 - "$BIN" "$2" "$3" \
    "$4" "$out" <<'EOF'
import os, resource, subprocess, sys, tempfile
binary, interval, duration, pid, out = sys.argv[1:]
# GNU time (which forks) reports the peak RSS: RUSAGE_CHILDREN's would be this interpreter's, as
# subprocess spawns with vfork. The CPU time is getrusage's (µs; GNU time prints 10 ms), which
# includes GNU time's own ~1 ms.
with tempfile.NamedTemporaryFile("r") as rss:
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, binary, "record", "-i", interval,
                    "--duration", duration + "s", "--pid", pid, "--force", "-o", out],
                   check=True, stderr=subprocess.DEVNULL)
    max_rss_kb = int(rss.read().split()[-1])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(out) as f:
    samples = sum(1 for line in f if line.startswith('{"type":"sample"'))
print(f"{ru.ru_utime + ru.ru_stime:.6f} {max_rss_kb} {samples}")
EOF
}

tree() {  # $1 = processes in the tree: one shell with $1 - 1 sleeping children; sets $root
  sh -c "for i in \$(seq $(($1 - 1))); do sleep 100000 & done; wait" </dev/null >/dev/null 2>&1 &
  root=$!
}

scenario() {  # $1 = number of GPUs; steady-ish sawtooth load, one process each
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

if [ $MATRIX = 1 ]; then
  # Targets (issue 2): 1 Hz, 8 GPUs: <= 0.1% of a core and <= 6 MB RSS; 10 Hz: <= 0.5%.
  tree 20
  printf '%-6s %-5s %10s %12s %10s\n' rate gpus cpu_pct peak_rss_mb samples
  for rate in 1 10; do
    interval=$([ $rate = 1 ] && echo 1s || echo 100ms)
    for n in 1 4 8; do
      read -r cpu rss_kb samples < <(measure "$(scenario $n)" $interval "$DURATION" "$root")
      awk -v c="$cpu" -v k="$rss_kb" -v d="$DURATION" -v r="${rate}Hz" -v n="$n" -v s="$samples" \
        'BEGIN { printf "%-6s %-5s %10.3f %12.1f %10d\n", r, n, c / d * 100, k / 1024, s }'
    done
  done
  exit 0
fi

SCENARIO=$ROOT/tests/data/nvml/eight_gpus.json
tree 5
sleep 0.5  # let the children start
read -r cpu rss_kb samples < <(measure "$SCENARIO" 100ms "$DURATION" "$root")
read -r cpu1 rss1_kb samples1 < <(measure "$SCENARIO" 100ms 1 "$root")
echo "stallscope record -i 100ms --duration ${DURATION}s: 8 fake GPUs, 5-process tree"
awk -v c="$cpu" -v k="$rss_kb" -v d="$DURATION" -v s="$samples" -v c1="$cpu1" -v s1="$samples1" '
  BEGIN {
    steady = (s > s1) ? (c - c1) / (s - s1) * 1e6 : 0
    printf "  samples                %d\n", s
    printf "  cpu                    %.3f%% of a core (%.3f s)\n", c / d * 100, c
    printf "  cpu per sample         %.1f us (whole run); %.1f us steady (minus a 1 s run: %.3f s, %d samples)\n",
      c / s * 1e6, steady, c1, s1
    printf "  peak rss               %.2f MB (%d KiB)\n", k / 1024, k
    miss = 0
    printf "  target: peak rss <= 4 MB: %s\n", (k <= 4096) ? "PASS" : "MISS"; miss += k > 4096
    exit miss > 0
  }' || status=1
if [ -x "$BUILD/bench/sample_floor" ]; then
  # The same wake-ups, the same kept-open /proc files (host, and stat of each tree member) and a
  # 4 KiB write, in C with nothing else: what any sampler pays here. `record` also reads the
  # members' status and io every few seconds, statvfs(/dev/shm) and NVML.
  files=()
  for f in /proc/stat /proc/meminfo /proc/loadavg /proc/pressure/cpu /proc/pressure/io \
    /proc/pressure/memory /proc/diskstats; do
    [ -r "$f" ] && files+=("$f")
  done
  for p in $root $(pgrep -P "$root"); do files+=("/proc/$p/stat"); done
  floor=$("$BUILD/bench/sample_floor" 100 200 "${files[@]}")
  echo "the floor: a C loop waking every 100 ms to pread the same ${#files[@]} /proc files and write a line ($BUILD/bench/sample_floor)"
  awk -v f="$floor" -v c="$cpu" -v c1="$cpu1" -v s="$samples" -v s1="$samples1" 'BEGIN {
    steady = (s > s1) ? (c - c1) / (s - s1) * 1e6 : 0
    printf "  cpu per iteration      %.1f us; record above it: %.1f us per sample\n", f, steady - f }'
fi
if [ -x "$BUILD/bench/sample_bench" ]; then
  echo "one full sample in-process: 8 GPUs + host + 5 processes + JSON line ($BUILD/bench/sample_bench)"
  "$BUILD/bench/sample_bench" --benchmark_filter='BM_FullSample8Gpus/procs:5/' \
    --benchmark_min_time=1 --benchmark_format=csv 2>/dev/null |
    awk -F, '/BM_FullSample8Gpus/ {
      cold = index($1, "sleep:1") > 0
      printf "  %-44s %6.1f us of CPU\n", cold ? "cold caches (one sample per 100 ms)" : "warm caches (back to back)", $4
      if (!cold) { warm = $4 }
    }
    END {
      printf "  target: one sample (warm) <= 150 us of CPU: %s\n", (warm <= 150) ? "PASS" : "MISS"
      exit (warm > 150) }' || status=1
fi
exit ${status:-0}
