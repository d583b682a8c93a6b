"""Tests for GPU-side phase times (python/stallscope/_cuda.py) and host-sync counting by kind and
call site (python/stallscope/_syncs.py), against a fake torch.cuda layer: no GPU needed.

GpuTimerTest and SyncHelpersTest need no torch (they run under every interpreter);
AutoCudaTest drives auto.install() on this torch with torch.cuda's Event and is_initialized
replaced by the fake, and AutoSyncTest counts real syncs of CPU tensors.
"""

import os
import sys
import unittest
import unittest.mock

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(TESTS_DIR))
sys.path.insert(0, TESTS_DIR)

from stallscope import _cuda, _syncs, auto  # noqa: E402

from test_auto import FakeApi, InProcessBase, needs_torch, tiny_run, torch  # noqa: E402


class FakeGpu:
    """One fake CUDA stream: record() queues a marker at the stream's end; run(ms) lets the GPU
    work through `ms` of queued work (each record() first queues `work_ms` of kernels)."""

    def __init__(self, work_ms=5.0):
        self.queued_ms = 0.0  # stream time at the end of the queue
        self.done_ms = 0.0  # stream time the GPU has reached
        self.work_ms = work_ms
        self.initialized = False
        self.created = 0
        self.device = 0
        self.fail_record = False

    def run(self, ms=1e9):
        self.done_ms = min(self.queued_ms, self.done_ms + ms)

    # The torch.cuda surface GpuTimer uses.
    def is_initialized(self):
        return self.initialized

    def Event(self, enable_timing=False):  # noqa: N802 (torch's name)
        assert enable_timing
        self.created += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu):
        self.gpu = gpu
        self.at_ms = None
        self.device = None

    def record(self):
        if self.gpu.fail_record:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if self.device is not None and self.device != self.gpu.device:
            raise ValueError("Event device does not match the current device")
        self.device = self.gpu.device
        self.gpu.queued_ms += self.gpu.work_ms
        self.at_ms = self.gpu.queued_ms

    def query(self):
        return self.at_ms is not None and self.gpu.done_ms >= self.at_ms

    def elapsed_time(self, end):
        assert self.query() and end.query(), "elapsed_time on an event that has not completed"
        return end.at_ms - self.at_ms

    def synchronize(self):
        raise AssertionError("stallscope must never wait for the GPU")


class Recorder:
    def __init__(self):
        self.spans, self.counts, self.said = [], [], []

    def timer(self, gpu):
        return _cuda.GpuTimer(gpu, lambda *a: self.spans.append(a),
                              lambda *a: self.counts.append(a), self.said.append)


