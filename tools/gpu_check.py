#!/usr/bin/env python3
"""stallscope's GPU check: runs stallscope on a machine with an NVIDIA GPU and a CUDA PyTorch,
checks each result against what it should be, and prints an expected/got table.

    python3 tools/gpu_check.py [--stallscope PATH] [--python PATH] [--nvml-cost PATH]
                               [--out DIR] [--quick]
    make gpu-check GPU_CHECK_FLAGS="--quick"            # the same, from the repo
    bin/stallscope-gpu-check --quick                     # the same, from the bundle (make dist)

What it runs (README "GPU check"), each command with a time limit, in about 3 minutes (about
2 with --quick), at most 9 (4.5): the budget, past which no command starts and a running one is
stopped:
  top --once --json      NVML names, memory, power, clocks, temperature, processes
  record -i 100ms        20 s (10 with --quick) while the GPU is idle (utilization < 10%), side by
                         side with nvidia-smi polling its six fields every 100 ms: record's CPU at
                         most 2x nvidia-smi's (issue 28); the header's GPM flag (true on Hopper
                         and later)
  nvml_cost              bin/stallscope-nvml-cost (bench/nvml_cost.c): NVML's cost per call on
                         this driver, the table in table.md, beside the costs record measured
  record -i 100ms        following a bf16 matmul burn that it starts itself (> 80%; the burn's
                         PID in the per-process memory; GPM every 500 ms: SM active > 80% and
                         tensor activity > 30% over the windows inside the burn)
  run                    examples/train.py --device cuda with the presets compute, data_cpu,
                         logging and periodic: the verdict each is built to produce (compute: a
                         sure one, from a long enough steady state), the report's start-up line,
                         GPU-side phase times where this build records them, the monitor's CPU
  trace --json           a torch.profiler CUDA trace of examples/train.py recorded here
  doctor --json          where this build has `doctor`

Where the time goes, --quick (full) on an H100, estimated from the run of 2026-11-26 (107 s
with --quick; its .cmd files) and the presets since: the gate's `import torch` 5 s, record
beside nvidia-smi 10 s (20 s), nvml_cost 3 s (200 calls of each: ~1.8 s of GetTotalEnergy,
GetSamples and GetProcessUtilization, 0.4 s of PcieThroughput), the burn with its CUDA start-up
12 s (18 s), the four runs 75 s (100 s), the profile 20 s, doctor 5 s: about 130 s with --quick,
170 s without.

Every command's stdout/stderr (and the recordings, run directories, trace) are saved in --out,
with table.md (the environment, the table and NVML's cost per call, ready for
docs/gpu-check.md) and result.json.

Row status: OK, FAIL, SKIP (a feature not in this build, or a row that does not apply to this
GPU: GPM before Hopper), INFO (a measurement reported, not judged).
Exit status: 0 every row OK, SKIP or INFO; 1 a row FAILed;
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
import re
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

# Issue 28, "GPU check". record -i 100ms beside nvidia-smi polling the same six fields at 10 Hz
# for the same seconds (GPU idle): record's CPU at most SMI_MAX_RATIO times nvidia-smi's. On the
# H100 of 2026-11-26 record used 15.4% of a core and nvidia-smi 0.198% (shared/gpu README 3).
SMI_MAX_RATIO = 2.0
SIDE_BY_SIDE_S = {True: 10, False: 20}  # --quick: seconds
SMI_FIELDS = ("utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu,"
              "clocks_event_reasons.active")
SMI_FIELDS_OLD = SMI_FIELDS.replace("clocks_event_reasons", "clocks_throttle_reasons")  # < 535
# GPM during a bf16 matmul burn: the H100 measured SM active 96% and tensor 93% (issue 28).
GPM_MIN_SM_ACTIVE_PCT = 80.0
GPM_MIN_TENSOR_PCT = 30.0
GPM_INTERVAL = "500ms"
# GPUs with GPM (Hopper and later; NVML "GPM" section): their names as NVML gives them
# ("NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB", "NVIDIA B200").
GPM_GPUS = ("H100", "H200", "H800", "GH200", "B100", "B200", "GB200")
GPM_GPU_NAME = re.compile(r"(?<![A-Z0-9])(%s)(?![0-9])" % "|".join(GPM_GPUS))

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

# A matmul burn: 8192^2 bf16 matmuls (~1.1 TFLOP each, on the tensor cores: GPM's tensor
# activity) in rounds of 10, until argv[1] seconds have passed; writes its pid, dtype and burn
# window (CLOCK_MONOTONIC ns, the clock of ts_ns) to argv[2]. fp16 where torch says the GPU has
# no bf16.
BURN = r"""
import json, os, sys, time, torch
seconds, window_path = float(sys.argv[1]), sys.argv[2]
dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
b = torch.randn(8192, 8192, device="cuda", dtype=dtype)
(a @ b).sum().item()
begin, rounds = time.monotonic_ns(), 0
while time.monotonic_ns() - begin < seconds * 1e9:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    rounds += 1
end = time.monotonic_ns()
with open(window_path, "w") as f:
    json.dump({"pid": os.getpid(), "begin_ns": begin, "end_ns": end, "matmuls": 10 * rounds,
               "dtype": str(dtype).replace("torch.", "")}, f)
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
    """One line of the table. status: OK, FAIL, SKIP (a feature this build does not have, or a
    row that does not apply to this GPU), or INFO (a measurement, not judged)."""

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


