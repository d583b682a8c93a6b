#!/usr/bin/env bash
# Cost of a recording `with stallscope.phase("x"):` (enter + exit) and of the other markers, per
# local interpreter and recorder backend: python/bench_marker.py under Debian's python3 and every
# pyenv CPython >= 3.8, as one Markdown table (README "Marker cost"). Budgets (issue 9): <= 1 us
# on the backend the package picks, <= 3 us on any other; exit status 1 when one is exceeded.
# Usage: bench/marker_matrix.sh [BUILD_DIR]
set -uo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
pythons=(/usr/bin/python3)
while read -r p; do
  [ -x "$p" ] && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null && pythons+=("$p")
done < <(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python3 2>/dev/null | sort -V)
echo "| Python | backend | with phase('x') ns | with (cached object) ns | step() ns | count() ns |"
echo "|---|---|---|---|---|---|"
status=0
for p in "${pythons[@]}"; do
  PYTHONPATH="$BUILD/python" "$p" python/bench_marker.py --markdown || status=1
done
exit $status
