"""Tests for the zero-code-change hooks (python/stallscope/auto.py, python/sitecustomize.py).

Run with the interpreter that has torch:  /usr/bin/python3 -m unittest discover -s python/tests
In-process tests drive auto.install() with a fake API that records calls; subprocess tests run
real interpreters with the startup shim on PYTHONPATH and a fake stallscope core in front of it,
so they pass whether or not the real core is built.

The in-process tests here run on whatever hooks this torch offers (global hooks on torch >= 2.1,
patches on 1.13). test_auto_torch2.py runs the global-hook code on every torch (emulated where
torch lacks it) and checks torch 2.x's real hooks; test_auto_ddp.py checks comm_wait with gloo
DDP. Both import their fakes and helpers from here.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
import unittest.mock

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(TESTS_DIR)
sys.path.insert(0, PYTHON_DIR)
sys.path.insert(0, TESTS_DIR)

from stallscope import _facts, _hooks, auto  # noqa: E402  (after the path tweak)

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset, TensorDataset
except ImportError:  # the interpreter has no torch: only the no-torch tests can run
    torch = nn = F = DataLoader = TensorDataset = None
    Dataset = object

needs_torch = unittest.skipIf(torch is None, "needs torch (use /usr/bin/python3)")

if torch is not None:
    import torch2_hooks  # noqa: E402  (needs torch)
    import torch.distributed as dist

    HAS_DIST = dist.is_available()
    HAS_GLOO = HAS_DIST and dist.is_gloo_available()
    HAS_ALWAYS_CALL = torch2_hooks.has_always_call()  # torch >= 2.1
    HAS_OPTIMIZER_HOOKS = torch2_hooks.has_optimizer_hooks()  # torch >= 2.0
else:
    torch2_hooks = None
    HAS_DIST = HAS_GLOO = HAS_ALWAYS_CALL = HAS_OPTIMIZER_HOOKS = False

needs_gloo = unittest.skipUnless(HAS_GLOO, "needs torch.distributed with gloo")
# The phase keys of the "hooks" note, in its order.
PHASE_KEYS = ["forward_pass", "optimizer_step", "backward_pass", "data_loading", "checkpointing",
              "host_syncs", "gpu_time", "comm_wait"]
# How gpu_time installs on this torch.
GPU_TIME_MECHANISM = ("cuda events" if torch is not None and torch.version.cuda is not None
                      else "not measured: this torch is built without CUDA")


class FakeApi:
    """Records stallscope API calls as tuples; `fail` names calls that raise."""

    def __init__(self, fail=()):
        self.events = []
        self.fail = set(fail)

    def _maybe_fail(self, what):
        if what in self.fail:
            raise RuntimeError(f"injected failure in {what}")

    def phase(self, name):
        self._maybe_fail("phase")
        api = self

        class _Phase:
            def __enter__(self):
                api.events.append(("B", name))
                return self

            def __exit__(self, *exc):
                api.events.append(("E", name))
                api._maybe_fail("exit")
                return True  # a misbehaving core that would swallow errors: must not matter

        return _Phase()

    def _begin_at(self, name, ts_ns):
        self._maybe_fail("phase")
        self.events.append(("B", name, ts_ns))

    def _end_at(self, name, ts_ns):
        self.events.append(("E", name, ts_ns))
        self._maybe_fail("exit")

    def _gpu_span(self, name, begin_ts_ns, gpu_ns):
        self.events.append(("G", name, begin_ts_ns, gpu_ns))

    def step(self):
        self._maybe_fail("step")
        self.events.append(("S",))

    def mark(self, name, **kw):
        self.events.append(("M", name, kw))

    def info(self, kind, data):
        self._maybe_fail("info")
        self.events.append(("I", kind, data))

    def count(self, name, n=1):
        self._maybe_fail("count")
        self.events.append(("C", name, n))

    def enabled(self):
        return True

    def names(self):
        """Events as short strings: 'B:forward_pass', 'S', 'I:dataloader', 'C:host_sync.item'."""
        return [e[0] if len(e) == 1 else f"{e[0]}:{e[1]}" for e in self.events]

    def infos(self, kind):
        return [e[2] for e in self.events if e[0] == "I" and e[1] == kind]


def raise_from_forward(test):
    """A module whose forward raises: the job's exception passes through and the forward_pass
    phase closes (test.api is the FakeApi the hooks record into)."""

    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("from the job")

    with test.assertRaisesRegex(ValueError, "from the job"):
        Boom()(torch.zeros(1))
    test.assertEqual(test.api.names()[-2:], ["B:forward_pass", "E:forward_pass"])


def tiny_run(epochs=2, seed=0, checkpoint=True, user_steps=None):
    """A complete little training job; returns (losses, final parameters)."""
    torch.manual_seed(seed)
    data = TensorDataset(torch.randn(24, 8), torch.randint(0, 3, (24,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if user_steps is not None:
                user_steps()
    if checkpoint:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, io.BytesIO())
    return losses, [p.detach().clone() for p in model.parameters()]


class TransformDataset(Dataset):
    """__getitem__ calls an nn.Module and .numpy(), as a transform pipeline would. Each item
    also returns how many API events this process recorded while producing it."""

    def __init__(self, api):
        self.api = api
        self.blur = nn.Conv2d(1, 1, 3, padding=1)

    def __len__(self):
        return 8

    def __getitem__(self, idx):
        before = len(self.api.events)
        with torch.no_grad():
            x = self.blur(torch.full((1, 1, 4, 4), float(idx)))
        x.numpy()
        return x.view(-1), len(self.api.events) - before


class InProcessBase(unittest.TestCase):
    def setUp(self):
        auto.uninstall()
        _hooks.state.error_reported = False
        self.api = FakeApi()

    def tearDown(self):
        auto.uninstall()

    def install(self, api=None, **kwargs):
        self.assertTrue(auto.install(api or self.api, **kwargs))


@needs_torch
class InProcessTest(InProcessBase):
    def test_phase_sequence_of_a_training_loop(self):
        self.install()
        tiny_run(epochs=2)
        names = self.api.names()
        first_step = names[: names.index("S") + 1]
        self.assertEqual(first_step, [
            "I:torch",
            "B:data_loading", "E:data_loading",  # DataLoader.__iter__
            "I:dataloader",
            "B:data_loading", "E:data_loading",  # __next__
            "B:forward_pass", "E:forward_pass",
            "B:backward_pass", "E:backward_pass",  # Tensor.backward -> autograd.backward: once
            "B:optimizer_step", "E:optimizer_step",
            "I:backends",  # once per process, at its first step boundary
            "S",
        ])
        self.assertEqual(names.count("I:backends"), 1)
        backends = self.api.infos("backends")[0]
        self.assertEqual(sorted(backends), ["cuda_initialized", "cudnn_benchmark",
                                            "cudnn_deterministic", "float32_matmul_precision"])
        self.assertIs(backends["cudnn_benchmark"], torch.backends.cudnn.benchmark)
        self.assertEqual(backends["float32_matmul_precision"],
                         torch.get_float32_matmul_precision())
        self.assertIs(backends["cuda_initialized"], False)
        self.assertEqual(names.count("S"), 6)  # 3 batches x 2 epochs
        self.assertEqual(names.count("B:forward_pass"), 6)
        self.assertEqual(names.count("B:backward_pass"), 6)
        self.assertEqual(names.count("B:optimizer_step"), 6)
        # 2 x __iter__, 2 x (3 batches + the StopIteration call)
        self.assertEqual(names.count("B:data_loading"), 10)
        self.assertEqual(names.count("B:checkpointing"), 1)
        # loss.item() once per step; Adam's internal .item() calls are not counted
        self.assertEqual(names.count("C:host_sync.item"), 6)
        self.assertEqual(names.count("B:data_loading"), names.count("E:data_loading"))
        self.assertEqual(names[-2:], ["B:checkpointing", "E:checkpointing"])

    def test_dataloader_settings_reported_once(self):
        self.install()
        tiny_run(epochs=3)
        infos = self.api.infos("dataloader")
        self.assertEqual(len(infos), 1)
        self.assertEqual(infos[0]["num_workers"], 0)
        self.assertEqual(infos[0]["batch_size"], 8)
        self.assertEqual(infos[0]["dataset_len"], 24)
        self.assertEqual(infos[0]["worker_pids"], [])
        self.assertIsNone(infos[0]["prefetch_factor"])
        self.assertFalse(infos[0]["pin_memory"])
        self.assertFalse(infos[0]["drop_last"])
        self.assertEqual(len(self.api.infos("torch")), 1)

    def test_results_identical_with_and_without_hooks(self):
        losses_plain, params_plain = tiny_run(epochs=2, seed=3)
        self.install()
        losses_hooked, params_hooked = tiny_run(epochs=2, seed=3)
        self.assertEqual(losses_plain, losses_hooked)
        for a, b in zip(params_plain, params_hooked):
            self.assertTrue(torch.equal(a, b))

    def test_iterator_is_not_proxied(self):
        self.install()
        loader = DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4)
        it = iter(loader)
        self.assertEqual(type(it).__name__, "_SingleProcessDataLoaderIter")
        self.assertEqual(len(it), 3)
        self.assertEqual([b[0].tolist() for b in it], [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
        with self.assertRaises(StopIteration):
            next(it)

    def test_hook_errors_are_swallowed_and_reported_once(self):
        baseline, _ = tiny_run(epochs=2, seed=5)
        for fail in ("phase", "exit", "count", "info", "step"):
            with self.subTest(fail=fail):
                auto.uninstall()
                _hooks.state.error_reported = False
                self.install(FakeApi(fail=[fail]))
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    losses, _ = tiny_run(epochs=2, seed=5)
                self.assertEqual(losses, baseline)
                lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("[stallscope]")]
                self.assertEqual(len(lines), 1, err.getvalue())
                self.assertFalse(auto.installed())

    def test_job_exceptions_pass_through_and_close_the_phase(self):
        self.install()
        raise_from_forward(self)
        self.assertTrue(auto.installed())  # the job's error is not a hook error

    def test_no_grad_forward_is_eval_forward(self):
        self.install()
        model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        with torch.no_grad():
            model(torch.zeros(1, 2))
        model(torch.zeros(1, 2))
        phases = [n for n in self.api.names() if n.startswith("B:")]
        self.assertEqual(phases, ["B:eval_forward", "B:forward_pass"])

    def test_modules_and_syncs_in_transforms_are_not_training_phases(self):
        self.install()
        loader = DataLoader(TransformDataset(self.api), batch_size=4)
        for _ in loader:
            pass
        names = self.api.names()
        self.assertNotIn("B:eval_forward", names)
        self.assertNotIn("B:forward_pass", names)
        self.assertFalse([n for n in names if n.startswith("C:")])

    def test_nothing_recorded_in_workers_and_pids_reported(self):
        torch.set_num_threads(1)  # fork after multi-threaded OpenMP use can crash workers
        self.install()
        loader = DataLoader(TransformDataset(self.api), batch_size=2, num_workers=2,
                            multiprocessing_context="fork")
        for epoch in range(2):
            worker_events = sum(int(n.sum()) for _, n in loader)
            self.assertEqual(worker_events, 0)
        infos = self.api.infos("dataloader")
        self.assertEqual(len(infos), 1)
        pids = infos[0]["worker_pids"]
        self.assertEqual(len(pids), 2)
        self.assertNotIn(os.getpid(), pids)
        self.assertEqual(infos[0]["multiprocessing_context"], "fork")
        self.assertEqual(infos[0]["prefetch_factor"], 2)
        # non-persistent workers are new processes in epoch 2
        respawned = self.api.infos("dataloader_workers")
        self.assertEqual(len(respawned), 1)
        self.assertEqual(len(set(respawned[0]["worker_pids"]) & set(pids)), 0)

    def test_nothing_recorded_where_worker_info_is_set(self):
        # forkserver/spawn workers install the hooks afresh (sitecustomize runs there too);
        # get_worker_info() is what keeps them quiet.
        self.install()
        _hooks.state.get_worker_info = lambda: object()
        model = nn.Linear(2, 2)
        loss = model(torch.zeros(1, 2)).sum()
        loss.backward()
        loss.item()
        torch.save({}, io.BytesIO())
        self.assertEqual(self.api.events, [])

    def test_reporting_the_start_method_does_not_fix_it(self):
        import multiprocessing
        before = multiprocessing.get_start_method(allow_none=True)
        self.assertIn(_facts.default_start_method(),
                      multiprocessing.get_all_start_methods())
        self.assertEqual(multiprocessing.get_start_method(allow_none=True), before)

    def test_every_optimizer_class_is_timed_once(self):
        self.install()

        class Custom(torch.optim.SGD):
            def step(self, closure=None):
                return super().step(closure)

        for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, Custom):
            with self.subTest(optimizer=cls.__name__):
                self.api.events.clear()
                for _ in range(2):  # a second instance must not add another wrapper layer
                    p = nn.Parameter(torch.ones(2))
                    opt = cls([p], lr=0.1)
                    p.grad = torch.ones(2)
                    opt.step()
                names = self.api.names()
                self.assertEqual(names.count("B:optimizer_step"), 2)
                if hasattr(torch.optim.Optimizer, "_hook_for_profile"):  # torch 1.x
                    self.assertTrue(getattr(cls.step, "hooked", False))

    def test_only_the_first_optimizer_ends_a_step(self):
        self.install()
        a, b = nn.Parameter(torch.ones(1)), nn.Parameter(torch.ones(1))
        opt_d, opt_g = torch.optim.SGD([a], lr=0.1), torch.optim.SGD([b], lr=0.1)
        for _ in range(3):  # a GAN: two optimizers, one step
            a.grad, b.grad = torch.ones(1), torch.ones(1)
            opt_d.step()
            opt_g.step()
        self.assertEqual(self.api.names().count("S"), 3)
        self.assertEqual(self.api.names().count("B:optimizer_step"), 6)

    def test_user_marked_steps_disable_automatic_steps(self):
        self.install()
        tiny_run(epochs=1, user_steps=lambda: self.api.step())
        names = self.api.names()
        # the first iteration ends before the job's first step() call is seen
        self.assertEqual(names.count("S"), 3 + 1)

    def test_checkpointing_both_save_entry_points(self):
        self.install()
        torch.save({"a": 1}, io.BytesIO())
        torch.serialization.save({"a": 1}, io.BytesIO())
        self.assertEqual(self.api.names().count("B:checkpointing"), 2)

    def test_uninstall_restores_torch(self):
        originals = (nn.Module.__call__, torch.Tensor.backward, torch.autograd.backward,
                     torch.save, torch.Tensor.item, torch.optim.Optimizer.__init__)
        self.install(global_hooks=False)  # GlobalHookTest removes the global hooks
        self.assertIsNot(nn.Module.__call__, originals[0])
        auto.uninstall()
        now = (nn.Module.__call__, torch.Tensor.backward, torch.autograd.backward,
               torch.save, torch.Tensor.item, torch.optim.Optimizer.__init__)
        for before, after in zip(originals, now):
            self.assertIs(before, after)

    def test_disabled_api_installs_nothing(self):
        api = FakeApi()
        api.enabled = lambda: False
        self.assertFalse(auto.install(api))
        self.assertFalse(hasattr(nn.Module.__call__, "_stallscope_auto"))
        self.assertFalse(hasattr(torch.Tensor.backward, "_stallscope_auto"))

    def test_patches_forced_everywhere(self):
        self.install(global_hooks=False)
        expected = {k: "patch" for k in PHASE_KEYS}
        expected["gpu_time"] = GPU_TIME_MECHANISM
        if not HAS_DIST:  # no DDP possible
            expected["comm_wait"] = "not measured: this torch has no torch.distributed"
        self.assertEqual(auto.mechanisms(), expected)

    def test_default_mechanisms_follow_this_torch(self):
        self.install()
        got = auto.mechanisms()
        self.assertEqual(list(got), PHASE_KEYS)
        self.assertEqual(got["forward_pass"], "global hook" if HAS_ALWAYS_CALL else "patch")
        self.assertEqual(got["optimizer_step"], "global hook" if HAS_OPTIMIZER_HOOKS else "patch")
        for phase in ("backward_pass", "data_loading", "checkpointing", "host_syncs"):
            self.assertEqual(got[phase], "patch")

    def test_missing_private_attribute_degrades_to_not_measured(self):
        from torch.utils.data import dataloader
        baseline, _ = tiny_run(epochs=2, seed=7)
        base_iter = dataloader._BaseDataLoaderIter
        del dataloader._BaseDataLoaderIter  # as if a torch version renamed it
        try:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.install()
                losses, _ = tiny_run(epochs=2, seed=7)
        finally:
            dataloader._BaseDataLoaderIter = base_iter
        self.assertEqual(losses, baseline)
        lines = err.getvalue().splitlines()
        self.assertEqual(len(lines), 1, err.getvalue())
        self.assertRegex(lines[0], r"^\[stallscope\] data_loading not measured: AttributeError: "
                                   r".*_BaseDataLoaderIter")
        self.assertTrue(auto.mechanisms()["data_loading"].startswith("not measured: "))
        self.assertFalse(hasattr(DataLoader.__iter__, "_stallscope_auto"))  # rolled back
        names = self.api.names()
        self.assertNotIn("B:data_loading", names)
        for phase in ("forward_pass", "backward_pass", "optimizer_step", "checkpointing"):
            self.assertIn(f"B:{phase}", names)
        self.assertEqual(names.count("S"), 6)
        self.assertTrue(auto.installed())

    def notes(self, run_dir):
        with open(os.path.join(run_dir, "python.jsonl")) as f:
            return [json.loads(line) for line in f]

    def test_hooks_note_says_how_each_phase_is_measured(self):
        with tempfile.TemporaryDirectory() as run_dir:
            with unittest.mock.patch.dict(os.environ, {"STALLSCOPE_RUN_DIR": run_dir}):
                self.install()
                self.assertTrue(auto.install(self.api))  # already installed: no second note
            notes = self.notes(run_dir)
        self.assertEqual(len(notes), 1)
        note = notes[0]
        self.assertEqual((note["event"], note["pid"]), ("hooks", os.getpid()))
        self.assertEqual(note["torch"], torch.__version__)
        self.assertEqual(list(note["mechanisms"]), PHASE_KEYS)
        self.assertEqual(note["mechanisms"], auto.mechanisms())
        self.assertIsNone(note["error"])

    def test_failed_install_is_noted(self):
        api = FakeApi()
        api.count = None  # not callable: not a stallscope API
        err = io.StringIO()
        with tempfile.TemporaryDirectory() as run_dir, contextlib.redirect_stderr(err):
            with unittest.mock.patch.dict(os.environ, {"STALLSCOPE_RUN_DIR": run_dir}):
                self.assertFalse(auto.install(api))
            notes = self.notes(run_dir)
        self.assertEqual([n["event"] for n in notes], ["hooks"])
        self.assertEqual(notes[0]["mechanisms"], {})
        self.assertIn("count()", notes[0]["error"])
        self.assertEqual(err.getvalue().count("[stallscope]"), 1)
        self.assertFalse(hasattr(torch.Tensor.backward, "_stallscope_auto"))

    def test_hooks_return_none(self):
        self.install()
        model = nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self.assertIsNone(auto._forward_pre_hook(model, ()))
        self.assertIsNone(auto._forward_hook(model, (), None))
        self.assertIsNone(auto._optimizer_pre_hook(opt, (opt,), {}))
        self.assertIsNone(auto._optimizer_post_hook(opt, (opt,), {}))
        from stallscope import _ddp
        watch = _ddp.GradientWatch(torch.nn.parallel.DistributedDataParallel)
        self.assertIsNone(watch.on_grad_ready(torch.ones(1)))
        self.assertGreater(watch.ready_ns, 0)


class LoaderReporterTest(unittest.TestCase):
    """_facts.LoaderReporter with stand-ins for a DataLoader and its iterator: no torch needed."""

    class Loader:
        num_workers, batch_size, dataset = 2, 4, [0] * 10

    class Worker:
        def __init__(self, pid):
            self.pid = pid

    def iterator(self, *pids):
        it = type("Iter", (), {})()
        it._workers = [self.Worker(pid) for pid in pids]
        return it

    def test_once_per_loader_then_only_new_workers(self):
        reporter = _facts.LoaderReporter()
        first, second = self.Loader(), self.Loader()
        threads = unittest.mock.Mock(return_value=3)
        kind, data = reporter.seen(first, self.iterator(11, 12), threads)
        self.assertEqual((kind, data["loader"], data["worker_pids"]), ("dataloader", 1, [11, 12]))
        self.assertEqual((data["dataset_len"], data["intra_op_threads"]), (10, 3))
        self.assertIsNone(reporter.seen(first, self.iterator(11, 12), threads))  # persistent
        self.assertIsNone(reporter.seen(first, self.iterator(), threads))  # no PIDs: no news
        self.assertEqual(reporter.seen(first, self.iterator(13, 14), threads),
                         ("dataloader_workers", {"loader": 1, "worker_pids": [13, 14]}))
        self.assertEqual(reporter.seen(second, self.iterator(), threads)[1]["loader"], 2)
        self.assertEqual(threads.call_count, 2)  # asked only for a new loader

    def test_serials_go_on_after_forget(self):
        reporter = _facts.LoaderReporter()
        loader = self.Loader()
        reporter.seen(loader, self.iterator(), int)
        reporter.forget()
        self.assertEqual(reporter.seen(loader, self.iterator(), int)[1]["loader"], 2)
        self.assertEqual(reporter.seen(self.Loader(), self.iterator(), int)[1]["loader"], 3)


# A stand-in for the stallscope core, first on PYTHONPATH in subprocess tests: it writes each
# call as a JSON line [pid, monotonic ns, kind, name] to $STALLSCOPE_RUN_DIR/events.jsonl;
# FAKE_FAIL=phase makes phase() raise.
FAKE_CORE = textwrap.dedent("""
    import contextlib, json, os, time
    __path__.append({stallscope_dir!r})
    def _emit(*rec, ts_ns=None):
        ts_ns = time.monotonic_ns() if ts_ns is None else ts_ns
        with open(os.path.join(os.environ["STALLSCOPE_RUN_DIR"], "events.jsonl"), "a") as f:
            f.write(json.dumps([os.getpid(), ts_ns, *rec]) + "\\n")
    @contextlib.contextmanager
    def phase(name):
        if os.environ.get("FAKE_FAIL") == "phase":
            raise RuntimeError("injected")
        _emit("B", name)
        try:
            yield
        finally:
            _emit("E", name)
    def _begin_at(name, ts_ns): _emit("B", name, ts_ns=ts_ns)
    def _end_at(name, ts_ns): _emit("E", name, ts_ns=ts_ns)
    def step(): _emit("S")
    def mark(name, **kw): _emit("M", name)
    def info(kind, data): _emit("I", kind)
    def count(name, n=1): _emit("C", name)
    def enabled(): return True
