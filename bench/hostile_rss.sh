#!/usr/bin/env bash
# The monitor's memory under a hostile job (issue 40): peak RSS (/usr/bin/time -v) of `dump` and
# of `run` on the two shapes of its probes, with Debian's python3.11 (the forge's offsets are
# 3.11's):
#   forge  a job that forges its interpreter list with ctypes: 64 interpreters naming one list of
#          4095 thread states, each at its real 200-deep stack (probe P01)
#   table  a job whose 600 functions share one 1 MiB line table (code.replace(co_linetable=...),
#          no ctypes), 100 of them on the stack at once (probe P03)
# Prints one line per (shape, command): peak RSS in MB, wall seconds, exit status.
#   bench/hostile_rss.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
BIN=$(realpath "$BUILD/stallscope")
PYTHON=/usr/bin/python3.11
[[ -x "$BIN" ]] || { echo "$BIN: not built (make build)" >&2; exit 1; }
[[ -x "$PYTHON" ]] || { echo "needs Debian's python3.11" >&2; exit 1; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-hostile-XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$DIR"' EXIT
cd "$DIR"
cat >hooks.py <<'PY'
try:  # under `run`: phases make the job a rank's process, sampled at 50 Hz
    import stallscope
    phase, step = stallscope.phase, stallscope.step
except ImportError:  # under `dump`: no package
    import contextlib
    phase, step = (lambda name: contextlib.nullcontext()), (lambda: None)
PY
cat >forge.py <<'PY'
import ctypes, sys, time, os
from hooks import phase
with phase("setup"): time.sleep(0.3)
u64 = lambda a: ctypes.c_uint64.from_address(a)
RT = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
ctypes.pythonapi.PyThreadState_Get.restype = ctypes.c_void_p
NI, NT, D, T = (int(x) for x in sys.argv[1:5])
keep = []
def buf(n):
    b = ctypes.create_string_buffer(n); keep.append(b); return ctypes.addressof(b)
def install():
    ts = ctypes.pythonapi.PyThreadState_Get(); tsz = 320; base = buf(NT * tsz)
    for i in range(NT):                      # 3.11 PyThreadState: next 8, thread_id 152,
        a = base + i * tsz                   # native_thread_id 160, cframe 56, datastack_chunk 296
        u64(a + 8).value = a + tsz if i + 1 < NT else 0
        u64(a + 152).value = 1000 + i
        u64(a + 160).value = 2**31 - 2 - i
        u64(a + 56).value = u64(ts + 56).value
        u64(a + 296).value = u64(ts + 296).value
    ib = buf(NI * 64)                        # PyInterpreterState: next 0, threads.head 16
    for k in range(NI):
        u64(ib + k * 64).value = ib + (k + 1) * 64 if k + 1 < NI else 0
        u64(ib + k * 64 + 16).value = base
    old = u64(RT + 40).value; u64(RT + 40).value = ib   # _PyRuntime.interpreters.head
    return old
def rec(n):
    if n == 0:
        old = install(); print("ready", os.getpid(), flush=True); time.sleep(T); u64(RT + 40).value = old; return
    rec(n - 1)
sys.setrecursionlimit(D + 100); rec(D)
PY
cat >table.py <<'PY'
import os, sys, time, types
from hooks import phase, step
DEPTH, BATCHES, HOLD = 100, 6, float(sys.argv[1])
sys.setrecursionlimit(DEPTH + 200)
big = b'\x80\x00' * (512 * 1024)          # a valid 3.11+ location table of 1 MiB, shared
def g(n, fs):
    if n: return fs[n - 1](n - 1, fs)
    print("ready", os.getpid(), flush=True)
    time.sleep(HOLD)
keep = []
for b in range(BATCHES):
    fs = [types.FunctionType(g.__code__.replace(co_linetable=big, co_name=f"g{b}_{i}"), globals()) for i in range(DEPTH)]
    keep.append(fs)
    with phase("work"): fs[-1](DEPTH - 1, fs)
    step()
PY
measure() {  # name command...
  local name=$1; shift
  local rc=0
  /usr/bin/time -v -o time.txt "$@" >out.txt 2>err.txt || rc=$?
  local kb wall
  kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' time.txt)
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' time.txt)
  printf '%-14s peak RSS %6.1f MB  wall %s  exit %d\n' "$name" "$(echo "$kb / 1024" | bc -l)" "$wall" "$rc"
}
dump_of() {  # script args...: starts it, waits for "ready", dumps it
  "$PYTHON" "$@" >job.out 2>&1 &
  local job=$!
  for _ in $(seq 600); do grep -q ready job.out && break; sleep 0.1; done
  measure "$1 dump" "$BIN" dump --no-children "$job"
  kill "$job" 2>/dev/null || true
  wait "$job" 2>/dev/null || true
}
dump_of forge.py 64 4095 200 60
measure "forge.py run" "$BIN" run --quiet --out run-forge -- "$PYTHON" forge.py 64 4095 200 6
dump_of table.py 60
measure "table.py run" "$BIN" run --quiet --out run-table -- "$PYTHON" table.py 0.25
