#!/usr/bin/env bash
# The verdict, then the fix it recommends, measured: runs the data-bound example under
# `stallscope run`, applies the first recommendation (num_workers=N, persistent_workers=True),
# runs again, and prints the measured speed-up beside the predicted one.
# Usage: examples/demo_fix.sh [BUILD_DIR] [STEPS]
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-60}
PY=/usr/bin/python3
OUT=$BUILD/demo-fix
rm -rf "$OUT"
JOB=("$PY" examples/train.py --situation data_cpu --steps "$STEPS" --print-every 1000)

"$BUILD/stallscope" run --quiet --out "$OUT/before" -- "${JOB[@]}" >/dev/null
sed -n '1,/^$/p' "$OUT/before/report.txt"

# The first recommendation of the principal finding, as numbers.
read -r workers predicted before <<<"$("$PY" - "$OUT/before/report.json" <<'PYEOF'
import json, re, sys
r = json.load(open(sys.argv[1]))
p = r["verdict"]["principal"] or {}
recs = " ".join(x["text"] for x in p.get("recommendations", []))
m = re.search(r"num_workers=\d+ → num_workers=(\d+)", recs)
# The steady state's rate (report.json steps: start-up and warm-up apart), as the prediction's.
rate = r["steps"]["ranks"][0]["per_second"] if r["steps"]["ranks"] else 1.0
print(m.group(1) if m else 0, p.get("predicted_steps_per_s") or 0, rate)
PYEOF
)"
if [ "$workers" = 0 ]; then
  echo "the verdict recommends no worker change; nothing to re-run"
  exit 0
fi
echo "applying the fix: --num-workers $workers --persistent-workers"
"$BUILD/stallscope" run --quiet --out "$OUT/after" -- "${JOB[@]}" --num-workers "$workers" --persistent-workers >/dev/null
# The steady state's rate, like the prediction (worker start-up and warm-up are apart).
after=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"]["ranks"][0]["per_second"])' "$OUT/after/report.json")
awk -v b="$before" -v a="$after" -v p="$predicted" 'BEGIN {
  printf "steady step rate before %.2f steps/s | after %.2f steps/s: measured speed-up %.2fx, predicted %.2fx (%.2f steps/s)\n",
         b, a, a / b, p / b, p
  # The accuracy target (was an e2e test; a timing target belongs here: issue 12).
  r = a / p
  printf "measured / predicted %.2f; target within 50%%: %s\n", r, (r >= 0.5 && r <= 1.5) ? "PASS" : "MISS" }'
sed -n '1,/^$/p' "$OUT/after/report.txt"
