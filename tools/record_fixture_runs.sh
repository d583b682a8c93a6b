#!/usr/bin/env bash
# Records the run directories of tests/data/runs: one per examples/train.py situation, and the
# variants that tests/e2e/recorded_run_test.cc holds to what the live jobs it replaced asserted
# (same flags as those jobs had). Each is a few seconds of `stallscope run` on Debian's torch
# (/usr/bin/python3, CPU), made from the repository root so that the recorded command lines read
# examples/train.py, on a host as quiet as you can make it (a busy host is recorded as such).
#
#   tools/record_fixture_runs.sh BUILD [NAME...]      (default: every NAME listed by --list)
#   tools/record_fixture_runs.sh --list
#   tools/record_fixture_runs.sh --repeat N BUILD [NAME...]   (default: every situation, into
#     tests/data/repeat/NAME.N: the same job again, for the one-job-one-class test)
#
# Kept: what `stallscope diagnose` reads (run.json, recording.jsonl, events.bin,
# events.names.jsonl, phases/*.meta.jsonl, python.jsonl). Dropped: what it derives (report.*)
# and the rings (events.bin holds their records). Then rewrite the goldens and review the diff:
#   (cd BUILD && STALLSCOPE_UPDATE_GOLDEN=1 ctest -L golden) && git diff tests/data/golden
# and run `ctest -L golden` again: the recorded_run_test assertions must hold for the new runs.
# data_cpu and gpu_throttled also feed src/report's goldens and README's examples (data_cpu:
# this script's flags are the ones it was first recorded with; gpu_throttled is fake_job.py on
# the fake NVML and is not re-recorded here).
set -euo pipefail

ALL="compute data_cpu data_cpu_workers data_io periodic logging oversub ddp ddp_straggler
ddp_main_rank ddp_comm startup_data_cpu startup_compute compare_io0 compare_io0_again compare_io2"
# Every examples/train.py situation, recorded again by --repeat N into tests/data/repeat/NAME.N
# (issue 39: one job, one class; RecordedRun.EachSituationRecordedThreeTimesGetsOneClass).
SITUATIONS="compute data_cpu data_cpu_workers data_io periodic logging oversub ddp ddp_straggler
ddp_main_rank ddp_comm"

if [[ "${1:-}" == "--list" ]]; then
  echo $ALL
  exit 0
fi
REPEAT=""
if [[ "${1:-}" == "--repeat" ]]; then
  REPEAT=${2:?--repeat N}
  shift 2
