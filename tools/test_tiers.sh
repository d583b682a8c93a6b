#!/usr/bin/env bash
# tools/test_tiers.sh LOG_DIR TIER...: what `make test` runs (Makefile TEST_TIERS). Every tier
# runs (`make TIER`, its output on the terminal and in LOG_DIR/TIER.log), whether or not an
# earlier one failed; then one summary of them all: per tier ok or FAILED, how many tests ran,
# each failed test by name (ctest's "The following tests FAILED" list), or, when no test list
# came, the first error line of its log (a compile error, clang-format's complaint). Exit status
# 0 when every tier passed, 1 when one failed, 2 on a usage error.
#
#   tools/test_tiers.sh build/test-logs format-check test-release test-dist test-asan
#
# $MAKE names the make to run (the Makefile passes its own, with its command-line variables
# such as BUILD=... in MAKEFLAGS); default `make`.
set -u
if [ $# -lt 2 ]; then
  echo "usage: tools/test_tiers.sh LOG_DIR TIER..." >&2
  exit 2
fi
logs=$1
shift
make=${MAKE:-make}
mkdir -p "$logs" || exit 2

# ctest's list of failed tests in LOG ("\t 12 - Suite.Name (Failed)" under "The following tests
# FAILED:"), one "Suite.Name (Failed)" a line.
failed_tests() {
  awk '/^The following tests FAILED:/ { on = 1; next }
       on && /^[ \t]+[0-9]+ - / { sub(/^[ \t]+[0-9]+ - /, ""); print; next }
       on { on = 0 }' "$1"
}

# The tests ctest ran in LOG, summed over its runs ("... tests failed out of 812").
tests_run() {
  awk '/tests failed out of [0-9]+/ { n += $NF } END { print n + 0 }' "$1"
}

# The first line of LOG that says what broke, when ctest gave no list: ninja's "FAILED: ",
# a compiler's or clang-format's "error:", make's "***".
first_error() {
  grep -m1 -E '^FAILED: |: error: |\*\*\* ' "$1" | cut -c1-160
}

results=()
failures=0
for tier in "$@"; do
  log=$logs/$tier.log
  start=$(date +%s)
  echo "==== make $tier (log: $log)"
  $make "$tier" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  seconds=$(($(date +%s) - start))
  ran=$(tests_run "$log")
  what="${seconds} s"
  [ "$ran" -gt 0 ] && what="$what, $ran tests"
  if [ "$rc" -eq 0 ]; then
    results+=("$(printf '  %-14s ok      %s' "$tier" "$what")")
    continue
  fi
  failures=$((failures + 1))
  results+=("$(printf '  %-14s FAILED  %s (exit %d; log: %s)' "$tier" "$what" "$rc" "$log")")
  list=$(failed_tests "$log")
  if [ -n "$list" ]; then
    while IFS= read -r test; do results+=("                  $test"); done <<<"$list"
  else
    results+=("                  $(first_error "$log")")
  fi
done

echo
tiers="$# tiers"
[ $# -eq 1 ] && tiers="1 tier"
echo "==== make test: $tiers, $failures failed"
printf '%s\n' "${results[@]}"
if [ "$failures" -gt 0 ]; then
  echo "Rerun one failed test: cd <build> && ctest -R '^NAME\$' --output-on-failure (docs/tests.md)"
  exit 1
fi
exit 0
