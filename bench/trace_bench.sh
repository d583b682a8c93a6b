#!/usr/bin/env bash
# Throughput and memory of `stallscope trace` on big synthetic multi-rank Kineto traces, on the
# same traces gzip-compressed (against plain `zcat`), and against HTA on a real trace.
# See `bench/trace_bench.sh --help`. Targets (trace analysis brief; issue 16 "Speed"):
#   plain: >= 500 MB/s per core end to end (e.g. --ranks 1 --total-mb 250: one 250 MB rank)
#   .gz: stallscope's decompress+analyse speed >= 0.70 x zcat's decompression speed
#   trace_diff/control/control.json.gz: >= 200x faster than HTA (11.2 s, EXPECTED.md), i.e.
#   <= 56 ms, and peak RSS <= 35 MB (HTA: 231 MB)
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/trace_bench.sh [options]

Generates (or reuses) an N-rank synthetic Kineto trace set with bench/gen_trace.py, then times
`$STALLSCOPE trace DIR --json > /dev/null` under /usr/bin/time and prints, per run:
total MB (raw JSON), wall s, MB/s, MB/s per core (divided by min(ranks, nproc)), peak RSS MB and
peak RSS / input size. Every line with a target ends in PASS or MISS.

  (a) plain:  DIR/plain/rank-{r}.json; target >= 500 MB/s per core (issue 16)
  (b) gzip:   DIR/gz/rank-{r}.json.gz, compared with `zcat` of the same files (run with the same
              parallelism: min(ranks, nproc) zcat processes); target ratio >= 0.70
  (c) HTA:    trace_diff/control/control.json.gz from the shared HTA traces; speed-up over HTA's
              published 11.2 s (target >= 200x: <= 56 ms, issue 16) and peak RSS (target
              <= 35 MB; HTA: 231 MB)

Options:
  --dir DIR        where generated traces live (default: ${TMPDIR:-/tmp}/stallscope-trace-bench);
                   a set is reused when its parameters and gen_trace.py are unchanged
  --total-mb N     total raw JSON size over all ranks (default 2000)
  --ranks N        ranks / files (default 8)
  --repeat N       timed runs per case, best wall time is reported (default 3)
  --gzip-level N   gzip level used to generate the .gz set (default 6, like gzip(1))
  --only LIST      comma-separated subset of plain,gz,hta (default: all)
  -h, --help       this text

Environment:
  STALLSCOPE             the binary (default: build/stallscope)
  STALLSCOPE_SHARED_DIR  the shared folder holding traces/hta (default: <repo>/../shared)
  PYTHON                 python3 for the generator (default: python3)

Exit status: 0 all targets PASS, 1 some MISS, 2 usage or run error.
EOF
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STALLSCOPE=${STALLSCOPE:-$ROOT/build/stallscope}
PYTHON=${PYTHON:-python3}
SHARED=${STALLSCOPE_SHARED_DIR:-$ROOT/../shared}
DIR=${TMPDIR:-/tmp}/stallscope-trace-bench
TOTAL_MB=2000
RANKS=8
REPEAT=3
GZ_LEVEL=6
ONLY=plain,gz,hta
HTA_S=11.2 # EXPECTED.md: HTA end-to-end on trace_diff/control, 2-core machine
HTA_RSS_MB=231

while [ $# -gt 0 ]; do
  case $1 in
  --dir) DIR=$2; shift 2 ;;
  --total-mb) TOTAL_MB=$2; shift 2 ;;
  --ranks) RANKS=$2; shift 2 ;;
  --repeat) REPEAT=$2; shift 2 ;;
  --gzip-level) GZ_LEVEL=$2; shift 2 ;;
  --only) ONLY=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $TOTAL_MB =~ ^[0-9]+$ && $RANKS =~ ^[1-9][0-9]*$ && $REPEAT =~ ^[1-9][0-9]*$ ]] ||
  { echo "--total-mb, --ranks and --repeat take positive integers" >&2; exit 2; }