""")

TRAIN_SCRIPT = textwrap.dedent("""
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        print(f"{loss.item():.6f}")
""")

WORKER_SCRIPT = textwrap.dedent("""
    import os, torch, torch.nn as nn
    from torch.utils.data import DataLoader, Dataset
    class Blurred(Dataset):
        def __init__(self):
            self.blur = nn.Conv2d(1, 1, 3, padding=1)
        def __len__(self):
            return 8
        def __getitem__(self, i):
            x = self.blur(torch.ones(1, 1, 4, 4))  # grad enabled: would be a forward_pass
            x.sum().item()
            return x.detach().view(-1)
    if __name__ == "__main__":
        loader = DataLoader(Blurred(), batch_size=2, num_workers=2,
                            multiprocessing_context="forkserver")
        for batch in loader:
            pass
        print(os.getpid())
""")

NO_TORCH_SCRIPT = textwrap.dedent("""
    import json, sys
    print("hello from a job without torch")
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "torch")))
    sys.exit(3)
""")


class SubprocessBase(unittest.TestCase):
    """Real interpreters with the shim on PYTHONPATH, as `stallscope run` starts them."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run_dir = os.path.join(self.tmp.name, "run")
        os.mkdir(self.run_dir)
        fake_pkg = os.path.join(self.tmp.name, "fakecore", "stallscope")
        os.makedirs(fake_pkg)
        with open(os.path.join(fake_pkg, "__init__.py"), "w") as f:
            f.write(FAKE_CORE.format(stallscope_dir=os.path.join(PYTHON_DIR, "stallscope")))
        self.fake_core_dir = os.path.dirname(fake_pkg)

    def tearDown(self):
        self.tmp.cleanup()

    def env(self, shim=True, extra_path=(), **env):
        full_env = {k: v for k, v in os.environ.items()
                    if not k.startswith("STALLSCOPE") and k != "PYTHONPATH"}
        if shim:
            full_env["STALLSCOPE_RUN_DIR"] = self.run_dir
            full_env["PYTHONPATH"] = os.pathsep.join(
                [self.fake_core_dir, PYTHON_DIR, *extra_path])
        elif extra_path:
            full_env["PYTHONPATH"] = os.pathsep.join(extra_path)
        full_env.update(env)
        return full_env

    def run_py(self, code, shim=True, extra_path=(), **env):
        """Runs `code` (-c), or the file it names when it ends in .py."""
        argv = [code] if code.endswith(".py") else ["-c", code]
        return subprocess.run([sys.executable, *argv], env=self.env(shim, extra_path, **env),
                              capture_output=True, text=True, timeout=120, cwd=self.tmp.name)

    def timed_events(self):
        """[(pid, ts_ns, [kind, name...])] in write order."""
        path = os.path.join(self.run_dir, "events.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [(rec[0], rec[1], rec[2:]) for rec in map(json.loads, f)]

    def events(self):
        return [rec for _, _, rec in self.timed_events()]

    def notes(self):
        """The lines of python.jsonl (stallscope._notes.note)."""
        with open(os.path.join(self.run_dir, "python.jsonl")) as f:
            return [json.loads(line) for line in f]

    def event_pids(self):
        path = os.path.join(self.run_dir, "events.jsonl")
        with open(path) as f:
            return {json.loads(line)[0] for line in f}



class SubprocessTest(SubprocessBase):
    @needs_torch
    def test_forkserver_workers_record_nothing(self):
        script = os.path.join(self.tmp.name, "workers.py")
        with open(script, "w") as f:
            f.write(WORKER_SCRIPT)
        result = self.run_py(script)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.event_pids(), {int(result.stdout.split()[-1])})
        names = [":".join(e) for e in self.events()]
        self.assertNotIn("B:forward_pass", names)
        self.assertEqual(names.count("I:dataloader"), 1)

    def test_job_without_torch_runs_unchanged(self):
        plain = self.run_py(NO_TORCH_SCRIPT, shim=False)
        shimmed = self.run_py(NO_TORCH_SCRIPT)
        self.assertEqual(plain.returncode, 3)
        self.assertEqual((shimmed.returncode, shimmed.stdout, shimmed.stderr),
                         (plain.returncode, plain.stdout, plain.stderr))
        self.assertIn("[]", shimmed.stdout)  # torch did not get imported
        self.assertEqual(self.events(), [])

    @needs_torch
    def test_hooks_installed_when_torch_is_imported(self):
        plain = self.run_py(TRAIN_SCRIPT, shim=False)
        shimmed = self.run_py(TRAIN_SCRIPT)
        self.assertEqual(shimmed.returncode, 0, shimmed.stderr)
        self.assertEqual(shimmed.stdout, plain.stdout)  # same losses
        self.assertNotIn("[stallscope]", shimmed.stderr)
        names = [":".join(e) for e in self.events()]
        self.assertEqual(names.count("S"), 4)
        for phase in ("data_loading", "forward_pass", "backward_pass", "optimizer_step"):
            self.assertIn(f"B:{phase}", names)
        self.assertEqual(names.count("I:dataloader"), 1)
        hooks = [n for n in self.notes() if n["event"] == "hooks"]
        self.assertEqual(len(hooks), 1, hooks)
        self.assertEqual(list(hooks[0]["mechanisms"]), PHASE_KEYS)
        self.assertEqual(hooks[0]["torch"], torch.__version__)
        self.assertIsNone(hooks[0]["error"])

    @needs_torch
    def test_no_auto_installs_nothing(self):
        probe = ("import sys, torch; print(hasattr(torch.Tensor.backward, '_stallscope_auto'),"
                 " 'stallscope' in sys.modules,"
                 " any(type(f).__name__ == 'PostImportFinder' for f in sys.meta_path))")
        off = self.run_py(probe, STALLSCOPE_AUTO="0")
        self.assertEqual(off.stdout.split(), ["False", "False", "False"], off.stderr)
        on = self.run_py(probe)
        self.assertEqual(on.stdout.split(), ["True", "True", "False"], on.stderr)

    @needs_torch
    def test_core_failure_never_breaks_the_job(self):
        plain = self.run_py(TRAIN_SCRIPT, shim=False)
        broken = self.run_py(TRAIN_SCRIPT, FAKE_FAIL="phase")
        self.assertEqual(broken.returncode, 0, broken.stderr)
        self.assertEqual(broken.stdout, plain.stdout)
        self.assertEqual(broken.stderr.count("[stallscope]"), 1, broken.stderr)

    def test_chains_to_the_shadowed_sitecustomize(self):
        other = os.path.join(self.tmp.name, "other")
        os.mkdir(other)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("print('chained sitecustomize ran')\n")
        result = self.run_py("print('job')", extra_path=[other])
        self.assertEqual(result.stdout, "chained sitecustomize ran\njob\n", result.stderr)
        # also without STALLSCOPE_RUN_DIR (the shim stays on PYTHONPATH of child processes)
        result = self.run_py("print('job')", extra_path=[other], STALLSCOPE_RUN_DIR="")
        self.assertEqual(result.stdout, "chained sitecustomize ran\njob\n", result.stderr)

    def test_chains_to_the_system_sitecustomize(self):
        system = self.run_py("import sitecustomize; print(sitecustomize.__file__)", shim=False)
        shimmed = self.run_py("import sitecustomize as s; c = s._chained_sitecustomize;"
                              " print(c.__file__ if c else None)")
        if system.returncode != 0:  # this interpreter has no system sitecustomize
            self.assertEqual(shimmed.stdout.strip(), "None")
        else:
            self.assertEqual(shimmed.stdout.strip(), system.stdout.strip())

    def test_error_in_chained_sitecustomize_is_reported_like_site(self):
        other = os.path.join(self.tmp.name, "other")
        os.mkdir(other)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("raise RuntimeError('broken site config')\n")
        result = self.run_py("print('job')", extra_path=[other])
        self.assertEqual(result.returncode, 0)
        self.assertEqual(result.stdout, "job\n")
        self.assertIn("Error in sitecustomize", result.stderr)
        self.assertIn("broken site config", result.stderr)




if __name__ == "__main__":
    unittest.main()
