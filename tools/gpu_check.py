#!/usr/bin/env python3
"""stallscope's GPU check: runs stallscope on a machine with an NVIDIA GPU and a CUDA PyTorch,
checks each result against what it should be, and prints an expected/got table.

    python3 tools/gpu_check.py [--stallscope PATH] [--python PATH] [--out DIR] [--quick]
    make gpu-check GPU_CHECK_FLAGS="--quick"            # the same, from the repo
    bin/stallscope-gpu-check --quick                     # the same, from the bundle (make dist)

What it runs (README "GPU check"), each command with a time limit, in about 4 minutes (about
2 with --quick), at most 9 (4.5):
  top --once --json      NVML names, memory, power, clocks, temperature, processes
  record -i 100ms        while the GPU is idle (utilization < 10%), and following a matmul burn
                         that it starts itself (> 80%; the burn's PID in the per-process memory)
  run                    examples/train.py --device cuda with the presets compute, data_cpu,
                         logging and periodic: the verdict each is built to produce (compute: a
                         sure one, from a long enough steady state), the report's start-up line,
                         and GPU-side phase times where this build records them
  trace --json           a torch.profiler CUDA trace of examples/train.py recorded here
  doctor --json          where this build has `doctor`

Every command's stdout/stderr (and the recordings, run directories, trace) are saved in --out,
with table.md (the environment and the table, ready for docs/gpu-check.md) and result.json.

Exit status: 0 every row OK (or SKIP: a feature not in this build); 1 a row FAILed;
2 cannot run (bad options, the stallscope binary or the Python's torch missing or broken);
3 no NVIDIA GPU: NVML (as stallscope loads it) finds none, or torch.cuda.is_available() is
False. Before exit 3 nothing GPU-specific has run: `stallscope --version`, `top --once --json`
and an `import torch` only.

Standard library only, Python >= 3.8, so that it runs on the GPU machine as it is.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

EXIT_OK, EXIT_FAIL, EXIT_SETUP, EXIT_NO_GPU = 0, 1, 2, 3

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)  # the bundle (bin/..) or the repository (tools/..)

# Thresholds of the issue (10, part 4).
BURN_MIN_UTIL_PCT = 80.0
IDLE_MAX_UTIL_PCT = 10.0
INTERVAL_MS = (80.0, 150.0)  # record -i 100ms: median spacing of samples
RAMP_NS = 1_000_000_000  # NVML utilization averages up to 1 s back: skip the burn's first second

# examples/train.py presets and the verdict each is built to produce (examples/README.md, "On a
# GPU"). The presets were tuned on a 2-core CPU box. On a GPU, `compute` and `periodic` get a
# CNN and batch whose steps are GPU work, and loader workers that keep the data off the critical
# path (else the host, not the GPU, is the limit). Measured on an H100 (docs/gpu-check.md,
# 2026-11-26): the old compute (cnn/64, batch 128) ran 150 steps/s at 87-90% utilization after
# 18 s of start-up, so 150 steps were 1 s of steady state; the old periodic (mlp/512, batch 32)
# was a tiny-kernel run with 2 checkpoints inside its steps.
GPU_DATA = ["--dataset-size", "8192", "--num-workers", "4", "--persistent-workers",
            "--pin-memory"]
SITUATIONS = [
    # (situation, expected verdict class, extra train.py flags, steps, steps with --quick)
    # ~8x the old per-step GPU work (channels x2, batch x2): an estimated 20-35 steps/s on an
    # H100, so --quick's 300 steps are ~10 s of steady state, beyond the sure verdict's 20 steps
    # and 5 s (src/base/thresholds.h steady_sure_*).
    ("compute", "gpu_bound", ["--size", "128", "--batch-size", "256"] + GPU_DATA, 500, 300),
    ("data_cpu", "data_bound_cpu", [], 60, 30),
    ("logging", "host_sync_or_logging", [], 100, 50),
    # The old compute's GPU-bound steps (~150 steps/s), and every 50 steps a 512 MiB checkpoint
    # (~0.5 s of host work: torch.save of the extra tensors) with a 20-forward sampling loop:
    # 7 occurrences inside --quick's 400 steps (the one at the last step is after it), each
    # longer than the 50 steps between them.
    ("periodic", "periodic_side_work",
     ["--model", "cnn", "--size", "64", "--batch-size", "128", "--checkpoint-every", "50",
      "--checkpoint-extra-mb", "512", "--sample-every", "50", "--sample-iters", "20"] + GPU_DATA,
     600, 400),
]
# `run compute` must have a steady state long enough for a sure verdict (report.json "life").
SURE_SITUATIONS = ("compute",)
COMPUTE_PHASES = ("forward_pass", "backward_pass", "optimizer_step", "eval_forward")

# A matmul burn: 8192^2 fp32 matmuls (~1.1 TFLOP each) in rounds of 10, until argv[1] seconds
# have passed; writes its pid and burn window (CLOCK_MONOTONIC ns, the clock of ts_ns) to argv[2].
BURN = r"""
import json, os, sys, time, torch
seconds, window_path = float(sys.argv[1]), sys.argv[2]
a = torch.randn(8192, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")
(a @ b).sum().item()
begin, rounds = time.monotonic_ns(), 0
while time.monotonic_ns() - begin < seconds * 1e9:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    rounds += 1
end = time.monotonic_ns()
with open(window_path, "w") as f:
    json.dump({"pid": os.getpid(), "begin_ns": begin, "end_ns": end, "matmuls": 10 * rounds}, f)
"""

TORCH_PROBE = r"""
import json, platform, sys
out = {"python": platform.python_version(), "implementation": platform.python_implementation(),
       "executable": sys.executable}
try:
    import torch
except Exception as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
else:
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["available"] = bool(torch.cuda.is_available())
    if out["available"]:
        out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
print(json.dumps(out))
"""


# ------------------------------------------------------------------------------------------------
# Rows: pure functions of parsed outputs (tools/gpu_check_test.py feeds them real schemas)
# ------------------------------------------------------------------------------------------------

class Row:
    """One line of the table. status: OK, FAIL, or SKIP (a feature this build does not have)."""

    def __init__(self, what, expected, got, status):
        self.what, self.expected, self.got, self.status = what, expected, got, status

    def to_json(self):
        return {"what": self.what, "expected": self.expected, "got": self.got,
                "status": self.status}


def check(what, expected, got, ok):
    return Row(what, expected, got, "OK" if ok else "FAIL")


def _gib(n):
    return "%.1f GiB" % (n / 2**30) if isinstance(n, (int, float)) else "n/a"


def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def top_rows(top):
    """`top --once --json` on a GPU machine: NVML's names, memory, power, clocks, processes."""
    header, sample = top.get("header", {}), top.get("sample", {})
    gpus = sample.get("multi_gpu_data") or []
    names = ", ".join("%s: %s" % (g.get("gpu_index"), g.get("gpu_name")) for g in gpus)
    rows = [check("top: GPUs through NVML", "backend nvml, >= 1 GPU with a name",
                  "backend %s, %d GPU (%s), driver %s%s" % (
                      header.get("gpu_backend"), len(gpus), names or "none",
                      header.get("driver_version"),
                      ", note: " + header["gpu_note"] if header.get("gpu_note") else ""),
                  header.get("gpu_backend") == "nvml" and gpus
                  and all(g.get("gpu_name") for g in gpus))]
    if not gpus:
        return rows
    rows.append(check(
        "top: memory", "used and total bytes per GPU, total > 0",
        "; ".join("GPU %s %s of %s" % (g.get("gpu_index"), _gib(g.get("memory_used_bytes")),
                                        _gib(g.get("memory_total_bytes"))) for g in gpus),
        all(_num(g.get("memory_used_bytes")) and (g.get("memory_total_bytes") or 0) > 0
            for g in gpus)))
    rows.append(check(
        "top: power", "power and limit per GPU, > 0",
        "; ".join("GPU %s %s of %s W" % (
            g.get("gpu_index"),
            "%.0f" % (g["power_mw"] / 1e3) if _num(g.get("power_mw")) else "n/a",
            "%.0f" % (g["power_limit_mw"] / 1e3) if _num(g.get("power_limit_mw")) else "n/a")
            for g in gpus),
        all((g.get("power_mw") or 0) > 0 and (g.get("power_limit_mw") or 0) > 0 for g in gpus)))
    rows.append(check(
        "top: clocks and temperature", "SM and memory clock > 0 MHz, temperature per GPU",
        "; ".join("GPU %s SM %s MHz, mem %s MHz, %s C" % (
            g.get("gpu_index"), g.get("sm_clock_mhz"), g.get("mem_clock_mhz"),
            g.get("temperature")) for g in gpus),
        all((g.get("sm_clock_mhz") or 0) > 0 and (g.get("mem_clock_mhz") or 0) > 0
            and _num(g.get("temperature")) for g in gpus)))
    rows.append(check(
        "top: per-process GPU memory", "a process list per GPU (not null: NVML supports it)",
        "; ".join("GPU %s: %s" % (g.get("gpu_index"), "null" if g.get("processes") is None
                                  else "%d processes" % len(g["processes"])) for g in gpus),
        all(isinstance(g.get("processes"), list) for g in gpus)))
    return rows


def read_jsonl(path):
    """A recording's header and samples; lines that do not parse are skipped."""
    header, samples = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("type") == "header":
                header = obj
            elif obj.get("type") == "sample":
                samples.append(obj)
    return header, samples


def busiest_gpu_util(samples):
    """(GPU index, mean utilization %, samples) of the GPU with the highest mean utilization."""
    per_gpu = {}
    for s in samples:
        for g in s.get("multi_gpu_data") or []:
            if _num(g.get("utilization")):
                per_gpu.setdefault(g.get("gpu_index"), []).append(g["utilization"])
    if not per_gpu:
        return None, None, 0
    index, values = max(per_gpu.items(), key=lambda kv: statistics.mean(kv[1]))
    return index, statistics.mean(values), len(values)


def in_window(samples, begin_ns, end_ns):
    return [s for s in samples if begin_ns <= s.get("ts_ns", -1) <= end_ns]


def interval_row(samples):
    ts = [s["ts_ns"] for s in samples if _num(s.get("ts_ns"))]
    gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
    median = statistics.median(gaps) if gaps else None
    return check("record -i 100ms: sample spacing",
                 "median %.0f-%.0f ms" % INTERVAL_MS,
                 "median %.1f ms over %d samples" % (median, len(ts)) if median else
                 "%d samples" % len(ts),
                 median is not None and INTERVAL_MS[0] <= median <= INTERVAL_MS[1])


def burn_util_row(samples):
    index, mean, n = busiest_gpu_util(samples)
    return check("record: utilization during a matmul burn",
                 "busiest GPU mean > %.0f%%" % BURN_MIN_UTIL_PCT,
                 "GPU %s mean %.1f%% over %d samples" % (index, mean, n) if n else
                 "no utilization samples",
                 n > 0 and mean > BURN_MIN_UTIL_PCT)


def idle_util_row(samples):
    index, mean, n = busiest_gpu_util(samples)
    return check("record: utilization while idle",
                 "every GPU mean < %.0f%%" % IDLE_MAX_UTIL_PCT,
                 "busiest GPU %s mean %.1f%% over %d samples" % (index, mean, n) if n else
                 "no utilization samples",
                 n > 0 and mean < IDLE_MAX_UTIL_PCT)


def job_pid_row(samples, pid):
    """The job's PID in NVML's per-process memory of some sample, with memory > 0."""
    best, seen = 0, set()
    for s in samples:
        for g in s.get("multi_gpu_data") or []:
            for p in g.get("processes") or []:
                seen.add(p.get("pid"))
                if p.get("pid") == pid and _num(p.get("memory_used_bytes")):
                    best = max(best, p["memory_used_bytes"])
    got = ("pid %s: up to %s" % (pid, _gib(best)) if best else
           "pid %s not seen; pids seen: %s" % (pid, sorted(x for x in seen if x is not None)
                                               or "none"))
    return check("record: per-process GPU memory", "the burn's pid %s, memory > 0" % pid,
                 got, best > 0)


def _principal(report):
    verdict = report.get("verdict") or {}
    return verdict.get("principal") or {}


def life_text(report):
    """The report's start-up line (report.json "life": {"text", "sure", "startup_s", ...}), or
    what stands in for it: a stallscope older than issue 26 has no "life"."""
    life = report.get("life")
    if not isinstance(life, dict):
        return "no start-up line (this stallscope reports no \"life\")"
    return str(life.get("text") or "start-up line empty")


def verdict_row(situation, expected, report, exit_code, need_sure=False):
    """`run` on a train.py preset: the verdict it is built to produce, and the job exited 0.
    The start-up line follows. need_sure: the steady state must also be long enough for a sure
    verdict (life.sure; not checked where the report has no "life")."""
    p = _principal(report)
    steps = report.get("steps") or {}
    phases = sorted((x for x in report.get("phases") or [] if x.get("rank", 0) == 0),
                    key=lambda x: -(x.get("share") or 0))[:3]
    got = "%s (confidence %s, costs ~%s%%); %s steps, %.1f/s; %s; %s" % (
        p.get("class", "no verdict"), p.get("confidence"),
        "%.0f" % (100 * p["cost_fraction"]) if _num(p.get("cost_fraction")) else "?",
        steps.get("count"), steps.get("per_second") or 0,
        ", ".join("%s %.0f%%" % (x.get("name"), 100 * (x.get("share") or 0)) for x in phases),
        life_text(report))
    life = report.get("life")
    unsure = need_sure and isinstance(life, dict) and life.get("sure") is False
    if unsure:
        got = "steady state too short for a sure verdict; " + got
    if exit_code != 0:
        got = "exit %s; %s" % (exit_code, got)
    return check("run %s (--device cuda)" % situation,
                 expected + (", sure (a long enough steady state)" if need_sure else ""), got,
                 exit_code == 0 and p.get("class") == expected and not unsure)


def gpu_phase_times(report):
    """(phase, field, seconds) of each phase's GPU time: a numeric per-phase field whose name
    contains "gpu", or the total_s of such an object (report.json: "gpu": {"total_s", ...})."""
    found = []
    for phase in report.get("phases") or []:
        for key, value in phase.items():
            if "gpu" not in key:
                continue
            if isinstance(value, dict) and _num(value.get("total_s")):
                found.append((phase.get("name"), key + ".total_s", value["total_s"]))
            elif _num(value):
                found.append((phase.get("name"), key, value))
    return found


def gpu_phase_row(report):
    found = gpu_phase_times(report)
    what, expected = "run compute: GPU-side phase times", "compute phases with GPU time > 0"
    if not any("gpu" in k for phase in report.get("phases") or [] for k in phase):
        return Row(what, expected, "not in this build", "SKIP")
    compute = [(n, k, v) for n, k, v in found if n in COMPUTE_PHASES and v > 0]
    got = ", ".join("%s %s=%.3f" % (n, k, v) for n, k, v in found[:6]) or "all null"
    clock = (report.get("verdict") or {}).get("compute_time")
    if clock:
        got += "; the verdict used %s time" % clock
    return check(what, expected, got, bool(compute))


def trace_rows(trace):
    ranks = trace.get("ranks") or []
    if not ranks:
        return [check("trace: a torch.profiler CUDA trace", "1 rank with steps", "no ranks", False)]
    r = ranks[0]
    read, steps = r.get("read") or {}, r.get("steps") or {}
    kernels, tb = r.get("kernels") or {}, r.get("temporal_breakdown") or {}
    top = kernels.get("top") or []
    rows = [check("trace: reads the CUDA trace", "steps > 0, no malformed events",
                  "%s, %s events, %s malformed, %s steps" % (
                      r.get("dialect"), read.get("events"), read.get("malformed"),
                      steps.get("count")),
                  (steps.get("count") or 0) > 0 and read.get("malformed") == 0),
            check("trace: finds GPU kernels", "kernels > 0, GPU compute time > 0",
                  "%s kernels, compute %s%%, idle %s%%; top: %s; verdict %s" % (
                      kernels.get("count"), tb.get("compute_pct"), tb.get("idle_pct"),
                      (top[0].get("name") or "")[:60] if top else "none",
                      _principal(trace).get("class")),
                  (kernels.get("count") or 0) > 0 and (tb.get("compute_pct") or 0) > 0)]
    return rows


def doctor_row(exit_code, doctor):
    """`doctor --json`: a report whose checks (if it lists them) have no "fail"."""
    if doctor is None:
        return check("doctor", "a JSON report", "exit %s, no JSON on stdout" % exit_code, False)
    checks = doctor.get("checks") if isinstance(doctor, dict) else None
    if not isinstance(checks, list):
        return check("doctor", "a JSON report with checks, exit 0",
                     "exit %s, keys: %s" % (exit_code, ", ".join(list(doctor)[:8])),
                     exit_code == 0)
    counts = {}
    for c in checks:
        counts[c.get("status")] = counts.get(c.get("status"), 0) + 1
    bad = [c.get("id") for c in checks if c.get("status") in ("fail", "warn")]
    got = "exit %s; %s%s" % (exit_code, ", ".join("%d %s" % (n, s) for s, n in
                                                 sorted(counts.items(), key=str)),
                             "; warn/fail: " + ", ".join(map(str, bad[:8])) if bad else "")
    return check("doctor", "exit 0, no check fails", got,
                 exit_code == 0 and counts.get("fail", 0) == 0)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(env, rows):
    """The environment and the table, for docs/gpu-check.md."""
    lines = ["## GPU check, %s" % env.get("date"), "", "| | |", "|---|---|"]
    lines += ["| %s | %s |" % (_cell(k), _cell(v)) for k, v in env.items() if k != "date"]
    lines += ["", "| what | expected | got | status |", "|---|---|---|---|"]
    lines += ["| %s | %s | %s | %s |" % tuple(_cell(x) for x in
                                             (r.what, r.expected, r.got, r.status)) for r in rows]
    return "\n".join(lines) + "\n"


def text_table(rows):
    w = max([len(r.what) for r in rows] + [4])
    e = max([len(r.expected) for r in rows] + [8])
    out = ["%-*s  %-*s  %-4s  %s" % (w, "what", e, "expected", "", "got")]
    out += ["%-*s  %-*s  %-4s  %s" % (w, r.what, e, r.expected, r.status, r.got) for r in rows]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# Running commands
# ------------------------------------------------------------------------------------------------

class Result:
    def __init__(self, argv, rc, out, err, seconds, timed_out):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err
        self.seconds, self.timed_out = seconds, timed_out

    def json(self):
        try:
            return json.loads(self.out)
        except ValueError:
            return None


def run_command(argv, timeout_s, env=None):
    """Runs argv to the end or to timeout_s, then stops it (stop()). Never raises for the
    command's sake."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError as e:
        return Result(argv, 127, "", "%s: %s\n" % (argv[0], e), 0.0, False)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        out, err = stop(proc)
    return Result(argv, proc.returncode, out.decode(errors="replace"),
                  err.decode(errors="replace"), time.monotonic() - start, timed_out)


def stop(proc):
    """Ctrl-C three times (stallscope forwards each to its job's process group, the third as
    SIGKILL), then SIGKILL to the command's own group. Returns its (stdout, stderr)."""
    for sig, wait_s in ((signal.SIGINT, 10), (signal.SIGINT, 3), (signal.SIGINT, 3),
                        (signal.SIGKILL, 5)):
        try:
            if sig == signal.SIGKILL:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except OSError:
            pass
        try:
            return proc.communicate(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    proc.wait()  # something it started still holds the pipes: give up on the rest of its output
    return b"", b"(output lost: a process it started still holds its stdout)\n"


class Session:
    """Runs the steps within a time budget and saves each command's output in `out`."""

    def __init__(self, out, budget_s, start=None):
        self.out = out
        self.start = time.monotonic() if start is None else start
        self.deadline = self.start + budget_s
        self.count = 0

    def save(self, name, result):
        self.count += 1
        base = os.path.join(self.out, "%02d-%s" % (self.count, name))
        with open(base + ".cmd", "w") as f:
            f.write("%s\n# exit %s after %.1f s%s\n" % (
                shlex.join(result.argv), result.rc, result.seconds,
                " (timed out)" if result.timed_out else ""))
        for ext, text in ((".stdout", result.out), (".stderr", result.err)):
            with open(base + ext, "w") as f:
                f.write(text)

    def run(self, name, argv, timeout_s):
        left = self.deadline - time.monotonic()
        if left < 5:
            return None
        shown = ["<script>" if "\n" in a else a for a in argv]  # the burn's code: see .cmd
        say("[%3.0f s] %s" % (time.monotonic() - self.start, shlex.join(shown)))
        result = run_command(argv, min(timeout_s, left))
        self.save(name, result)
        return result


def say(text):
    print(text, file=sys.stderr, flush=True)


def not_run(what, expected):
    return check(what, expected, "not run: the check's time budget was spent", False)


def failed(what, expected, result):
    if result is None:
        return not_run(what, expected)
    tail = (result.err.strip().splitlines() or [""])[-1][:160]
    return check(what, expected, "exit %s%s: %s" % (
        result.rc, " (timed out)" if result.timed_out else "", tail), False)


# ------------------------------------------------------------------------------------------------
# The steps
# ------------------------------------------------------------------------------------------------

def step_record(s, bin_, python, quick):
    """Idle first (nothing of ours on the GPU yet), then a matmul burn followed by record."""
    rows = []
    idle = os.path.join(s.out, "record-idle.jsonl")
    r = s.run("record-idle", [bin_, "record", "-i", "100ms", "--duration",
                              "3s" if quick else "5s", "--force", "-o", idle], 30)
    if r is None or r.rc != 0:
        rows.append(failed("record: utilization while idle", "< 10%", r))
    else:
        rows.append(idle_util_row(read_jsonl(idle)[1]))

    burn = os.path.join(s.out, "record-burn.jsonl")
    window_path = os.path.join(s.out, "burn-window.json")
    seconds = 6 if quick else 12
    r = s.run("record-burn", [bin_, "record", "-i", "100ms", "--force", "-o", burn, "--", python,
                              "-c",
                              BURN, str(seconds), window_path], seconds + 120)
    expected = "busiest GPU mean > %.0f%%" % BURN_MIN_UTIL_PCT
    if r is None or r.rc != 0 or not os.path.exists(window_path):
        rows += [failed("record: utilization during a matmul burn", expected, r),
                 failed("record: per-process GPU memory", "the burn's pid", r)]
        return rows
    with open(window_path) as f:
        window = json.load(f)
    header, samples = read_jsonl(burn)
    rows.append(interval_row(samples))
    rows.append(burn_util_row(in_window(samples, window["begin_ns"] + RAMP_NS,
                                        window["end_ns"])))
    rows.append(job_pid_row(samples, header.get("root_pid") or window["pid"]))
    return rows


def step_runs(s, bin_, python, quick, scratch):
    rows = []
    train = os.path.join(ROOT, "examples", "train.py")
    for situation, expected, extra, steps, quick_steps in SITUATIONS:
        run_dir = os.path.join(s.out, "run-" + situation)
        argv = [bin_, "run", "--force", "--out", run_dir, "-i", "200ms", "--quiet", "--", python,
                train,
                "--situation", situation, "--device", "cuda",
                "--steps", str(quick_steps if quick else steps),
                "--out-dir", os.path.join(scratch, situation),
                "--data-dir", os.path.join(scratch, "data")] + extra
        r = s.run("run-" + situation, argv, 120 if quick else 180)
        report_path = os.path.join(run_dir, "report.json")
        if r is None or not os.path.exists(report_path):
            rows.append(failed("run %s (--device cuda)" % situation, expected, r))
            if situation == "compute":
                rows.append(failed("run compute: GPU-side phase times", "GPU time > 0", r))
            continue
        with open(report_path) as f:
            report = json.load(f)
        rows.append(verdict_row(situation, expected, report, r.rc,
                                need_sure=situation in SURE_SITUATIONS))
        if situation == "compute":
            rows.append(gpu_phase_row(report))
    return rows


def step_trace(s, bin_, python, quick, scratch):
    prof = os.path.join(s.out, "profile")
    extra = SITUATIONS[0][2]
    r = s.run("profile", [python, os.path.join(ROOT, "examples", "train.py"), "--situation",
                          "compute", "--device", "cuda", "--steps", "14", "--profile", prof,
                          "--profile-steps", "10", "--print-every", "0",
                          "--out-dir", os.path.join(scratch, "profile")] + extra, 180)
    trace_file = os.path.join(prof, "trace.json")
    if r is None or r.rc != 0 or not os.path.exists(trace_file):
        return [failed("trace: a torch.profiler CUDA trace", "recorded with --profile", r)]
    r = s.run("trace", [bin_, "trace", "--json", trace_file], 120)
    doc = r.json() if r is not None else None
    if doc is None:
        return [failed("trace: a torch.profiler CUDA trace", "trace --json output", r)]
    return trace_rows(doc)


def step_doctor(s, bin_, python):
    # Without the subcommand, CLI11 answers `doctor --help` with the main help (exit 0).
    probe = run_command([bin_, "doctor", "--help"], 30)
    if probe.rc != 0 or "stallscope doctor" not in probe.out:
        return [Row("doctor", "exit 0, no check fails", "doctor not in this build", "SKIP")]
    argv = [bin_, "doctor", "--json"]
    if "--python" in probe.out:
        argv += ["--python", python]
    r = s.run("doctor", argv, 120)
    if r is None:
        return [not_run("doctor", "exit 0, no check fails")]
    return [doctor_row(r.rc, r.json())]


def default_stallscope():
    for candidate in (os.path.join(HERE, "stallscope"),  # the bundle's bin/
                      os.path.join(ROOT, "build", "stallscope")):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.join(ROOT, "build", "stallscope")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Exit status: 0 OK, 1 a row failed, 2 cannot run, "
                                       "3 no NVIDIA GPU.")
    p.add_argument("--stallscope", default=None,
                   help="the binary (default: next to this script, else build/stallscope)")
    p.add_argument("--python", default="python3", help="a Python with CUDA PyTorch (python3)")
    p.add_argument("--out", default="gpu-check-results",
                   help="where outputs and table.md go (gpu-check-results)")
    p.add_argument("--quick", action="store_true", help="shorter runs (about half the time)")
    return p.parse_args(argv)


def gate(bin_, python):
    """(exit code or None, message, probes): whether there is a GPU to check, running nothing
    GPU-specific."""
    version = run_command([bin_, "--version"], 30)
    if version.rc != 0:
        return EXIT_SETUP, "cannot run %s: %s" % (bin_, (version.err or version.out).strip()), {}
    top = run_command([bin_, "top", "--once", "--json"], 60)
    doc = top.json()
    if doc is None:
        return EXIT_SETUP, "`stallscope top --once --json` failed (exit %s): %s" % (
            top.rc, top.err.strip()[-300:]), {}
    header = doc.get("header", {})
    gpus = header.get("gpus") or []
    probes = {"version": version, "top": top, "top_doc": doc}
    if header.get("gpu_backend") != "nvml" or not gpus:
        note = header.get("gpu_note") or "NVML loaded but lists no GPU"
        if note.startswith("no NVIDIA GPU: "):  # stallscope's own note says it already
            note = note[len("no NVIDIA GPU: "):]
        return EXIT_NO_GPU, "no NVIDIA GPU: %s" % note, probes
    torch = run_command([python, "-c", TORCH_PROBE], 180)
    info = torch.json() if torch.rc == 0 else None
    if info is None or "error" in info:
        return EXIT_SETUP, "%s cannot import torch: %s" % (
            python, info["error"] if info else (torch.err.strip()[-300:] or torch.rc)), probes
    probes["torch"], probes["torch_info"] = torch, info
    if not info.get("available"):
        return EXIT_NO_GPU, ("no NVIDIA GPU: torch %s (CUDA %s) in %s reports "
                             "torch.cuda.is_available() is False" % (
                                 info.get("torch"), info.get("cuda"), info.get("executable"))
                             ), probes
    return None, "", probes


def environment(bin_, probes, quick):
    header = probes["top_doc"].get("header", {})
    info = probes["torch_info"]
    smi = run_command(["nvidia-smi"], 30) if shutil.which("nvidia-smi") else None
    driver_cuda = "n/a (no nvidia-smi)"
    if smi is not None and smi.rc == 0:
        for word in smi.out.split("CUDA Version:")[1:2]:
            driver_cuda = word.split()[0]
    gpus = header.get("gpus") or []
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": "%s, %s CPUs, %s" % (header.get("hostname"), header.get("cpu_count"),
                                         platform.platform()),
        "GPU": ", ".join("%s: %s" % (g.get("gpu_index"), g.get("gpu_name")) for g in gpus),
        "driver / CUDA": "%s / driver CUDA %s, torch built for CUDA %s" % (
            header.get("driver_version"), driver_cuda, info.get("cuda")),
        "torch / Python": "%s / %s %s (%s)" % (info.get("torch"), info.get("implementation"),
                                               info.get("python"), info.get("executable")),
        "stallscope": "%s (%s)" % (probes["version"].out.strip(), bin_),
        "mode": "--quick" if quick else "full",
    }


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    start = time.monotonic()  # the time budget counts from here: the gate's import torch too
    bin_ = os.path.abspath(args.stallscope or default_stallscope())
    python = shutil.which(args.python) or args.python
    code, message, probes = gate(bin_, python)
    if code is not None:
        print("stallscope gpu-check: %s" % message, flush=True)
        if code == EXIT_NO_GPU:
            print("stallscope gpu-check: nothing GPU-specific was run (exit %d)" % code)
        return code

    os.makedirs(args.out, exist_ok=True)
    s = Session(os.path.abspath(args.out), 270 if args.quick else 540, start)
    for name in ("version", "top"):
        s.save(name, probes[name])
    s.save("torch", probes["torch"])
    env = environment(bin_, probes, args.quick)
    rows = top_rows(probes["top_doc"])
    with open(os.path.join(s.out, "top.txt"), "w") as f:
        f.write(run_command([bin_, "top", "--once"], 60).out)
    scratch = tempfile.mkdtemp(prefix="stallscope-gpu-check.")
    try:
        rows += step_record(s, bin_, python, args.quick)
        rows += step_runs(s, bin_, python, args.quick, scratch)
        rows += step_trace(s, bin_, python, args.quick, scratch)
        rows += step_doctor(s, bin_, python)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    env["took"] = "%.0f s" % (time.monotonic() - s.start)

    with open(os.path.join(s.out, "table.md"), "w") as f:
        f.write(markdown(env, rows))
    with open(os.path.join(s.out, "result.json"), "w") as f:
        json.dump({"environment": env, "rows": [r.to_json() for r in rows]}, f, indent=1)
    print("\n".join("%s: %s" % kv for kv in env.items()))
    print()
    print(text_table(rows))
    fails = sum(r.status == "FAIL" for r in rows)
    print("\n%d rows: %d OK, %d FAIL, %d SKIP; outputs and table.md in %s" % (
        len(rows), sum(r.status == "OK" for r in rows), fails,
        sum(r.status == "SKIP" for r in rows), s.out))
    return EXIT_FAIL if fails else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
