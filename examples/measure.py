#!/usr/bin/env python3
"""Runs every train.py situation a few times and prints a steps/s table (for examples/README.md).

    /usr/bin/python3 examples/measure.py                      # plain runs, 3 repeats
    /usr/bin/python3 examples/measure.py --repeats 1 data_cpu oversub
    /usr/bin/python3 examples/measure.py --core build/python  # also phase shares
    /usr/bin/python3 examples/measure.py data_io -- --io-latency-ms 1   # flags for all runs
    /usr/bin/python3 examples/measure.py oversub "oversub:--threads 2 --worker-threads 0"

--core DIR: a directory holding the built `stallscope` package (with its _core extension).
Each run then happens with the zero-code-change hooks (python/sitecustomize.py) and the core's
STALLSCOPE_PROFILE summary, whose last window is printed under the table.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from train import SITUATIONS  # noqa: E402

DONE = re.compile(r"^done .*steps/s=([0-9.]+)", re.M)


def run_once(spec, extra, core):
    situation, _, variant = spec.partition(":")
    cmd = [sys.executable, os.path.join(HERE, "train.py"), "--situation", situation,
           *variant.split(), *extra]
    env = dict(os.environ)
    run_dir = None
    if core:
        run_dir = tempfile.mkdtemp(prefix="stallscope-measure-")
        steps = SITUATIONS[situation].get("steps", 100)  # one summary per half run
        env.update(STALLSCOPE_RUN_DIR=run_dir, STALLSCOPE_PROFILE="1",
                   STALLSCOPE_PROFILE_EVERY=str(max(1, steps // 2)),
                   PYTHONPATH=os.pathsep.join([os.path.abspath(core),
                                               os.path.join(REPO, "python")]))
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    match = DONE.search(proc.stdout)
    if proc.returncode != 0 or not match:
        sys.stderr.write(f"{situation}: failed (rc={proc.returncode})\n{proc.stderr[-2000:]}\n")
        return None, wall, ""
    summaries = [ln for ln in proc.stderr.splitlines() if ln.startswith("[stallscope] steps")]
    return float(match.group(1)), wall, summaries[-1] if summaries else ""


def wait_quiet(max_load, timeout_s=600):
    deadline = time.monotonic() + timeout_s
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("situations", nargs="*", default=list(SITUATIONS),
                        help="situation names; 'name:--flag value ...' runs a variant")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", help="directory with the built stallscope package")
    parser.add_argument("--wait-quiet", type=float, metavar="LOAD",
                        help="before each run, wait (up to 10 min) for the 1-min load < LOAD")
    argv, extra = sys.argv[1:], []
    if "--" in argv:  # everything after -- goes to train.py
        argv, extra = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = parser.parse_args(argv)
    # Other work on the box skews CPU-bound timings a lot: the 1-min load average is printed
    # with each row (run on an idle machine for numbers worth comparing).
    width = max(18, *(len(s) for s in args.situations))
    print(f"{'situation':{width}s} {'median steps/s':>14s} {'runs':>20s} {'wall s':>7s}"
          f" {'load':>5s}")
    notes = []
    for situation in args.situations:
        rates, walls = [], []
        for _ in range(args.repeats):
            if args.wait_quiet:
                wait_quiet(args.wait_quiet)
            rate, wall, summary = run_once(situation, extra, args.core)
            if rate is not None:
                rates.append(rate)
                walls.append(wall)
            if summary:
                notes.append(f"{situation}: {summary}")
        runs = " ".join(f"{r:.2f}" for r in rates)
        median = f"{statistics.median(rates):.2f}" if rates else "failed"
        wall = f"{statistics.median(walls):.1f}" if walls else "-"
        load = os.getloadavg()[0]
        print(f"{situation:{width}s} {median:>14s} {runs:>20s} {wall:>7s} {load:5.1f}", flush=True)
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