class GpuTimerTest(unittest.TestCase):
    def setUp(self):
        self.gpu = FakeGpu(work_ms=5.0)
        self.rec = Recorder()
        self.timer = self.rec.timer(self.gpu)

    def phase(self, name):
        self.timer.end(self.timer.begin(name))

    def test_nothing_until_the_job_initialises_cuda(self):
        self.phase("forward_pass")
        self.assertFalse(self.timer.active)
        self.assertEqual(self.gpu.created, 0, "no CUDA event (no context) before the job's own")
        self.gpu.initialized = True
        for _ in range(_cuda.PROBE_EVERY):
            self.phase("forward_pass")
        self.assertTrue(self.timer.active, "probed again within PROBE_EVERY boundaries")
        self.assertEqual(self.gpu.created, 2)

    def test_spans_resolve_later_in_order_without_waiting(self):
        self.gpu.initialized = True
        self.phase("forward_pass")  # begin at 5 ms, end at 10 ms of stream time
        self.phase("backward_pass")  # 15 .. 20
        self.timer.poll()
        self.assertEqual(self.rec.spans, [], "still running on the GPU: nothing written")
        self.gpu.run(12)  # the GPU reached 12 ms: forward done, backward not
        self.timer.poll()
        self.assertEqual([(s[0], s[2]) for s in self.rec.spans], [("forward_pass", 5_000_000)])
        self.gpu.run()
        self.timer.poll()
        self.assertEqual([s[0] for s in self.rec.spans], ["forward_pass", "backward_pass"])
        self.assertLessEqual(self.rec.spans[0][1], self.rec.spans[1][1], "host begins in order")

    def test_events_are_reused(self):
        self.gpu.initialized = True
        for _ in range(50):
            self.phase("forward_pass")
            self.gpu.run()
            self.timer.poll()
        self.assertEqual(len(self.rec.spans), 50)
        self.assertEqual(self.gpu.created, 2)

    def test_a_gpu_that_lags_far_behind_bounds_the_pending_pairs(self):
        self.gpu.initialized = True
        for _ in range(_cuda.MAX_PENDING + 10):
            self.phase("forward_pass")
        self.assertEqual(self.timer.skipped, 10)
        self.gpu.run()
        self.timer.finish()
        self.assertEqual(len(self.rec.spans), _cuda.MAX_PENDING)
        self.assertEqual(self.rec.counts, [(_cuda.SKIPPED, 10)])

    def test_finish_counts_what_is_still_running(self):
        self.gpu.initialized = True
        self.phase("forward_pass")
        self.phase("backward_pass")
        self.gpu.run(12)
        self.timer.finish()
        self.assertEqual([s[0] for s in self.rec.spans], ["forward_pass"])
        self.assertEqual(self.rec.counts, [(_cuda.UNRESOLVED, 1)])

    def test_an_error_turns_gpu_timing_off_once(self):
        self.gpu.initialized = True
        self.gpu.fail_record = True
        self.phase("forward_pass")
        self.phase("forward_pass")
        self.assertTrue(self.timer.off)
        self.assertEqual(len(self.rec.said), 1)
        self.assertIn("illegal memory access", self.rec.said[0])
        self.gpu.fail_record = False
        self.phase("forward_pass")
        self.timer.poll()
        self.assertEqual(self.rec.spans, [])

    def test_a_pooled_event_of_another_device_is_replaced(self):
        self.gpu.initialized = True
        self.phase("forward_pass")
        self.gpu.run()
        self.timer.poll()
        self.gpu.device = 1  # the job switched devices: the pooled events belong to device 0
        self.phase("forward_pass")
        self.gpu.run()
        self.timer.poll()
        self.assertFalse(self.timer.off)
        self.assertEqual(len(self.rec.spans), 2)
        self.assertEqual(self.gpu.created, 4)

    def test_a_forked_child_forgets_its_parents_events(self):
        self.gpu.initialized = True
        self.phase("forward_pass")
        self.timer.after_fork_in_child()
        self.gpu.initialized = False  # torch: no CUDA in a forked child
        self.gpu.run()
        self.timer.finish()
        self.assertEqual(self.rec.spans, [])
        self.assertEqual(self.rec.counts, [])

    def test_many_phases_without_a_step_still_resolve(self):
        self.gpu.initialized = True
        self.gpu.done_ms = float("inf")
        for _ in range(_cuda.POLL_AT):
            self.phase("eval_forward")
        self.assertEqual(len(self.rec.spans), _cuda.POLL_AT, "polled at POLL_AT pending pairs")


class FakeTensor:
    def __init__(self, is_cuda):
        self.is_cuda = is_cuda


class SyncHelpersTest(unittest.TestCase):
    def test_non_blocking_argument_forms(self):
        cases = [
            ((), {}, False),
            (("cuda",), {}, False),
            (("cuda",), {"non_blocking": True}, True),
            (("cuda", None, True), {}, True),  # to(device, dtype, non_blocking)
            (("cuda", None, False, True), {}, False),  # ..., copy=True
            ((0, True), {}, True),  # cuda(device, non_blocking)
            (("cuda",), {"non_blocking": False, "copy": True}, False),
        ]
        for args, kwargs, want in cases:
            with self.subTest(args=args, kwargs=kwargs):
                self.assertEqual(_syncs.non_blocking(args, kwargs), want)

    def test_copy_kind(self):
        cpu, gpu = FakeTensor(False), FakeTensor(True)
        self.assertEqual(_syncs.copy_kind(cpu, gpu), "copy_h2d")
        self.assertEqual(_syncs.copy_kind(gpu, cpu), "copy_d2h")
        self.assertIsNone(_syncs.copy_kind(cpu, FakeTensor(False)), "a dtype cast on the host")
        self.assertIsNone(_syncs.copy_kind(gpu, FakeTensor(True)), "on the device")
        self.assertIsNone(_syncs.copy_kind(gpu, gpu), "to() returned self")

    def test_copying_counts_blocking_crossings_only(self):
        hits = []
        moved = FakeTensor(True)
        make = _syncs.copying(hits.append, lambda: False)
        to = make(lambda self, *a, **k: moved)
        src = FakeTensor(False)
        self.assertIs(to(src, "cuda"), moved)
        to(src, "cuda", non_blocking=True)
        self.assertEqual(hits, ["copy_h2d"])
        traced = _syncs.copying(hits.append, lambda: True)(lambda self, *a, **k: moved)
        traced(src, "cuda")
        self.assertEqual(hits, ["copy_h2d"], "nothing while torch.compile traces")


