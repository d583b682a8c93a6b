#!/bin/bash
# tools/ci_time.sh [DIR]: CI's `make test` on a clean clone of HEAD in DIR (default /tmp/ci),
# beside `stress-ng --cpu 1` (a busy machine, as issue 29 asks), each step timed:
#   format-check, test-release, test-dist, test-asan  ->  DIR.times (seconds per step, total)
# and each step's log in DIR.<step>.log. Every step runs, as in `make test`, even after one fails;
# the exit status is 1 when one failed. web/node_modules is copied from this checkout when it has
# one (else `make deps` runs `npm ci`).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/ci}
rm -rf "$dir" "$dir.times" "$dir".*.log
git clone -q "$here" "$dir" || exit 1
[ -d "$here/web/node_modules" ] && cp -r "$here/web/node_modules" "$dir/web/"
command -v stress-ng >/dev/null || { echo "ci_time.sh: no stress-ng (apt-get install stress-ng)"; exit 1; }
stress-ng --cpu 1 --timeout 3600 >/dev/null 2>&1 &
stress=$!
trap 'kill $stress 2>/dev/null' EXIT
cd "$dir" || exit 1
echo "commit $(git rev-parse --short HEAD)" >>"$dir.times"
start=$(date +%s)
rc=0
for step in format-check test-release test-dist test-asan; do
  s=$(date +%s)
  make "$step" >"$dir.$step.log" 2>&1
  step_rc=$?
  echo "$step rc=$step_rc $(($(date +%s) - s)) s" >>"$dir.times"
  [ "$step_rc" -ne 0 ] && rc=1
done
echo "total $(($(date +%s) - start)) s" >>"$dir.times"
cat "$dir.times"
exit "$rc"