def median_spacing_ms(samples):
    """(median ms between consecutive samples or None, number of samples)."""
    ts = [s["ts_ns"] for s in samples if _num(s.get("ts_ns"))]
    gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
    return (statistics.median(gaps) if gaps else None), len(ts)


def interval_row(samples):
    median, n = median_spacing_ms(samples)
    return check("record -i 100ms: sample spacing",
                 "median %.0f-%.0f ms" % INTERVAL_MS,
                 "median %.1f ms over %d samples" % (median, n) if median else "%d samples" % n,
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


def _pct(x):
    return "n/a" if x is None else "%.2f%%" % x if x < 1 else "%.1f%%" % x


def cpu_pct(cpu_s, age_s):
    """CPU seconds over seconds of life, in percent of one core (None without a life)."""
    return 100.0 * cpu_s / age_s if _num(cpu_s) and _num(age_s) and age_s > 0 else None


def _cpu_text(m):
    return "%.2f s CPU over %.1f s = %s of a core" % (m["cpu_s"], m["age_s"],
                                                       _pct(cpu_pct(m["cpu_s"], m["age_s"])))


def sampler_cpu_row(record, smi, seconds, spacing_ms=None):
    """record -i 100ms and nvidia-smi polling its six fields every 100 ms, side by side for
    `seconds` with the GPU idle (issue 28: record's CPU at most 2x nvidia-smi's). record, smi:
    {"cpu_s", "age_s", "rc"} (a process's CPU over its age); smi None: no nvidia-smi;
    smi {"error": text}: nvidia-smi could not poll these fields."""
    what = "record -i 100ms: CPU beside nvidia-smi"
    expected = "record's CPU <= %gx nvidia-smi's -lms 100 (GPU idle)" % SMI_MAX_RATIO
    spacing = "; median spacing %.1f ms" % spacing_ms if spacing_ms is not None else ""
    if not record or record.get("rc") != 0 or cpu_pct(record.get("cpu_s"),
                                                      record.get("age_s")) is None:
        return check(what, expected, "record exit %s" % (record or {}).get("rc"), False)
    rec = "record " + _cpu_text(record)
    if smi is None:
        return Row(what, expected, "no nvidia-smi; " + rec + spacing, "SKIP")
    if smi.get("error"):
        return Row(what, expected, "nvidia-smi: %s; %s%s" % (smi["error"], rec, spacing), "SKIP")
    smi_pct = cpu_pct(smi.get("cpu_s"), smi.get("age_s"))
    if smi_pct is None or smi["age_s"] < seconds / 2:
        return Row(what, expected, "nvidia-smi exited after %.1f s (exit %s); %s%s" % (
            smi.get("age_s") or 0, smi.get("rc"), rec, spacing), "SKIP")
    ratio = cpu_pct(record["cpu_s"], record["age_s"]) / smi_pct if smi_pct > 0 else float("inf")
    return check(what, expected, "%s; nvidia-smi %s; %.1fx%s" % (rec, _cpu_text(smi), ratio,
                                                                  spacing),
                 ratio <= SMI_MAX_RATIO)


def has_gpm_hardware(name):
    """Whether NVML's name of a GPU is Hopper or later (GPM_GPUS)."""
    return bool(GPM_GPU_NAME.search(str(name or "").upper()))


def gpm_present_row(header):
    """The recording header's per-GPU `gpm`: true on every Hopper-or-later GPU (not under MIG,
    where NVML needs per-instance GPM calls stallscope does not make); other GPUs are noted."""
    what, expected = "record: GPM on Hopper and later", "header gpus[].gpm true on %s" % (
        "/".join(GPM_GPUS[:6]))
    gpus = header.get("gpus") or []
    if not gpus:
        return check(what, expected, "no GPU in the recording's header", False)
    if not any("gpm" in g for g in gpus):
        return Row(what, expected, "not in this build (no gpm in the header)", "SKIP")
    parts, hopper, bad = [], 0, 0
    for g in gpus:
        label = "GPU %s %s" % (g.get("gpu_index"), g.get("gpu_name"))
        note = g.get("gpm_note") or "no note"
        if not has_gpm_hardware(g.get("gpu_name")):
            parts.append("%s: not Hopper: %s" % (label, note))
        elif g.get("mig_mode") == "enabled":
            parts.append("%s: MIG enabled: %s" % (label, note))
        elif g.get("gpm") is True:
            hopper += 1
            parts.append("%s: gpm true" % label)
        else:
            bad += 1
            parts.append("%s: gpm %s: %s" % (label, json.dumps(g.get("gpm")), note))
    status = "FAIL" if bad else "OK" if hopper else "SKIP"
    return Row(what, expected, "; ".join(parts), status)


def gpm_windows(samples, begin_ns, end_ns):
    """{GPU index: [gpm object]} of the GPM windows wholly inside [begin_ns, end_ns]: a sample's
    `gpm` covers [ts_ns - window_s, ts_ns] (ts_ns: the monotonic clock of burn-window.json)."""
    found = {}
    for s in samples:
        ts = s.get("ts_ns")
        for g in s.get("multi_gpu_data") or []:
            gpm = g.get("gpm")
            if not isinstance(gpm, dict) or not _num(ts) or not _num(gpm.get("window_s")):
                continue
            if ts - gpm["window_s"] * 1e9 >= begin_ns and ts <= end_ns:
                found.setdefault(g.get("gpu_index"), []).append(gpm)
    return found


def _mean_of(objs, key):
    values = [o[key] for o in objs if _num(o.get(key))]
    return statistics.mean(values) if values else None


def gpm_burn_row(header, samples, window):
    """GPM during the bf16 matmul burn: over the windows inside it, on the GPU with the highest
    mean SM active, SM active > 80% and tensor activity > 30%."""
    what = "record: SM active and tensor during a bf16 matmul burn"
    expected = "GPM windows inside the burn: mean SM active > %.0f%%, tensor > %.0f%%" % (
        GPM_MIN_SM_ACTIVE_PCT, GPM_MIN_TENSOR_PCT)
    dtype = window.get("dtype", "bfloat16")
    burn = "" if dtype == "bfloat16" else " (a %s burn: torch says no bf16)" % dtype
    gpus = header.get("gpus") or []
    if not any("gpm" in g for g in gpus):
        return Row(what, expected, "not in this build (no gpm in the header)", "SKIP")
    hopper = [g for g in gpus if has_gpm_hardware(g.get("gpu_name"))]
    if not hopper:
        return Row(what, expected, "; ".join("GPU %s %s: not Hopper: %s" % (
            g.get("gpu_index"), g.get("gpu_name"), g.get("gpm_note") or "no note")
            for g in gpus), "SKIP")
    found = gpm_windows(samples, window["begin_ns"], window["end_ns"])
    if not found:
        return check(what, expected, "no GPM window inside the burn (%.1f s); header: %s" % (
            (window["end_ns"] - window["begin_ns"]) / 1e9, "; ".join(
                "GPU %s gpm %s %s" % (g.get("gpu_index"), json.dumps(g.get("gpm")),
                                      g.get("gpm_note") or "") for g in gpus)), False)
    index, windows = max(found.items(),
                         key=lambda kv: _mean_of(kv[1], "sm_active_pct") or -1.0)
    sm, tensor = _mean_of(windows, "sm_active_pct"), _mean_of(windows, "tensor_active_pct")
    got = "GPU %s: %d windows of %.2f s: SM active %s, tensor %s, DRAM %s, occupancy %s%s" % (
        index, len(windows), _mean_of(windows, "window_s"), _pct(sm), _pct(tensor),
        _pct(_mean_of(windows, "dram_active_pct")), _pct(_mean_of(windows, "sm_occupancy_pct")),
        burn)
    return check(what, expected, got, sm is not None and tensor is not None
                 and sm > GPM_MIN_SM_ACTIVE_PCT and tensor > GPM_MIN_TENSOR_PCT)


# What each tier of the recording header's gpu_polling calls per GPU (src/gpu/nvml_backend.cc:
# Probe times each tier's round), as the `call` names of bench/nvml_cost.c. "GpmMetricsGet(" is
# a prefix: the line of its later calls, not the first.
TIER_CALLS = {
    "tick": ["GetMemoryInfo", "GetUtilizationRates", "GetPowerUsage", "GetEnforcedPowerLimit",
             "GetTemperature", "GetClockInfo(SM)", "GetClockInfo(MEM)",
             "GetCurrentClocksEventReasons", "GetComputeRunningProcesses_v3",
             "GetGraphicsRunningProcesses_v3"],
    "util_buffer": ["GetSamples(GPU_UTILIZATION, lastSeen 0)"],
    "energy": ["GetTotalEnergyConsumption"],
    "process_util": ["GetProcessUtilization(lastSeen 0)"],
    "slow": ["GetCurrPcieLinkGeneration", "GetCurrPcieLinkWidth",
             "GetTotalEccErrors(CORRECTED, VOLATILE)", "GetTotalEccErrors(CORRECTED, VOLATILE)"],
    "gpm": ["GpmSampleGet", "GpmMetricsGet("],
}


def parse_nvml_cost(text):
    """bench/nvml_cost.c's JSON lines ({"call", "calls", "wall_us", "cpu_us", "rc", ...});
    lines that are not such an object are skipped."""
    lines = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("call"), str):
            lines.append(obj)
    return lines