fi
if [[ $# -lt 1 ]]; then
  echo "usage: $0 [--repeat N] BUILD [NAME...] | --list" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
shift
NAMES=${*:-$ALL}
[[ -n "$REPEAT" ]] && NAMES=${*:-$SITUATIONS}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
STALLSCOPE="$BUILD/stallscope"
[[ -x "$STALLSCOPE" ]] || { echo "$STALLSCOPE: not built" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "/usr/bin/python3 has no torch" >&2; exit 1; }

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-fixtures-XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
# The idle H100 that RunE2e's WithIdleFakeGpu gave the start-up runs: a CPU-only job on a GPU
# machine.
cat >"$SCRATCH/idle_gpu.json" <<'EOF'
{"driver_version": "580.159.04", "gpus": [{"name": "NVIDIA H100 80GB HBM3",
 "memory_total_mib": 81559, "memory_used_mib": 1024, "power_limit_w": 700,
 "sm_clock_max_mhz": 1980, "pattern": {"kind": "steady", "util_high": 0}}]}
EOF

TRAIN="examples/train.py"
DDP=(examples/launch.py --nproc-per-node 2 "$TRAIN")
# compare_*: the three runs of the old CompareE2e test (page-cached reads, 4 ms sleep per file).
IO=(--steps 30 --print-every 1000 --situation data_io --io-mode cached --io-latency-ms 4)

# record NAME [ENV=VALUE...] -- RUN_FLAGS... -- JOB...
record() {
  local name=$1 out="$SCRATCH/$1" dest="tests/data/runs/$1"
  [[ -n "$REPEAT" ]] && dest="tests/data/repeat/$1.$REPEAT"
  shift
  local env=() flags=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  while [[ $1 != -- ]]; do flags+=("$1"); shift; done
  shift
  echo "== $name: stallscope run ${flags[*]} -- $*"
  # Without the caller's STALLSCOPE_* settings, as the tests run it.
  env -u STALLSCOPE_NVML_LIB -u STALLSCOPE_FAKE_NVML_SCENARIO -u STALLSCOPE_BACKEND \
    ${env[@]+"${env[@]}"} "$STALLSCOPE" run --quiet --out "$out" "${flags[@]}" -- \
    /usr/bin/python3 "$@" >"$SCRATCH/$name.log" 2>&1 ||
    { tail -20 "$SCRATCH/$name.log"; echo "$name: the run failed" >&2; exit 1; }
  rm -f "$out"/report.txt "$out"/report.json "$out"/report.html "$out"/job.log
  find "$out" -name '*.ring' -delete
  rm -rf "$dest"
  mkdir -p "$(dirname "$dest")"
  cp -r "$out" "$dest"
  echo "   $(du -sh "$dest" | cut -f1)  $("$STALLSCOPE" diagnose --json \
    "$dest" | /usr/bin/python3 -c \
    'import json,sys; p=json.load(sys.stdin)["verdict"]["principal"]; print(p and p["class"])')"
}

for name in $NAMES; do
  case $name in
    compute) record compute -- -i 200ms -- "$TRAIN" --situation compute --steps 20 ;;
    data_cpu)
      record data_cpu -- -i 500ms -- "$TRAIN" --situation data_cpu --steps 30 --transform-reps 16 \
        --print-every 1000 ;;
    data_cpu_workers)
      record data_cpu_workers -- -i 200ms -- "$TRAIN" --situation data_cpu_workers --steps 40 ;;
    data_io)
      # 20 ms per read (a network filesystem): data_bound_io on a loaded host too.
      record data_io -- -i 200ms -- "$TRAIN" --situation data_io --steps 20 --file-res 64 \
        --io-latency-ms 20 ;;
    periodic)
      record periodic -- -i 200ms -- "$TRAIN" --situation periodic --steps 50 \
        --checkpoint-every 10 --sample-every 8 --sample-iters 10 --checkpoint-extra-mb 16 ;;
    logging) record logging -- -i 200ms -- "$TRAIN" --situation logging --steps 60 ;;
    oversub) record oversub -- -i 200ms -- "$TRAIN" --situation oversub --steps 20 ;;
    ddp)
      # Loading sleeps (2 ms per sample) with a light transform: neither rank short of CPU, the
      # loading mostly waiting (1 ms put it between the CPU and I/O bars beside other work).
      record ddp -- -i 100ms -- "${DDP[@]}" --situation ddp --steps 30 --print-every 0 \
        --transform-reps 1 --io-latency-ms 2 ;;
    ddp_straggler)
      record ddp_straggler -- -i 100ms -- "${DDP[@]}" --situation ddp_straggler --steps 30 \
        --print-every 0 --transform-reps 4 ;;
    ddp_main_rank)
      # 120 sampling iterations (the preset's 40 left rank 1's wait for them level with the 1 ms
      # reads' data_loading: one run each way, issue 39).
      record ddp_main_rank -- -i 200ms -- "${DDP[@]}" --situation ddp_main_rank --steps 30 \
        --print-every 0 --transform-reps 1 --io-latency-ms 1 --sample-iters 120 ;;
    ddp_comm)
      record ddp_comm -- -i 200ms -- "${DDP[@]}" --situation ddp_comm --steps 40 --print-every 0 ;;
    startup_data_cpu)
      record startup_data_cpu -- -i 200ms -- "$TRAIN" --situation data_cpu --steps 16 \
        --transform-reps 16 --setup-s 10 --print-every 0 ;;
    startup_compute)
      # -i 500ms, not the live test's 200ms: ~40 s of samples of the fake GPU were 590 KB.
      record startup_compute "STALLSCOPE_NVML_LIB=$BUILD/tests/fakes/nvml/libnvidia-ml.so.1" \
        "STALLSCOPE_FAKE_NVML_SCENARIO=$SCRATCH/idle_gpu.json" -- -i 500ms -- "$TRAIN" \
        --situation compute --steps 60 --setup-s 10 --first-batch-s 2 --warmup-steps 2 \
        --warmup-s 1.5 --print-every 0 ;;
    compare_io0) record compare_io0 -- -- "$TRAIN" "${IO[@]}" ;;
    compare_io0_again) record compare_io0_again -- -- "$TRAIN" "${IO[@]}" ;;
    compare_io2)
      record compare_io2 -- -- "$TRAIN" "${IO[@]}" --num-workers 2 --persistent-workers ;;
    *)
      echo "$name: not a fixture ($0 --list)" >&2
      exit 2
      ;;
  esac
done