[ -x "$STALLSCOPE" ] ||
  { echo "no stallscope binary at $STALLSCOPE (build it or set STALLSCOPE)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }
want() { [[ ",$ONLY," == *",$1,"* ]]; }

NPROC=$(nproc)
CORES=$((RANKS < NPROC ? RANKS : NPROC))
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MISSES=0

# check NAME VALUE UNIT OP TARGET: one target line ending in PASS or MISS (OP is >= or <=).
check() {
  local v=PASS
  if ! awk -v v="$2" -v t="$5" -v op="$4" 'BEGIN { exit !((op == ">=") ? v >= t : v <= t) }'; then
    v=MISS
    MISSES=$((MISSES + 1))
  fi
  printf '%-44s %9s %-3s  target %s %s %-3s  %s\n' "$1" "$2" "$3" "$4" "$5" "$3" "$v"
}

# gen SUBDIR [--gzip]: make (or reuse) DIR/SUBDIR with RANKS files totalling TOTAL_MB raw JSON.
gen() {
  local out=$DIR/$1 stamp
  shift
  stamp="ranks=$RANKS total_mb=$TOTAL_MB level=$GZ_LEVEL args=$*"
  stamp+=" gen=$(cksum <"$ROOT/bench/gen_trace.py")"
  if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
    echo "reusing $out"
    return
  fi
  rm -rf "$out"
  mkdir -p "$out"
  echo "generating $out ($RANKS ranks, $TOTAL_MB MB raw JSON) ..."
  local per_rank
  per_rank=$(awk -v t="$TOTAL_MB" -v r="$RANKS" 'BEGIN { printf "%.3f", t / r }')
  /usr/bin/time -f '%e' -o "$TMP/gentime" "$PYTHON" "$ROOT/bench/gen_trace.py" --ranks "$RANKS" \
    --size-mb "$per_rank" --gzip-level "$GZ_LEVEL" --out "$out" --quiet "$@"
  echo "generated in $(cat "$TMP/gentime") s"
  echo "$stamp" >"$out/.stamp"
}

# sizes DIR: RAW = total decompressed bytes of the rank files in DIR, BIG = the largest one's.
sizes() {
  local f n
  RAW=0 BIG=0
  for f in "$1"/*.json "$1"/*.json.gz; do
    [ -e "$f" ] || continue
    case $f in
    *.gz) n=$(gzip -dc "$f" | wc -c) ;; # gzip -l wraps at 4 GiB, so count
    *) n=$(stat -c %s "$f") ;;
    esac
    RAW=$((RAW + n))
    BIG=$((n > BIG ? n : BIG))
  done
}

# timed LABEL CMD...: runs CMD (stdout to /dev/null) REPEAT times under /usr/bin/time; sets BEST_S
# (best wall, from bash's microsecond clock: %e has only 10 ms resolution) and BEST_KB (the peak
# RSS, %M, of that run).
timed() {
  local label=$1 i s kb t0 t1
  shift
  BEST_S='' BEST_KB=''
  for ((i = 0; i < REPEAT; i++)); do
    t0=$EPOCHREALTIME
    if ! /usr/bin/time -f '%e %M' -o "$TMP/time" "$@" >/dev/null 2>"$TMP/err"; then
      echo "$label: command failed: $*" >&2
      tail -5 "$TMP/err" >&2
      exit 2
    fi
    t1=$EPOCHREALTIME
    read -r _ kb <"$TMP/time"
    s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    if [ -z "$BEST_S" ] || awk -v a="$s" -v b="$BEST_S" 'BEGIN { exit !(a < b) }'; then
      BEST_S=$s BEST_KB=$kb
    fi
  done
}

# report LABEL RAW_BYTES LARGEST_FILE_BYTES FILES CORES: one line from BEST_S / BEST_KB.
report() {
  awk -v l="$1" -v b="$2" -v big="$3" -v n="$4" -v c="$5" -v s="$BEST_S" -v kb="$BEST_KB" 'BEGIN {
    mb = b / 1e6; s = (s > 0) ? s : 0.001; rss = kb / 1024
    printf "%-6s %d file(s) %9.1f MB  wall %7.3f s  %8.1f MB/s  %7.1f MB/s/core (%d cores)",
      l, n, mb, s, mb / s, mb / s / c, c
    printf "  peak RSS %7.1f MB  RSS/input %.4f  RSS/largest file %.3f\n",
      rss, kb * 1024 / b, kb * 1024 / big }'
}

echo "stallscope: $STALLSCOPE   nproc: $NPROC   ranks: $RANKS   best of $REPEAT"

if want plain; then
  gen plain
  cat "$DIR"/plain/rank-* >/dev/null # warm the page cache: every case is measured warm
  sizes "$DIR/plain"
  timed plain "$STALLSCOPE" trace "$DIR/plain" --json
  report plain "$RAW" "$BIG" "$RANKS" "$CORES"
  PER_CORE=$(awk -v b="$RAW" -v s="$BEST_S" -v c="$CORES" \
    'BEGIN { printf "%.1f", b / 1e6 / ((s > 0) ? s : 0.001) / c }')
  check "plain: end-to-end speed per core" "$PER_CORE" "MB/s" ">=" 500
fi

if want gz; then
  gen gz --gzip
  cat "$DIR"/gz/rank-* >/dev/null
  sizes "$DIR/gz"
  timed gz "$STALLSCOPE" trace "$DIR/gz" --json
  report gz "$RAW" "$BIG" "$RANKS" "$CORES"
  SS_S=$BEST_S
  # Plain decompression, with the same parallelism as the per-core figures.
  printf '%s\0' "$DIR"/gz/rank-*.json.gz >"$TMP/gzlist"
  # shellcheck disable=SC2016 # $0 is expanded by the inner sh
  timed zcat xargs -0 -a "$TMP/gzlist" -n 1 -P "$CORES" sh -c 'zcat "$0" >/dev/null'
  report zcat "$RAW" "$BIG" "$RANKS" "$CORES"
  RATIO=$(awk -v a="$SS_S" -v b="$BEST_S" 'BEGIN { printf "%.2f", (a > 0) ? b / a : 0 }')
  check "gz: stallscope speed / zcat speed" "$RATIO" "x" ">=" 0.70
fi

if want hta; then
  CONTROL=$SHARED/traces/hta/trace_diff/control/control.json.gz
  if [ ! -f "$CONTROL" ]; then
    echo "hta: $CONTROL not found (set STALLSCOPE_SHARED_DIR); skipped"
  else
    mkdir -p "$TMP/hta"
    ln -s "$CONTROL" "$TMP/hta/control.json.gz" # the shared traces are read in place, never copied
    timed hta "$STALLSCOPE" trace "$TMP/hta" --json
    sizes "$TMP/hta"
    report hta "$RAW" "$RAW" 1 1
    SPEEDUP=$(awk -v h="$HTA_S" -v s="$BEST_S" 'BEGIN { printf "%.0f", h / ((s > 0) ? s : 0.001) }')
    RSS_MB=$(awk -v kb="$BEST_KB" 'BEGIN { printf "%.1f", kb / 1024 }')
    check "hta: speed-up vs HTA's $HTA_S s" "$SPEEDUP" "x" ">=" 200
    check "hta: peak RSS (HTA: $HTA_RSS_MB MB)" "$RSS_MB" "MB" "<=" 35
  fi
fi

[ "$MISSES" -eq 0 ] || { echo "$MISSES target(s) missed"; exit 1; }