def _cost_line(lines, name):
    for obj in lines:
        call = obj.get("call", "")
        if call == name or (name.endswith("(") and call.startswith(name) and "first" not in call):
            return obj
    return None


def _us(x):
    return "n/a" if not _num(x) else "%.0f" % x if x >= 100 else "%.1f" % x


def nvml_cost_row(exit_code, lines):
    """The per-call cost table of issue 28 re-measured: nvml_cost ran on GPU 0 and timed calls."""
    what, expected = "NVML per-call cost (nvml_cost)", "exit 0, nvmlInit and the calls timed"
    timed = [o for o in lines if o.get("call") != "nvmlInit_v2" and (o.get("calls") or 0) > 0]
    init = _cost_line(lines, "nvmlInit_v2") or {}
    if not lines:
        return check(what, expected, "exit %s, no output" % exit_code, False)
    costly = sorted((o for o in timed if _num(o.get("cpu_us")) and _num(o.get("wall_us"))),
                    key=lambda o: -max(o["cpu_us"], o["wall_us"]))
    shown = ["%s %s%s" % (o["call"], _us(o["cpu_us"]),
                          " (wall %s)" % _us(o["wall_us"]) if o["wall_us"] > 2 * o["cpu_us"] + 50
                          else "") for o in costly[:6]]
    rest = costly[6:]
    got = "%s, driver %s; nvmlInit %s us%s; CPU us per call: %s%s; table in table.md" % (
        init.get("gpu"), init.get("driver"), _us(init.get("cpu_us")),
        "" if init.get("rc") == 0 else " (rc %s)" % init.get("rc"), ", ".join(shown),
        ", %d more <= %s" % (len(rest), _us(max(max(o["cpu_us"], o["wall_us"]) for o in rest)))
        if rest else "")
    if exit_code != 0:
        got = "exit %s; %s" % (exit_code, got)
    return check(what, expected, got, exit_code == 0 and init.get("rc") == 0 and bool(timed))


