#!/usr/bin/python3
"""Cost of stallscope's Python markers, per call, in ns (the issue's budget: enter+exit <= 1 us).

    PYTHONPATH=build/python /usr/bin/python3 python/bench_marker.py

Runs itself three times: recording (a temp STALLSCOPE_RUN_DIR), the no-op path (no run dir),
and STALLSCOPE_PROFILE=1. Each case is the best of 7 repeats of N iterations, minus the cost of
an empty loop. Exit status 1 if a recording ``with stallscope.phase("x"):`` costs more than 1 us.
"""

import os
import subprocess
import sys
import tempfile
import timeit

BUDGET_NS = 1000.0
N = 200_000

CASES = {
    "with phase('x') (cached object)": "with ph:\n    pass",
    "with stallscope.phase('x')": "with stallscope.phase('x'):\n    pass",
    "@stallscope.phase function call": "f()",
    "stallscope.step()": "stallscope.step()",
    "stallscope.count('syncs')": "stallscope.count('syncs')",
}
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
    base = min(timeit.repeat("pass", repeat=7, number=N)) / N
    call_base = min(timeit.repeat("plain()", setup=SETUP, repeat=7, number=N)) / N
    results = {}
    for label, stmt in CASES.items():
        best = min(timeit.repeat(stmt, setup=SETUP, repeat=7, number=N)) / N
        # The decorated call is compared with a plain call; the rest with an empty loop.
        results[label] = (best - (call_base if stmt == "f()" else base)) * 1e9
    return results


def child_main(mode):
    # sys.path[0] is this script's directory, which holds the source package (no extension):
    # import the built one from PYTHONPATH instead.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import stallscope

    print(f"{mode}: enabled={stallscope.enabled()}")
    for label, ns in measure().items():
        print(f"  {label:34s} {ns:7.0f} ns")
    if mode == "recording":
        ns = measure()["with stallscope.phase('x')"]
        return 0 if ns <= BUDGET_NS else 1
    return 0


def main():
    if len(sys.argv) > 1:
        return child_main(sys.argv[1])
    status = 0
    with tempfile.TemporaryDirectory(prefix="stallscope-bench-") as run_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STALLSCOPE_")}
        modes = {
            "recording": {**env, "STALLSCOPE_RUN_DIR": run_dir},
            "no-op": env,
            "profile": {**env, "STALLSCOPE_PROFILE": "1", "STALLSCOPE_PROFILE_EVERY": "1000000000"},
        }
        for mode, mode_env in modes.items():
            proc = subprocess.run([sys.executable, __file__, mode], env=mode_env, check=False)
            status = status or proc.returncode
    print(f"budget: recording enter+exit <= {BUDGET_NS:.0f} ns: {'ok' if status == 0 else 'EXCEEDED'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