@needs_torch
class AutoCudaTest(InProcessBase):
    """auto with torch.cuda's events faked: the compute phases get GPU spans."""

    def install_with_fake_cuda(self, gpu):
        patches = [
            unittest.mock.patch.object(torch.version, "cuda", "12.1"),
            unittest.mock.patch.object(torch.cuda, "is_initialized", gpu.is_initialized),
            unittest.mock.patch.object(torch.cuda, "Event", gpu.Event),
        ]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)
        self.install()
        self.assertEqual(auto.mechanisms()["gpu_time"], "cuda events")

    def test_compute_phases_get_gpu_spans_a_step_later(self):
        gpu = FakeGpu(work_ms=2.0)
        gpu.initialized = True
        gpu.done_ms = float("inf")  # a GPU that keeps up: every span resolves at the next poll
        self.install_with_fake_cuda(gpu)
        tiny_run(epochs=2, checkpoint=False)
        auto._at_exit()
        spans = [e for e in self.api.events if e[0] == "G"]
        by_phase = {}
        for _, name, begin_ns, gpu_ns in spans:
            by_phase.setdefault(name, []).append(gpu_ns)
        self.assertEqual(sorted(by_phase), ["backward_pass", "forward_pass", "optimizer_step"])
        for name, times in by_phase.items():
            self.assertEqual(len(times), 6, name)
            self.assertTrue(all(t == 2_000_000 for t in times), (name, times))
        # Each span comes after its phase ended, stamped with the phase's host begin.
        names = self.api.names()
        first_g = names.index("G:forward_pass")
        self.assertIn("E:forward_pass", names[:first_g])
        self.assertEqual(self.api.names().count("C:" + _cuda.UNRESOLVED), 0)

    def test_without_cuda_in_use_nothing_is_recorded(self):
        gpu = FakeGpu()
        self.install_with_fake_cuda(gpu)
        tiny_run(epochs=1, checkpoint=False)
        auto._at_exit()
        self.assertEqual(gpu.created, 0)
        self.assertNotIn("G", [e[0] for e in self.api.events])

    def test_spans_still_running_at_exit_are_counted(self):
        gpu = FakeGpu()
        gpu.initialized = True
        self.install_with_fake_cuda(gpu)
        tiny_run(epochs=1, checkpoint=False)  # the fake GPU never runs
        auto._at_exit()
        self.assertNotIn("G", [e[0] for e in self.api.events])
        self.assertIn(("C", _cuda.UNRESOLVED, 9), self.api.events)  # 3 steps x 3 phases

    def test_results_identical_with_gpu_timing(self):
        plain, params_plain = tiny_run(epochs=2, seed=3, checkpoint=False)
        gpu = FakeGpu()
        gpu.initialized = True
        gpu.done_ms = float("inf")
        self.install_with_fake_cuda(gpu)
        hooked, params_hooked = tiny_run(epochs=2, seed=3, checkpoint=False)
        self.assertEqual(plain, hooked)
        for a, b in zip(params_plain, params_hooked):
            self.assertTrue(torch.equal(a, b))

    def test_this_torch_without_cuda_says_so(self):
        if torch.version.cuda is not None:
            self.skipTest("this torch is built with CUDA")
        self.install()
        self.assertEqual(auto.mechanisms()["gpu_time"],
                         "not measured: this torch is built without CUDA")


@needs_torch
class AutoSyncTest(InProcessBase):
    def test_each_site_is_named_once_and_counted_at_exit(self):
        self.install()
        tiny_run(epochs=2, checkpoint=False)
        sites = self.api.infos("sync_site")
        self.assertEqual(len(sites), 1, sites)
        site = sites[0]
        self.assertEqual(site["kind"], "item")
        self.assertEqual(os.path.basename(site["file"]), "test_auto.py")
        self.assertEqual(site["function"], "tiny_run")
        import test_auto
        with open(test_auto.__file__) as f:
            line = f.read().splitlines()[site["line"] - 1]
        self.assertIn("loss.item()", line)
        auto._at_exit()
        counts = self.api.infos("sync_sites")
        self.assertEqual(len(counts), 1)
        self.assertEqual(counts[0]["sites"][0]["count"], 6)

    def test_cuda_calls_are_counted(self):
        self.install()
        torch.cuda.empty_cache()  # a no-op without CUDA, still the call the loop made
        self.assertIn(("C", "host_sync.empty_cache", 1), self.api.events)
        self.assertEqual(self.api.infos("sync_site")[0]["kind"], "empty_cache")

    def test_torchs_own_calls_are_not_counted(self):
        self.install()
        t = torch.ones(1)
        inside_torch = os.path.join(os.path.dirname(torch.__file__), "_stallscope_test.py")
        exec(compile("t.item()", inside_torch, "exec"), {"t": t})
        t.item()
        self.assertEqual(self.api.names().count("C:host_sync.item"), 1)

    def test_host_dtype_casts_are_no_copies(self):
        self.install()
        x = torch.ones(2)
        x.to(torch.float64)
        x.to("cpu")
        self.assertEqual([n for n in self.api.names() if n.startswith("C:")], [])


if __name__ == "__main__":
    unittest.main()