def nvml_cost_table(lines):
    """(header cells, rows) for table.md: nvml_cost's lines as they came."""
    rows = [[o.get("call"), o.get("calls"), _us(o.get("wall_us")), _us(o.get("cpu_us")),
             o.get("rc") if o.get("rc") is not None else o.get("note", "n/a")] for o in lines]
    return ["call", "calls", "wall us", "CPU us", "rc"], rows


def tier_costs_row(header, lines):
    """What record measured each tier's round to cost per GPU (its header's gpu_polling, CPU µs,
    one round when it opened the GPUs) beside the sum of nvml_cost's means for the same calls."""
    what = "record's tier costs vs nvml_cost"
    expected = "CPU us per GPU per round: header gpu_polling / nvml_cost (informative)"
    tiers = (header.get("gpu_polling") or {}).get("tiers")
    if not isinstance(tiers, list):
        return Row(what, expected, "not in this build (no gpu_polling in the header)", "SKIP")
    if not lines:
        return Row(what, expected, "no nvml_cost table", "SKIP")
    parts = []
    for tier in tiers:
        name = tier.get("tier")
        costs = [_cost_line(lines, c) for c in TIER_CALLS.get(name, [])]
        ours = (sum(c["cpu_us"] for c in costs) if costs and all(
            c is not None and _num(c.get("cpu_us")) for c in costs) else None)
        parts.append("%s %s / %s every %s s" % (name, _us(tier.get("cost_us_per_gpu")), _us(ours),
                                                 tier.get("period_s")))
    return Row(what, expected, "; ".join(parts), "INFO")


