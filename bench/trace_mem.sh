#!/usr/bin/env bash
# Peak memory of `stallscope trace`: bytes per event on a big synthetic Kineto trace, and the
# cost of one very long string. See `bench/trace_mem.sh --help`. Targets (issue "trace ~160
# bytes per event at 2 M events"):
#   events: (peak RSS - peak RSS of a tiny trace) / events <= 64 bytes per event, at ~2 M events
#           (events = every element of traceEvents the generator wrote, flows included), -j 1
#   string: one event whose name is 64 MiB, and one whose args string ("Collective name") is:
#           peak RSS <= 2.5 x the file size. Why 2.5x: the reader must hold the element whole
#           while simdjson parses it (1x, in place), and an escaped string is unescaped by simdjson
#           into its own buffer (1x more); everything after that keeps only kMaxStringBytes
#           (64 KiB). 2.5x leaves 0.5x for the process and buffer slack; before the fix it was
#           3-4x (201 MB plain, 267 MB escaped, for a 67 MB file).
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/trace_mem.sh [options]

Generates under $TMPDIR (removed at exit) a synthetic Kineto trace of ~EVENTS events with
bench/gen_trace.py, a tiny one, and 64 MiB-string traces (a plain name, an escaped name, an args
string), runs `$STALLSCOPE trace FILE -j 1 [MODE]` on each under /usr/bin/time and prints peak
RSS, bytes/event and the string traces' peak RSS / file size, each target line ending in PASS or
MISS.

Options:
  --events N      events of the big trace (default 2000000)
  --string-mb N   length of the long string in MiB (default 64)
  --mode ARGS     extra trace arguments, e.g. "--json" or "--export-perfetto" (the export goes to
                  a file under $TMPDIR; default: none, the text report)
  -h, --help      this text

Environment:
  STALLSCOPE  the binary (default: build/stallscope)
  PYTHON      python3 for the generators (default: python3)

Exit status: 0 all targets PASS, 1 some MISS, 2 usage or run error.
EOF
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STALLSCOPE=${STALLSCOPE:-$ROOT/build/stallscope}
PYTHON=${PYTHON:-python3}
EVENTS=2000000
STRING_MB=64
MODE=""

while [ $# -gt 0 ]; do
  case $1 in
  --events) EVENTS=$2; shift 2 ;;
  --string-mb) STRING_MB=$2; shift 2 ;;
  --mode) MODE=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $EVENTS =~ ^[1-9][0-9]*$ && $STRING_MB =~ ^[1-9][0-9]*$ ]] ||
  { echo "--events and --string-mb take positive integers" >&2; exit 2; }
[ -x "$STALLSCOPE" ] ||
  { echo "no stallscope binary at $STALLSCOPE (build it or set STALLSCOPE)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-trace-mem.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
MISSES=0

# check NAME VALUE UNIT TARGET: one "<=" target line ending in PASS or MISS.
check() {
  local v=PASS
  if ! awk -v v="$2" -v t="$4" 'BEGIN { exit !(v <= t) }'; then
    v=MISS
    MISSES=$((MISSES + 1))
  fi
  printf '%-40s %9s %-7s target <= %s %-7s %s\n' "$1" "$2" "$3" "$4" "$3" "$v"
}

# peak FILE: sets KB to the peak RSS of `stallscope trace FILE -j 1 MODE`.
peak() {
  local args=()
  if [ "$MODE" = "--export-perfetto" ]; then
    args=(--export-perfetto "$TMP/export.json" --force)
  elif [ -n "$MODE" ]; then
    read -r -a args <<<"$MODE"
  fi
  if ! /usr/bin/time -f '%M' -o "$TMP/time" "$STALLSCOPE" trace "$1" -j 1 "${args[@]}" \
    >/dev/null 2>"$TMP/err"; then
    echo "stallscope trace $1 failed:" >&2
    tail -5 "$TMP/err" >&2
    exit 2
  fi
  KB=$(tail -1 "$TMP/time")
  rm -f "$TMP/export.json"
}

# long_string FILE KIND: a trace with a ProfilerStep and one event carrying a STRING_MB MiB
# string: KIND name (plain), escaped (a name starting with \n: simdjson unescapes it) or arg.
long_string() {
  "$PYTHON" - "$1" "$2" "$STRING_MB" <<'EOF'
import sys
path, kind, mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = mb << 20
step = '{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":1000,"dur":100}'
with open(path, "w") as f:
    f.write('{"traceEvents":[\n' + step + ",\n")
    if kind == "arg":
        f.write('{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":7,'
                '"ts":1010,"dur":10,"args":{"stream":7,"device":0,"correlation":5,'
                '"Collective name":"' + "b" * n + '"}}\n')
    else:
        name = ("\\n" + "a" * (n - 2)) if kind == "escaped" else "a" * n
        f.write('{"ph":"X","cat":"cpu_op","name":"' + name + '","pid":1,"tid":1,"ts":1010,'
                '"dur":10}\n')
    f.write("]}\n")
EOF
}

echo "stallscope: $STALLSCOPE   mode: ${MODE:-text}   -j 1"

"$PYTHON" "$ROOT/bench/gen_trace.py" --out "$TMP/tiny" --ranks 1 --layers 0 --steps 1 --quiet
peak "$TMP/tiny/rank-0.json"
BASE_KB=$KB
echo "generating ~$EVENTS events ..."
"$PYTHON" "$ROOT/bench/gen_trace.py" --out "$TMP/big" --ranks 1 --events "$EVENTS" --jobs 1 \
  >"$TMP/gen.log"
N=$(awk '/^total:/ { for (i = 1; i <= NF; i++) if ($(i + 1) ~ /^events,/) print $i }' "$TMP/gen.log")
[[ $N =~ ^[0-9]+$ ]] || { echo "cannot read the event count:" >&2; cat "$TMP/gen.log" >&2; exit 2; }
SIZE=$(stat -c %s "$TMP/big/rank-0.json")
peak "$TMP/big/rank-0.json"
BPE=$(awk -v kb="$KB" -v b="$BASE_KB" -v n="$N" 'BEGIN { printf "%.1f", (kb - b) * 1024 / n }')
printf 'events: %d (%.1f MB JSON)  peak RSS %.1f MB  tiny trace %.1f MB\n' "$N" \
  "$(awk -v s="$SIZE" 'BEGIN { print s / 1e6 }')" "$(awk -v k="$KB" 'BEGIN { print k / 1024 }')" \
  "$(awk -v k="$BASE_KB" 'BEGIN { print k / 1024 }')"
rm -rf "$TMP/big"
check "events: bytes/event" "$BPE" "B/event" 64

for kind in name escaped arg; do
  long_string "$TMP/long.json" "$kind"
  SIZE=$(stat -c %s "$TMP/long.json")
  peak "$TMP/long.json"
  RATIO=$(awk -v kb="$KB" -v s="$SIZE" 'BEGIN { printf "%.2f", kb * 1024 / s }')
  printf '%s MiB string (%s): file %.1f MB  peak RSS %.1f MB\n' "$STRING_MB" "$kind" \
    "$(awk -v s="$SIZE" 'BEGIN { print s / 1e6 }')" "$(awk -v k="$KB" 'BEGIN { print k / 1024 }')"
  check "string ($kind): peak RSS / file size" "$RATIO" "x" 2.5
  rm -f "$TMP/long.json"
done

[ "$MISSES" -eq 0 ] || exit 1
