"""Tests of tools/gpu_check.py without a GPU: its rows on the real output schemas (stallscope
against the fake NVML, a checked-in run directory, trace fixtures) and its exits before any GPU
work. Needs STALLSCOPE_BIN and FAKE_NVML_LIB (CTest sets them: tools/CMakeLists.txt)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gpu_check  # noqa: E402

BIN = os.environ.get("STALLSCOPE_BIN", os.path.join(REPO, "build", "stallscope"))
FAKE_NVML = os.environ.get("FAKE_NVML_LIB", "")
NO_NVML = "/nonexistent/libnvidia-ml.so.1"


def stallscope(args, nvml=NO_NVML, scenario="steady_1gpu.json"):
    env = dict(os.environ, STALLSCOPE_NVML_LIB=nvml,
               STALLSCOPE_FAKE_NVML_SCENARIO=os.path.join(REPO, "tests/data/nvml", scenario))
    out = subprocess.run([BIN] + args, env=env, stdout=subprocess.PIPE, timeout=120, check=True)
    return json.loads(out.stdout)


def sample(ts_ms, utils, processes=()):
    return {"type": "sample", "ts_ns": int(ts_ms * 1e6),
            "multi_gpu_data": [{"gpu_index": i, "utilization": u,
                                "processes": list(processes) if i == 0 else []}
                               for i, u in enumerate(utils)]}


def statuses(rows):
    return [r.status for r in rows]


class TopRows(unittest.TestCase):
    @unittest.skipUnless(FAKE_NVML, "FAKE_NVML_LIB not set")
    def test_every_row_passes_on_the_fake_h100(self):
        rows = gpu_check.top_rows(stallscope(["top", "--once", "--json"], nvml=FAKE_NVML))
        self.assertEqual(statuses(rows), ["OK"] * 5, [r.got for r in rows])
        self.assertIn("NVIDIA H100 80GB HBM3", rows[0].got)
        self.assertIn("650 of 700 W", rows[2].got)
        self.assertIn("2 processes", rows[4].got)

    def test_no_nvml_is_one_failed_row(self):
        rows = gpu_check.top_rows(stallscope(["top", "--once", "--json"]))
        self.assertEqual(statuses(rows), ["FAIL"])
        self.assertIn("backend none, 0 GPU", rows[0].got)

    def test_unsupported_metrics_fail_their_row(self):
        top = {"header": {"gpu_backend": "nvml"},
               "sample": {"multi_gpu_data": [{"gpu_index": 0, "gpu_name": "X",
                                              "memory_used_bytes": 1, "memory_total_bytes": 2,
                                              "power_mw": None, "power_limit_mw": 1,
                                              "sm_clock_mhz": 1, "mem_clock_mhz": 1,
                                              "temperature": 30, "processes": None}]}}
        self.assertEqual(statuses(gpu_check.top_rows(top)), ["OK", "OK", "FAIL", "OK", "FAIL"])


class RecordRows(unittest.TestCase):
    def test_utilization_of_the_busiest_gpu(self):
        busy = [sample(100 * i, [95, 0]) for i in range(10)]
        self.assertEqual(gpu_check.burn_util_row(busy).status, "OK")
        self.assertEqual(gpu_check.idle_util_row(busy).status, "FAIL")
        half = [sample(100 * i, [50]) for i in range(10)]
        self.assertEqual(gpu_check.burn_util_row(half).status, "FAIL")
        idle = [sample(100 * i, [2, 3]) for i in range(10)]
        self.assertEqual(gpu_check.idle_util_row(idle).status, "OK")

    def test_no_utilization_fails(self):
        row = gpu_check.idle_util_row([sample(0, [None])])
        self.assertEqual((row.status, row.got), ("FAIL", "no utilization samples"))

    def test_burn_window_drops_samples_outside(self):
        samples = [sample(100 * i, [0 if i < 5 else 99]) for i in range(20)]
        window = gpu_check.in_window(samples, int(500e6), int(1900e6))
        self.assertEqual(len(window), 15)
        self.assertEqual(gpu_check.burn_util_row(window).status, "OK")

    def test_sample_spacing(self):
        self.assertEqual(gpu_check.interval_row([sample(100 * i, [1]) for i in range(5)]).status,
                         "OK")
        self.assertEqual(gpu_check.interval_row([sample(500 * i, [1]) for i in range(5)]).status,
                         "FAIL")
        self.assertEqual(gpu_check.interval_row([sample(0, [1])]).status, "FAIL")

    def test_job_pid_in_per_process_memory(self):
        samples = [sample(0, [90], [{"pid": 77, "memory_used_bytes": 2**30}])]
        self.assertEqual(gpu_check.job_pid_row(samples, 77).status, "OK")
        row = gpu_check.job_pid_row(samples, 78)
        self.assertEqual(row.status, "FAIL")
        self.assertIn("pids seen: [77]", row.got)

    @unittest.skipUnless(FAKE_NVML, "FAKE_NVML_LIB not set")
    def test_a_real_recording_parses(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.jsonl")
            env = dict(os.environ, STALLSCOPE_NVML_LIB=FAKE_NVML,
                       STALLSCOPE_FAKE_NVML_SCENARIO=os.path.join(REPO, "tests/data/nvml",
                                                                  "processes.json"))
            subprocess.run([BIN, "record", "-i", "100ms", "--duration", "1s", "-o", path],
                           env=env, check=True, timeout=60, stderr=subprocess.DEVNULL)
            header, samples = gpu_check.read_jsonl(path)
        self.assertEqual(header.get("gpu_backend"), "nvml")
        self.assertEqual(gpu_check.interval_row(samples).status, "OK")
        self.assertEqual(gpu_check.job_pid_row(samples, 4242).status, "OK")


class RunAndTraceRows(unittest.TestCase):
    def test_verdict_of_a_checked_in_run(self):
        report = stallscope(["diagnose", "--json", os.path.join(REPO, "tests/data/runs/data_cpu")])
        row = gpu_check.verdict_row("data_cpu", "data_bound_cpu", report, 0)
        self.assertEqual(row.status, "OK", row.got)
        self.assertIn("data_loading", row.got)
        self.assertEqual(gpu_check.verdict_row("compute", "gpu_bound", report, 0).status, "FAIL")
        self.assertEqual(gpu_check.verdict_row("data_cpu", "data_bound_cpu", report, 1).status,
                         "FAIL")

    def test_start_up_line_in_every_run_row(self):
        report = stallscope(["diagnose", "--json", os.path.join(REPO, "tests/data/runs/data_cpu")])
        row = gpu_check.verdict_row("data_cpu", "data_bound_cpu", report, 0)
        if "life" in report:  # this build writes the start-up line
            self.assertIn(report["life"]["text"], row.got)
            self.assertIsInstance(report["life"]["sure"], bool)
        # an older stallscope without "life": the row still works and says so
        old = dict(report)
        old.pop("life", None)
        for need_sure in (False, True):
            row = gpu_check.verdict_row("data_cpu", "data_bound_cpu", old, 0, need_sure)
            self.assertEqual(row.status, "OK", row.got)
            self.assertIn('no start-up line (this stallscope reports no "life")', row.got)

    def test_compute_fails_without_a_sure_steady_state(self):
        report = {"verdict": {"principal": {"class": "gpu_bound", "confidence": 0.9,
                                            "cost_fraction": 0.9}},
                  "steps": {"count": 300, "per_second": 25.0},
                  "phases": [{"name": "forward_pass", "rank": 0, "share": 0.5}],
                  "life": {"text": "start-up 18.4 s (first step after 12.4 s; first batch 5.6 s)"
                                   " · warm-up 0.4 s over 9 steps · steady 1.1 s over 141 steps",
                           "sure": False, "startup_s": 18.4, "warmup_s": 0.4,
                           "warmup_steps": 9, "steady_s": 1.1, "steady_steps": 141,
                           "tail_s": 0.2}}
        row = gpu_check.verdict_row("compute", "gpu_bound", report, 0, need_sure=True)
        self.assertEqual(row.status, "FAIL")
        self.assertTrue(row.got.startswith("steady state too short for a sure verdict; "),
                        row.got)
        self.assertIn("· steady 1.1 s over 141 steps", row.got)
        # the same report passes where a sure verdict is not asked for
        self.assertEqual(gpu_check.verdict_row("compute", "gpu_bound", report, 0).status, "OK")
        report["life"]["sure"] = True
        row = gpu_check.verdict_row("compute", "gpu_bound", report, 0, need_sure=True)
        self.assertEqual(row.status, "OK", row.got)
        self.assertEqual(row.expected, "gpu_bound, sure (a long enough steady state)")

    def test_gpu_presets(self):
        """compute and periodic are GPU work on a GPU (issue 26): a CNN, loader workers, and
        for periodic at least 4 side-work occurrences inside the steps of --quick."""
        presets = {s[0]: s for s in gpu_check.SITUATIONS}
        self.assertEqual(gpu_check.SURE_SITUATIONS, ("compute",))
        for name in ("compute", "periodic"):
            flags = presets[name][2]
            self.assertIn("--num-workers", flags)
            self.assertIn("--persistent-workers", flags)
        periodic = presets["periodic"][2]
        self.assertEqual(periodic[periodic.index("--model") + 1], "cnn")
        every = int(periodic[periodic.index("--checkpoint-every") + 1])
        quick_steps = presets["periodic"][4]
        self.assertGreaterEqual((quick_steps - 1) // every, 4)
        train = os.path.join(REPO, "examples", "train.py")
        with open(train) as f:
            source = f.read()
        for name, _, flags, _, _ in gpu_check.SITUATIONS:
            for flag in flags:
                if flag.startswith("--"):
                    self.assertIn('"%s"' % flag, source, "train.py has no %s" % flag)

    def test_gpu_phase_times_absent_present_or_empty(self):
        report = {"phases": [{"name": "forward_pass", "total_s": 1.0}]}
        row = gpu_check.gpu_phase_row(report)
        self.assertEqual((row.status, row.got), ("SKIP", "not in this build"))
        report["phases"][0]["gpu_total_s"] = 0.25
        self.assertEqual(gpu_check.gpu_phase_row(report).status, "OK")
        report["phases"][0]["gpu_total_s"] = None
        self.assertEqual(gpu_check.gpu_phase_row(report).status, "FAIL")

    def test_gpu_phase_times_as_an_object(self):
        # report.json: "gpu": {"count", "total_s", "share", "mean_s", "max_s"} per phase.
        report = {"verdict": {"compute_time": "gpu"},
                  "phases": [{"name": "data_loading", "total_s": 1.0},
                             {"name": "backward_pass", "total_s": 0.1,
                              "gpu": {"count": 30, "total_s": 2.5, "share": 0.6}}]}
        row = gpu_check.gpu_phase_row(report)
        self.assertEqual(row.status, "OK")
        self.assertEqual(row.got, "backward_pass gpu.total_s=2.500; the verdict used gpu time")
        report["phases"][1]["gpu"]["total_s"] = 0
        self.assertEqual(gpu_check.gpu_phase_row(report).status, "FAIL")

    def test_doctor_is_skipped_only_when_absent(self):
        main_help = subprocess.run([BIN, "--help"], stdout=subprocess.PIPE,
                                   universal_newlines=True).stdout
        with tempfile.TemporaryDirectory() as tmp:
            rows = gpu_check.step_doctor(gpu_check.Session(tmp, 120), BIN, "/usr/bin/python3")
        if "doctor" in main_help:
            self.assertNotEqual(rows[0].status, "SKIP", rows[0].got)
        else:
            self.assertEqual((rows[0].status, rows[0].got), ("SKIP", "doctor not in this build"))

    def test_trace_rows_need_gpu_kernels(self):
        gpu = stallscope(["trace", "--json",
                          os.path.join(REPO, "tests/data/traces/steps_kineto_gpu.json")])
        self.assertEqual(statuses(gpu_check.trace_rows(gpu)), ["OK", "OK"])
        cpu = stallscope(["trace", "--json",
                          os.path.join(REPO, "tests/data/traces/steps_torch113_cpu.json")])
        self.assertEqual(statuses(gpu_check.trace_rows(cpu)), ["OK", "FAIL"])

    def test_doctor_row(self):
        ok = {"checks": [{"id": "gpu.x", "status": "ok"}, {"id": "host.y", "status": "warn"}]}
        row = gpu_check.doctor_row(0, ok)
        self.assertEqual(row.status, "OK")
        self.assertIn("warn/fail: host.y", row.got)
        bad = {"checks": [{"id": "gpu.x", "status": "fail"}]}
        self.assertEqual(gpu_check.doctor_row(1, bad).status, "FAIL")
        self.assertEqual(gpu_check.doctor_row(1, None).status, "FAIL")

    def test_markdown_escapes_cells(self):
        rows = [gpu_check.Row("a|b", "x", "y\nz", "OK")]
        text = gpu_check.markdown({"date": "today", "GPU": "H100"}, rows)
        self.assertIn("## GPU check, today", text)
        self.assertIn("| a\\|b | x | y z | OK |", text)


class Gate(unittest.TestCase):
    """Exits before any GPU work, each with its documented status."""

    def check_script(self, args, nvml=NO_NVML):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "results")
            env = dict(os.environ, STALLSCOPE_NVML_LIB=nvml,
                       STALLSCOPE_FAKE_NVML_SCENARIO=os.path.join(REPO, "tests/data/nvml",
                                                                  "steady_1gpu.json"))
            proc = subprocess.run([sys.executable, os.path.join(HERE, "gpu_check.py"),
                                   "--out", out] + args, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
            self.assertFalse(os.path.exists(out), "nothing is written before the GPU checks")
        return proc

    def test_no_nvml_is_exit_3_and_torch_is_not_even_probed(self):
        proc = self.check_script(["--stallscope", BIN, "--python", "/nonexistent/python3"])
        self.assertEqual(proc.returncode, gpu_check.EXIT_NO_GPU, proc.stdout + proc.stderr)
        self.assertTrue(proc.stdout.startswith("stallscope gpu-check: no NVIDIA GPU: "),
                        proc.stdout)
        self.assertIn("nothing GPU-specific was run", proc.stdout)

    @unittest.skipUnless(FAKE_NVML, "FAKE_NVML_LIB not set")
    def test_cuda_unavailable_is_exit_3(self):
        python = "/usr/bin/python3"
        if subprocess.run([python, "-c", "import torch"], stderr=subprocess.DEVNULL).returncode:
            self.skipTest("no CPU torch in /usr/bin/python3")
        proc = self.check_script(["--stallscope", BIN, "--python", python], nvml=FAKE_NVML)
        self.assertEqual(proc.returncode, gpu_check.EXIT_NO_GPU, proc.stdout + proc.stderr)
        self.assertIn("torch.cuda.is_available() is False", proc.stdout)

    @unittest.skipUnless(FAKE_NVML, "FAKE_NVML_LIB not set")
    def test_python_without_torch_is_exit_2(self):
        proc = self.check_script(["--stallscope", BIN, "--python", "/bin/false"], nvml=FAKE_NVML)
        self.assertEqual(proc.returncode, gpu_check.EXIT_SETUP, proc.stdout + proc.stderr)
        self.assertIn("cannot import torch", proc.stdout)

    def test_missing_binary_is_exit_2(self):
        proc = self.check_script(["--stallscope", "/nonexistent/stallscope"])
        self.assertEqual(proc.returncode, gpu_check.EXIT_SETUP, proc.stdout + proc.stderr)
        self.assertIn("cannot run /nonexistent/stallscope", proc.stdout)


if __name__ == "__main__":
    unittest.main()