def monitor_cpu_row(report):
    """`run`'s own CPU (report.json "overhead": the monitor's CPU seconds) over the job's wall."""
    what, expected = "run compute: the monitor's CPU", "report.json overhead (informative)"
    overhead = report.get("overhead")
    if not isinstance(overhead, dict) or not _num(overhead.get("monitor_cpu_s")):
        return Row(what, expected, "not in this build (no overhead.monitor_cpu_s)", "SKIP")
    cpu, wall = overhead["monitor_cpu_s"], (report.get("job") or {}).get("wall_s")
    got = "%.2f s CPU" % cpu
    if cpu_pct(cpu, wall) is not None:
        got += " over %.1f s = %s of a core" % (wall, _pct(cpu_pct(cpu, wall)))
    if _num(overhead.get("monitor_share")):
        got += ", %.1f%% of the job's %.1f s CPU" % (100 * overhead["monitor_share"],
                                                    overhead.get("job_cpu_s") or 0)
    return Row(what, expected, got, "INFO")


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


def markdown(env, rows, tables=()):
    """The environment and the table, for docs/gpu-check.md; then each of `tables`:
    (title, header cells, rows of cells)."""
    lines = ["## GPU check, %s" % env.get("date"), "", "| | |", "|---|---|"]
    lines += ["| %s | %s |" % (_cell(k), _cell(v)) for k, v in env.items() if k != "date"]
    lines += ["", "| what | expected | got | status |", "|---|---|---|---|"]
    lines += ["| %s | %s | %s | %s |" % tuple(_cell(x) for x in
                                             (r.what, r.expected, r.got, r.status)) for r in rows]
    for title, head, body in tables:
        lines += ["", title, "", "| %s |" % " | ".join(_cell(h) for h in head),
                  "|%s" % ("---|" * len(head))]
        lines += ["| %s |" % " | ".join(_cell(c) for c in row) for row in body]
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

    def left(self):
        return self.deadline - time.monotonic()

    def base(self, name):
        """The next command's path without extension: --out/NN-name."""
        self.count += 1
        return os.path.join(self.out, "%02d-%s" % (self.count, name))

    def save(self, name, result):
        base = self.base(name)
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


