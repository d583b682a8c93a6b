#!/bin/sh
# run_fuzz.sh HARNESS CORPUS_DIR [libFuzzer flags...]: seeds CORPUS_DIR afresh from the fixtures
# (the harness writes them: STALLSCOPE_FUZZ_SEEDS), then fuzzes on it. Used by the ctest `fuzz`
# tests (30 s each) and `make fuzz` (1,000,000 runs each). Crashes go to CORPUS_DIR/../artifacts.
set -eu
harness=$1 corpus=$2
shift 2
# The harness's scratch files (fuzz_support.h ScratchDir) go beside the corpus: libFuzzer may end
# without running exit handlers, and the next run clears what is left.
TMPDIR=$corpus.tmp
export TMPDIR
rm -rf "$corpus" "$TMPDIR"
mkdir -p "$corpus" "$corpus/../artifacts" "$TMPDIR"
STALLSCOPE_FUZZ_SEEDS=$corpus "$harness"
echo "$(basename "$harness"): $(ls "$corpus" | wc -l) seeds"
# detect_leaks: LeakSanitizer after each input; -timeout: one input may take 10 s (ASan, slow CI).
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
  exec "$harness" -rss_limit_mb=2048 -timeout=10 -max_len=8192 -print_final_stats=1 \
  -artifact_prefix="$corpus/../artifacts/$(basename "$harness")-" "$@" "$corpus"
