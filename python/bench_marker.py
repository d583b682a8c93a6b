#!/usr/bin/env python3
"""Cost of stallscope's Python markers, per call, in ns, in the interpreter that runs this file.

    PYTHONPATH=build/python python3 python/bench_marker.py            # a report
    PYTHONPATH=build/python python3 python/bench_marker.py --markdown # table rows (bench/marker_matrix.sh)

Runs itself once per mode, each in a fresh interpreter: recording through each recorder backend
this interpreter can load ("core": the compiled extension, only where it was built for this
interpreter; "native": the C library through ctypes, everywhere), the no-op path (no run dir),
and STALLSCOPE_PROFILE=1. Each case is the best of 15 repeats of 100,000 iterations (the best, because this machine's noise only ever adds time), minus the cost of
an empty loop (a plain call for the decorated function).

Budgets (issue 9): a recording ``with stallscope.phase("x"):`` (enter + exit) <= 1 us on the path
the package picks by default, <= 3 us on any fallback. Exit status 1 when one is exceeded.
Python 3.8+, standard library only.
"""

import json
import os
import subprocess
import sys
import tempfile
import timeit

FAST_BUDGET_NS = 1000.0
FALLBACK_BUDGET_NS = 3000.0
N = 100_000
REPEAT = 15

CASES = {
    "with ph (cached object)": "with ph:\n    pass",
    "with stallscope.phase('x')": "with stallscope.phase('x'):\n    pass",
    "@stallscope.phase call": "f()",
    "stallscope.step()": "stallscope.step()",
    "stallscope.count('syncs')": "stallscope.count('syncs')",
}
KEY_CASE = "with stallscope.phase('x')"
SETUP = """
import stallscope
ph = stallscope.phase('x')
@stallscope.phase('decorated')
def f():
    pass
def plain():
    pass
"""


def measure():
    base = min(timeit.repeat("pass", repeat=REPEAT, number=N)) / N
    call_base = min(timeit.repeat("plain()", setup=SETUP, repeat=REPEAT, number=N)) / N
    results = {}
    for label, stmt in CASES.items():
        best = min(timeit.repeat(stmt, setup=SETUP, repeat=REPEAT, number=N)) / N
        results[label] = (best - (call_base if stmt == "f()" else base)) * 1e9
    return results


def child_main(mode):
    # sys.path[0] is this script's directory, which holds the source package (no C library):
    # import the built one from PYTHONPATH instead.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import stallscope

    out = {"mode": mode, "backend": stallscope.backend(), "enabled": stallscope.enabled(),
           "ns": measure()}
    print(json.dumps(out))
    return 0


def run_mode(mode, env):
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"mode": mode, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def default_backend(env):
    proc = subprocess.run(
        [sys.executable, "-c", "import stallscope; print(stallscope.backend())"],
        env=env, capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None


def main(argv):
    if len(argv) > 2 and argv[1] == "--child":
        return child_main(argv[2])
    markdown = "--markdown" in argv
    version = ".".join(str(v) for v in sys.version_info[:3])
    status = 0
    results = []
    with tempfile.TemporaryDirectory(prefix="stallscope-bench-") as run_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STALLSCOPE_")}
        recording = dict(env, STALLSCOPE_RUN_DIR=run_dir)
        picked = default_backend(recording)
        for backend in ("core", "native"):
            r = run_mode(f"recording:{backend}", dict(recording, STALLSCOPE_BACKEND=backend))
            if r.get("backend") != backend:
                continue  # not loadable in this interpreter (the extension is built for one)
            budget = FAST_BUDGET_NS if backend == picked else FALLBACK_BUDGET_NS
            r["budget_ns"] = budget
            r["default"] = backend == picked
            if r["ns"][KEY_CASE] > budget:
                status = 1
            results.append(r)
        results.append(run_mode("no-op", env))
        results.append(run_mode("profile", dict(env, STALLSCOPE_PROFILE="1",
                                                STALLSCOPE_PROFILE_EVERY="1000000000")))
    for r in results:
        if "error" in r:
            print(f"{r['mode']}: failed: {r['error']}", file=sys.stderr)
            status = 1
            continue
        ns = r["ns"]
        if markdown:
            if not r["mode"].startswith("recording"):
                continue
            label = f"{r['backend']}{' (default)' if r['default'] else ''}"
            cells = [ns[KEY_CASE], ns["with ph (cached object)"], ns["stallscope.step()"],
                     ns["stallscope.count('syncs')"]]
            print(f"| {version} | {label} | " + " | ".join(f"{v:.0f}" for v in cells) + " |")
            continue
        print(f"Python {version}, {r['mode']} (backend {r['backend']}, enabled={r['enabled']}):")
        for label, value in ns.items():
            print(f"  {label:30s} {value:7.0f} ns")
        if "budget_ns" in r:
            verdict = "ok" if ns[KEY_CASE] <= r["budget_ns"] else "EXCEEDED"
            print(f"  budget for {KEY_CASE}: <= {r['budget_ns']:.0f} ns: {verdict}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