class Timed:
    """A command run with its own CPU time: the rusage of the reaped child (ru_utime + ru_stime,
    the utime + stime of /proc/PID/stat, as the H100 README's section 3 read them, but to the µs:
    /proc counts 10 ms ticks, and nvidia-smi uses 2-4 of them in 10-20 s) over its age (start to
    exit). stdout and stderr go to base.stdout and base.stderr."""

    def __init__(self, argv, base):
        self.argv, self.base = argv, base
        self.rc = self.cpu_s = self.age_s = None
        self.interrupted = False
        self.start = time.monotonic()
        with open(base + ".stdout", "wb") as out, open(base + ".stderr", "wb") as err:
            try:
                self.proc = subprocess.Popen(argv, stdout=out, stderr=err,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                err.write(("%s: %s\n" % (argv[0], e)).encode())
                self.proc, self.rc, self.cpu_s, self.age_s = None, 127, 0.0, 0.0

    def age(self):
        return time.monotonic() - self.start

    def poll(self):
        """True once it has exited (and been reaped here, with its rusage)."""
        if self.rc is not None:
            return True
        pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.age_s, self.cpu_s = self.age(), usage.ru_utime + usage.ru_stime
        self.rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self.proc.returncode = self.rc  # reaped: Popen must not wait for it
        return True

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except OSError:
            pass

    def measured(self):
        return {"cpu_s": self.cpu_s, "age_s": self.age_s, "rc": self.rc}

    def result(self):
        """As run_command's Result (stdout and stderr from their files)."""
        texts = []
        for ext in (".stdout", ".stderr"):
            with open(self.base + ext, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        return Result(self.argv, self.rc, texts[0], texts[1], self.age_s, self.interrupted)


def side_by_side(s, commands):
    """Runs commands [(name, argv, stop_after_s)] at once: each gets Ctrl-C at stop_after_s of
    age, SIGKILL 5 s later. Returns their Timed, each saved in --out."""
    say("[%3.0f s] side by side: %s" % (time.monotonic() - s.start,
                                       " & ".join(shlex.join(a) for _, a, _ in commands)))
    timed = [Timed(argv, s.base(name)) for name, argv, _ in commands]
    while not all(t.poll() for t in timed):
        for t, (_, _, stop_after) in zip(timed, commands):
            if t.rc is None and t.age() >= stop_after + 5:
                t.signal(signal.SIGKILL)
            elif t.rc is None and t.age() >= stop_after and not t.interrupted:
                t.signal(signal.SIGINT)
                t.interrupted = True
        time.sleep(0.05)
    for t in timed:
        with open(t.base + ".cmd", "w") as f:
            f.write("%s\n# exit %s after %.1f s%s; CPU %.3f s\n" % (
                shlex.join(t.argv), t.rc, t.age_s, " (stopped)" if t.interrupted else "",
                t.cpu_s))
    return timed


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

def nvidia_smi_query():
    """(argv polling issue 28's six fields, None) for this nvidia-smi (clocks_throttle_reasons
    before driver 535), (None, None) without nvidia-smi, (None, why) when it knows neither."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, None
    why = ""
    for fields in (SMI_FIELDS, SMI_FIELDS_OLD):
        r = run_command([smi, "--query-gpu=" + fields, "--format=csv,noheader"], 30)
        if r.rc == 0:
            return [smi, "--query-gpu=" + fields, "--format=csv"], None
        why = "exit %s: %s" % (r.rc, ((r.out + r.err).strip().splitlines() or [""])[-1][:120])
    return None, why


def step_idle(s, bin_, quick):
    """record -i 100ms with the GPU idle (nothing of ours on it yet), side by side with
    nvidia-smi -lms 100 for the same seconds. Returns (rows, the recording's header)."""
    seconds = SIDE_BY_SIDE_S[quick]
    idle = os.path.join(s.out, "record-idle.jsonl")
    names = [("record: utilization while idle", "< 10%"),
             ("record -i 100ms: CPU beside nvidia-smi", "<= %gx nvidia-smi's" % SMI_MAX_RATIO),
             ("record: GPM on Hopper and later", "header gpus[].gpm")]
    if s.left() < seconds + 40:
        return [not_run(what, expected) for what, expected in names], {}
    smi, smi_error = nvidia_smi_query()
    commands = [("record-idle", [bin_, "record", "-i", "100ms", "--duration", "%ds" % seconds,
                                 "--force", "-o", idle], seconds + 30)]
    if smi:
        commands.append(("nvidia-smi", smi + ["-lms", "100"], seconds))
    timed = side_by_side(s, commands)
    record = timed[0]
    if record.rc != 0 or not os.path.exists(idle):
        return [failed(what, expected, record.result()) for what, expected in names], {}
    header, samples = read_jsonl(idle)
    smi_measured = (timed[1].measured() if smi else
                    {"error": "knows neither clocks_event_reasons nor clocks_throttle_reasons "
                              "(%s)" % smi_error} if smi_error else None)
    return [idle_util_row(samples),
            sampler_cpu_row(record.measured(), smi_measured, seconds,
                            median_spacing_ms(samples)[0]),
            gpm_present_row(header)], header


def step_nvml_cost(s, cost_bin, header):
    """bench/nvml_cost.c on GPU 0 with the GPU idle. Returns (rows, its lines)."""
    what, expected = "NVML per-call cost (nvml_cost)", "exit 0, nvmlInit and the calls timed"
    if not cost_bin or not os.access(cost_bin, os.X_OK):
        return [Row(what, expected, "not in this build (no %s)" % cost_bin, "SKIP"),
                tier_costs_row(header, [])], []
    r = s.run("nvml-cost", [cost_bin], 120)
    if r is None:
        return [not_run(what, expected), tier_costs_row(header, [])], []
    lines = parse_nvml_cost(r.out)
    return [nvml_cost_row(r.rc, lines), tier_costs_row(header, lines)], lines


def step_burn(s, bin_, python, quick):
    """record following a bf16 matmul burn it starts itself, GPM every 500 ms."""
    rows = []
    burn = os.path.join(s.out, "record-burn.jsonl")
    window_path = os.path.join(s.out, "burn-window.json")
    seconds = 6 if quick else 12
    gpm = "--gpm-interval" in run_command([bin_, "record", "--help"], 30).out
    r = s.run("record-burn", [bin_, "record", "-i", "100ms"]
              + (["--gpm-interval", GPM_INTERVAL] if gpm else [])
              + ["--force", "-o", burn, "--", python, "-c", BURN, str(seconds), window_path],
              seconds + 120)
    expected = "busiest GPU mean > %.0f%%" % BURN_MIN_UTIL_PCT
    if r is None or r.rc != 0 or not os.path.exists(window_path):
        return [failed("record: utilization during a matmul burn", expected, r),
                failed("record: SM active and tensor during a bf16 matmul burn", "GPM", r),
                failed("record: per-process GPU memory", "the burn's pid", r)]
    with open(window_path) as f:
        window = json.load(f)
    header, samples = read_jsonl(burn)
    rows.append(interval_row(samples))
    rows.append(burn_util_row(in_window(samples, window["begin_ns"] + RAMP_NS,
                                        window["end_ns"])))
    if gpm:
        rows.append(gpm_burn_row(header, samples, window))
    else:
        rows.append(Row("record: SM active and tensor during a bf16 matmul burn", "GPM windows",
                        "not in this build (record has no --gpm-interval)", "SKIP"))
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
            rows.append(monitor_cpu_row(report))
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


def default_nvml_cost(bin_):
    """The bundle's bin/stallscope-nvml-cost, else the build's bench/nvml_cost beside the
    stallscope binary (None: neither)."""
    for candidate in (os.path.join(HERE, "stallscope-nvml-cost"),
                      os.path.join(os.path.dirname(bin_), "stallscope-nvml-cost"),
                      os.path.join(os.path.dirname(bin_), "bench", "nvml_cost")):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


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
    p.add_argument("--nvml-cost", default=None,
                   help="bench/nvml_cost.c's binary (default: bin/stallscope-nvml-cost next to "
                        "this script, else bench/nvml_cost beside the stallscope binary)")
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
    cost_lines = []
    try:
        idle_rows, idle_header = step_idle(s, bin_, args.quick)
        rows += idle_rows
        cost_rows, cost_lines = step_nvml_cost(
            s, os.path.abspath(args.nvml_cost) if args.nvml_cost else default_nvml_cost(bin_),
            idle_header)
        rows += cost_rows
        rows += step_burn(s, bin_, python, args.quick)
        rows += step_runs(s, bin_, python, args.quick, scratch)
        rows += step_trace(s, bin_, python, args.quick, scratch)
        rows += step_doctor(s, bin_, python)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    env["took"] = "%.0f s" % (time.monotonic() - s.start)

    tables = []
    if cost_lines:
        head, body = nvml_cost_table(cost_lines)
        tables.append(("NVML per call on GPU 0 (nvml_cost: mean of 200 calls, GPU idle)", head,
                       body))
    with open(os.path.join(s.out, "table.md"), "w") as f:
        f.write(markdown(env, rows, tables))
    with open(os.path.join(s.out, "result.json"), "w") as f:
        json.dump({"environment": env, "rows": [r.to_json() for r in rows],
                   "nvml_cost": cost_lines}, f, indent=1)
    print("\n".join("%s: %s" % kv for kv in env.items()))
    print()
    print(text_table(rows))
    fails = sum(r.status == "FAIL" for r in rows)
    print("\n%d rows: %d OK, %d FAIL, %d SKIP, %d INFO; outputs and table.md in %s" % (
        len(rows), sum(r.status == "OK" for r in rows), fails,
        sum(r.status == "SKIP" for r in rows), sum(r.status == "INFO" for r in rows), s.out))
    return EXIT_FAIL if fails else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
