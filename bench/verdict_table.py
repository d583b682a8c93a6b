#!/usr/bin/env python3
"""The verdict of every recorded run in one table (issue 39: a reviewer sees every class at once).

    bench/verdict_table.py STALLSCOPE [SHARED_DIR]

Runs `STALLSCOPE diagnose --json` on every run directory of tests/data/runs and tests/data/repeat
and, when SHARED_DIR (default: ../shared beside the checkout) holds the H100 gpu-check, on its run
directories (unpacked into a temporary folder, never copied into the repository). Prints one
Markdown row per run: the principal class with its confidence and cost, the secondary classes,
and the step ledger's parts of the job (percent of the steady step). Exit status 1 when a run
with steady steps has no principal finding (the verdict must never be `none` then).
"""

import json
import os
import subprocess
import sys
import tarfile
import tempfile

PARTS = ["compute", "data", "communication", "rank_wait", "side_work", "host_work", "unaccounted"]
SHORT = ["compute", "data", "comm", "rank wait", "side", "host", "unacc."]


def run_dirs(root):
    """Every run directory of the repository's fixtures, by name."""
    out = []
    for sub in ("tests/data/runs", "tests/data/repeat"):
        base = os.path.join(root, sub)
        if not os.path.isdir(base):
            continue
        for name in sorted(os.listdir(base)):
            path = os.path.join(base, name)
            if os.path.isfile(os.path.join(path, "run.json")):
                out.append((f"{sub.split('/')[-1]}/{name}", path))
    return out


def h100_dirs(shared, scratch):
    tgz = os.path.join(shared, "gpu", "h100-2026-11-26", "gpu-check.tgz")
    if not os.path.isfile(tgz):
        return []
    with tarfile.open(tgz) as t:
        t.extractall(scratch)
    base = os.path.join(scratch, "gpucheck")
    return [(f"h100/{n}", os.path.join(base, n)) for n in sorted(os.listdir(base))
            if n.startswith("run-") and os.path.isfile(os.path.join(base, n, "run.json"))]


def row(stallscope, label, path):
    out = subprocess.run([stallscope, "diagnose", "--json", path], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items()
                              if not k.startswith("STALLSCOPE_")})
    if out.returncode != 0:
        return f"| {label} | error: {out.stderr.strip()} |" + " |" * 9, False
    report = json.loads(out.stdout)
    verdict = report["verdict"]
    p = verdict["principal"]
    ledger = report.get("ledger")
    principal = "none" if p is None else \
        f"{p['class']} ({p['confidence']:.2f}, {p['cost_fraction'] * 100:.0f}%)"
    also = ", ".join(s["class"] for s in verdict["secondary"]) or "-"
    shares = ["-"] * len(PARTS)
    if ledger:
        shares = [f"{ledger['job']['parts'][k] * 100:.0f}" for k in PARTS]
    ok = p is not None or not ledger
    busy = " (busy host)" if any(c.startswith("busy host:") for c in verdict["caveats"]) else ""
    return f"| {label}{busy} | {principal} | {also} | " + " | ".join(shares) + " |", ok


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    stallscope = sys.argv[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shared = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "..", "shared")
    print("| run | principal (confidence, cost) | also | " + " | ".join(SHORT) + " |")
    print("|---|---|---|" + "---:|" * len(PARTS))
    bad = 0
    with tempfile.TemporaryDirectory(prefix="stallscope-verdicts-") as scratch:
        for label, path in run_dirs(root) + h100_dirs(shared, scratch):
            text, ok = row(stallscope, label, path)
            print(text)
            bad += not ok
    if bad:
        print(f"{bad} run(s) with steady steps and no verdict", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
