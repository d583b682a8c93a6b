#!/usr/bin/env bash
# `record --serve` under HTTP load (issue 15): wrk hammers GET /metrics on loopback for a fixed
# 30 s (wrk -t2 -c16 -d30s) while the monitor samples the fake NVML (sawtooth scenario) every
# 1 s into a recording. Reports requests/s (wrk), whether any sample interval in the recording
# was missed by more than 10% (gaps between consecutive ts_ns > 1.1 s), and the monitor's VmRSS
# at the start of the load and at its end.
# Usage: bench/serve_load.sh [BUILD_DIR]     (needs wrk: apt-get install wrk)
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$BUILD/stallscope
FAKE=$BUILD/tests/fakes/nvml/libnvidia-ml.so.1
[ -x "$BIN" ] && [ -f "$FAKE" ] || { echo "build first: ninja -C $BUILD stallscope fake_nvml" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 1; }
TMP=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ADDR=127.0.0.1:$PORT

STALLSCOPE_NVML_LIB=$FAKE STALLSCOPE_FAKE_NVML_SCENARIO=$ROOT/tests/data/nvml/sawtooth.json \
  "$BIN" record -i 1s --serve "$ADDR" -o "$TMP/rec.jsonl" 2>"$TMP/err" &
pid=$!
for _ in $(seq 100); do
  /usr/bin/python3 -c "import urllib.request; urllib.request.urlopen('http://$ADDR/metrics', timeout=1)" \
    2>/dev/null && break
  sleep 0.1
done
sleep 2  # a few samples in
rss_start=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$pid/status")
wrk -t2 -c16 -d30s "http://$ADDR/metrics" | tee "$TMP/wrk"
rss_end=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$pid/status")
kill -INT "$pid"
wait "$pid" || true
pid=

reqs=$(awk '/^Requests\/sec:/ { print $2 }' "$TMP/wrk")
errors=$(awk '/Non-2xx|Socket errors/ { print }' "$TMP/wrk")
/usr/bin/python3 - "$TMP/rec.jsonl" <<'PY'
import json, sys
ts = []
for line in open(sys.argv[1]):
    rec = json.loads(line)
    if rec.get("type") == "sample" or ("ts_ns" in rec and "gpus" in rec):
        ts.append(rec["ts_ns"])
gaps = [(b - a) / 1e9 for a, b in zip(ts, ts[1:])]
missed = [g for g in gaps if g > 1.1]
print(f"samples: {len(ts)}, interval max {max(gaps):.3f} s, mean {sum(gaps)/len(gaps):.3f} s, "
      f"intervals missed by >10%: {len(missed)}")
PY
echo "requests/s: $reqs ${errors:+($errors)}"
echo "VmRSS: ${rss_start} kB at the start of the load, ${rss_end} kB at its end ($((rss_end - rss_start)) kB)"
