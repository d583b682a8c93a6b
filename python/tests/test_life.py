"""Tests for the start-up records (python/stallscope/_life.py, issue 26 item 3): "cuda_init",
"compile", "compile_totals" and "backends" (_facts.backends).

LifeTest and CompileCallbackTest need no torch (they run under every interpreter): a fake
torch.cuda and a fake torch._dynamo.callback module. AutoLifeTest drives auto.install() on this
torch with torch.cuda's lazy init faked; RealTorchTest checks what a real torch gives (compile
records only where torch has torch._dynamo.callback).
"""

import importlib
import importlib.util
import os
import sys
import tempfile
import textwrap
import time
import types
import unittest
import unittest.mock

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(TESTS_DIR))
sys.path.insert(0, TESTS_DIR)

from stallscope import _facts, _hooks, _life, auto  # noqa: E402

from test_auto import InProcessBase, needs_torch, tiny_run, torch  # noqa: E402


class FakeCuda:
    """torch.cuda's lazy initialisation: _lazy_init() takes init_s and sets the flag; a queued
    call made during it re-enters _lazy_init through the module attribute, as torch's do."""

    def __init__(self, init_s=0.01, fail_times=0):
        self.initialized = False
        self.init_s = init_s
        self.fail_times = fail_times
        self.calls = 0
        self.initializing = False

    def is_initialized(self):
        return self.initialized

    def _lazy_init(self):
        self.calls += 1
        if self.initialized or self.initializing:
            return
        if self.fail_times:
            self.fail_times -= 1
            raise RuntimeError("Found no NVIDIA driver on your system")
        self.initializing = True
        try:
            time.sleep(self.init_s)
            self.module._lazy_init()  # a queued call (manual_seed) re-entering
        finally:
            self.initializing = False
        self.initialized = True
        return "init done"

    def as_module(self):
        """A module object like torch.cuda: attributes looked up at each call."""
        module = types.ModuleType("fake_torch_cuda")
        module.is_initialized = self.is_initialized
        module._lazy_init = self._lazy_init
        self.module = module
        return module


class Recorder:
    def __init__(self):
        self.infos, self.errors = [], []
        self.quiet = False

    def life(self):
        return _life.Life(lambda kind, data: self.infos.append((kind, data)),
                          lambda where, e: self.errors.append((where, e)), lambda: self.quiet)


class LifeTest(unittest.TestCase):
    def setUp(self):
        self.rec = Recorder()
        self.life = self.rec.life()
        self.fake = FakeCuda()
        self.cuda = self.fake.as_module()
        self.original = self.cuda._lazy_init
        self.cuda._lazy_init = self.life.wrap_lazy_init(self.cuda)(self.original)

    def test_the_initialising_call_is_timed_once_then_unwrapped(self):
        before = time.monotonic_ns()
        self.assertEqual(getattr(self.cuda, "_lazy_init")(), "init done")  # result passed on
        self.assertEqual(self.rec.infos[0][0], "cuda_init")
        data = self.rec.infos[0][1]
        self.assertEqual(sorted(data), ["begin_ns", "end_ns"])
        self.assertGreaterEqual(data["begin_ns"], before)
        self.assertGreaterEqual(data["end_ns"] - data["begin_ns"], 0.01e9)
        self.assertLessEqual(data["end_ns"], time.monotonic_ns())
        self.assertIs(self.cuda._lazy_init, self.original)  # later calls cost nothing
        self.cuda._lazy_init()
        self.assertEqual(len(self.rec.infos), 1)
        self.assertEqual(self.fake.calls, 3)  # each original called once per call
        self.assertEqual(self.rec.errors, [])

    def test_a_failed_initialisation_passes_its_error_and_is_not_recorded(self):
        self.fake.fail_times = 1
        with self.assertRaisesRegex(RuntimeError, "no NVIDIA driver"):
            self.cuda._lazy_init()
        self.assertEqual(self.rec.infos, [])
        self.cuda._lazy_init()  # a later success is
        self.assertEqual([k for k, _ in self.rec.infos], ["cuda_init"])

    def test_initialised_elsewhere_is_not_recorded(self):
        self.fake.initialized = True  # a caller that bound _lazy_init by name did it
        self.cuda._lazy_init()
        self.assertEqual(self.rec.infos, [])
        self.assertIs(self.cuda._lazy_init, self.original)

    def test_quiet_passes_through(self):
        self.rec.quiet = True
        self.cuda._lazy_init()
        self.assertEqual(self.rec.infos, [])
        self.assertTrue(self.fake.initialized)

    def test_info_error_is_reported_not_raised(self):
        life = _life.Life(self.raise_, lambda w, e: self.rec.errors.append(w), lambda: False)
        self.cuda._lazy_init = life.wrap_lazy_init(self.cuda)(self.original)
        self.assertEqual(self.cuda._lazy_init(), "init done")
        self.assertEqual(self.rec.errors, ["info('cuda_init')"])

    @staticmethod
    def raise_(*args):
        raise RuntimeError("ring full")


# The stack dynamo has above a callback: convert_frame.py's _compile(code, ...) calling the
# handler (newer torch: with CallbackArgs). Compiled under a convert_frame.py file name.
CONVERT_FRAME = textwrap.dedent("""
    def _compile(code, handler, args, work_s):
        frame_state = object()
        if args is None:
            handler.run_start_callbacks()
        else:
            handler.run_start_callbacks(args)
        try:
            work(work_s)
        finally:
            if args is None:
                handler.run_end_callbacks()
            else:
                handler.run_end_callbacks(args)
""")


def user_forward(x):  # the code being compiled
    return x


class FakeHandler:
    """torch._dynamo.callback.callback_handler's surface."""

    def __init__(self):
        self.start_callbacks, self.end_callbacks = [], []

    def register_start_callback(self, cb):
        self.start_callbacks.append(cb)
        return cb

    def register_end_callback(self, cb):
        self.end_callbacks.append(cb)
        return cb

    def remove_start_callback(self, cb):
        self.start_callbacks.remove(cb)

    def remove_end_callback(self, cb):
        self.end_callbacks.remove(cb)

    def run_start_callbacks(self, *args):
        for cb in self.start_callbacks:
            cb(*args)

    def run_end_callbacks(self, *args):
        for cb in self.end_callbacks:
            cb(*args)


def fake_convert_frame():
    namespace = {"work": time.sleep}
    path = os.path.join(os.sep, "site-packages", "torch", "_dynamo", "convert_frame.py")
    exec(compile(CONVERT_FRAME, path, "exec"), namespace)
    return namespace["_compile"]


class CompileCallbackTest(unittest.TestCase):
    def setUp(self):
        self.rec = Recorder()
        self.life = self.rec.life()
        self.handler = FakeHandler()
        self.undo = []
        module = types.ModuleType(_life.CALLBACK_MODULE)
        module.callback_handler = self.handler
        patcher = unittest.mock.patch.dict(sys.modules, {_life.CALLBACK_MODULE: module})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.assertTrue(_life.watch_compiles(self.life, self.undo))
        self._compile = fake_convert_frame()

    def test_each_compilation_is_a_record_with_its_frame(self):
        trigger = types.SimpleNamespace(callback_trigger=types.SimpleNamespace(name="DYNAMO"),
                                        compile_id="0/0")
        self._compile(user_forward.__code__, self.handler, trigger, 0.01)  # newer torch
        self._compile(user_forward.__code__, self.handler, None, 0.0)  # older torch
        kinds = [k for k, _ in self.rec.infos]
        self.assertEqual(kinds, ["compile", "compile"])
        first, second = self.rec.infos[0][1], self.rec.infos[1][1]
        line = user_forward.__code__.co_firstlineno
        self.assertEqual(first["frame"], "test_life.py:%d user_forward" % line)
        self.assertEqual(first["trigger"], "DYNAMO")
        self.assertGreaterEqual(first["end_ns"] - first["begin_ns"], 0.01e9)
        self.assertNotIn("trigger", second)
        self.life.finish()
        self.assertEqual(self.rec.infos[-1], ("compile_totals", {
            "count": 2, "total_ns": sum(d["end_ns"] - d["begin_ns"] for _, d in
                                        self.rec.infos[:2])}))
        self.assertEqual(self.rec.errors, [])

    def test_records_are_capped_and_the_rest_counted(self):
        for _ in range(_life.MAX_COMPILE_RECORDS + 5):
            self._compile(user_forward.__code__, self.handler, None, 0.0)
        self.assertEqual(len(self.rec.infos), _life.MAX_COMPILE_RECORDS)
        self.life.finish()
        self.assertEqual(self.rec.infos[-1][1]["count"], _life.MAX_COMPILE_RECORDS + 5)

    def test_nested_compilation_is_one(self):
        self.handler.run_start_callbacks()
        self.handler.run_start_callbacks()
        self.handler.run_end_callbacks()
        self.handler.run_end_callbacks()
        self.handler.run_end_callbacks()  # unbalanced: ignored
        self.assertEqual([k for k, _ in self.rec.infos], ["compile"])
        self.assertIsNone(self.rec.infos[0][1]["frame"])  # no dynamo frame on the stack

    def test_no_compilation_no_totals(self):
        self.life.finish()
        self.assertEqual(self.rec.infos, [])

    def test_undo_removes_the_callbacks(self):
        self.assertEqual(len(self.handler.start_callbacks), 1)
        for undo in reversed(self.undo):
            undo()
        self.assertEqual((self.handler.start_callbacks, self.handler.end_callbacks), ([], []))

    def test_quiet_records_nothing(self):
        self.rec.quiet = True
        self._compile(user_forward.__code__, self.handler, None, 0.0)
        self.life.finish()
        self.assertEqual(self.rec.infos, [])


class PostImportTest(unittest.TestCase):
    """torch._dynamo is imported lazily (by torch.compile): the callbacks are registered when
    its callback module is imported, by a post-import hook."""

    def test_registered_at_import(self):
        with tempfile.TemporaryDirectory() as tmp:
            pkg = os.path.join(tmp, "fakedynamo_pkg")
            os.mkdir(pkg)
            with open(os.path.join(pkg, "__init__.py"), "w") as f:
                f.write("")
            with open(os.path.join(pkg, "callback.py"), "w") as f:
                f.write("class H:\n    def __init__(self): self.s, self.e = [], []\n"
                        "    def register_start_callback(self, cb): self.s.append(cb)\n"
                        "    def register_end_callback(self, cb): self.e.append(cb)\n"
                        "    def remove_start_callback(self, cb): self.s.remove(cb)\n"
                        "    def remove_end_callback(self, cb): self.e.remove(cb)\n"
                        "callback_handler = H()\n")
            sys.path.insert(0, tmp)
            undo = []
            meta_path = list(sys.meta_path)
            try:
                with unittest.mock.patch.object(_life, "CALLBACK_MODULE",
                                                "fakedynamo_pkg.callback"):
                    life = Recorder().life()
                    self.assertTrue(_life.watch_compiles(life, undo))
                    self.assertNotIn("fakedynamo_pkg.callback", sys.modules)  # not imported
                    module = importlib.import_module("fakedynamo_pkg.callback")
                    self.assertEqual(module.callback_handler.s, [life.on_compile_start])
                    self.assertEqual(sys.meta_path, meta_path)  # the finder removed itself
                    for u in reversed(undo):
                        u()
                    self.assertEqual(module.callback_handler.s, [])
            finally:
                sys.path.remove(tmp)
                sys.meta_path[:] = meta_path
                for name in ("fakedynamo_pkg", "fakedynamo_pkg.callback"):
                    sys.modules.pop(name, None)


@needs_torch
class AutoLifeTest(InProcessBase):
    """auto.install() with torch.cuda's lazy initialisation faked on this torch."""

    def fake_cuda(self, initialized=False):
        fake = FakeCuda(init_s=0.005)
        fake.initialized = initialized
        fake.module = torch.cuda
        env = unittest.mock.patch.dict(os.environ, {"STALLSCOPE_GPU_TIME": "0"})
        env.start()
        self.addCleanup(env.stop)
        for target, attr, value in ((torch.version, "cuda", "12.1"),
                                    (torch.cuda, "is_initialized", fake.is_initialized),
                                    (torch.cuda, "_lazy_init", fake._lazy_init)):
            patcher = unittest.mock.patch.object(target, attr, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        return fake

    def test_cuda_init_recorded_through_the_module_attribute(self):
        fake = self.fake_cuda()
        self.install()
        # torch's C++ does PyObject_CallMethod(torch.cuda, "_lazy_init"): an attribute lookup.
        getattr(sys.modules["torch.cuda"], "_lazy_init")()
        self.assertEqual(len(self.api.infos("cuda_init")), 1)
        self.assertEqual(fake.calls, 2)  # the call and the re-entering queued call
        tiny_run(epochs=1, checkpoint=False)
        backends = self.api.infos("backends")
        self.assertEqual(len(backends), 1)
        self.assertIs(backends[0]["cuda_initialized"], True)

    def test_initialised_before_install_is_not_wrapped(self):
        fake = self.fake_cuda(initialized=True)
        self.install()
        self.assertEqual(torch.cuda._lazy_init, fake._lazy_init)
        torch.cuda._lazy_init()
        self.assertEqual(self.api.infos("cuda_init"), [])

    def test_uninstall_puts_lazy_init_back(self):
        fake = self.fake_cuda()
        self.install()
        self.assertNotEqual(torch.cuda._lazy_init, fake._lazy_init)
        auto.uninstall()
        self.assertEqual(torch.cuda._lazy_init, fake._lazy_init)

    def test_nothing_in_a_worker(self):
        self.fake_cuda()
        self.install()
        _hooks.state.get_worker_info = lambda: object()
        torch.cuda._lazy_init()
        self.assertEqual(self.api.events, [])

    def test_cpu_torch_gets_no_wrapper(self):
        if torch.version.cuda is not None:
            self.skipTest("this torch is built with CUDA")
        original = torch.cuda._lazy_init
        self.install()
        self.assertIs(torch.cuda._lazy_init, original)
        tiny_run(epochs=1, checkpoint=False)
        self.assertEqual(self.api.infos("cuda_init"), [])
        self.assertEqual(self.api.infos("backends")[0]["cuda_initialized"], False)

    def test_backends_once_even_when_the_job_marks_steps(self):
        self.install()
        tiny_run(epochs=2, checkpoint=False, user_steps=lambda: self.api.step())
        self.assertEqual(len(self.api.infos("backends")), 1)
        self.assertTrue(_hooks.state.user_marks_steps)

    def test_backends_reads_change_nothing(self):
        before = (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(),
                  torch.cuda.is_initialized())
        data = _facts.backends(torch)
        self.assertEqual((data["cudnn_benchmark"], data["float32_matmul_precision"],
                          data["cuda_initialized"]), before)
        self.assertEqual(before, (torch.backends.cudnn.benchmark,
                                  torch.get_float32_matmul_precision(),
                                  torch.cuda.is_initialized()))

    def test_backends_of_a_torch_without_them(self):
        bare = types.SimpleNamespace(cuda=types.SimpleNamespace())
        self.assertEqual(_facts.backends(bare), {
            "cudnn_benchmark": None, "cudnn_deterministic": None,
            "float32_matmul_precision": None, "cuda_initialized": False})

    def test_a_forked_child_sends_its_own(self):
        self.install()
        tiny_run(epochs=1, checkpoint=False)
        _hooks.state.life.compile_count = 3
        auto._after_fork_in_child()
        self.assertFalse(_hooks.state.life.backends_sent)
        self.assertEqual(_hooks.state.life.compile_count, 0)

    def test_at_exit_totals_only_after_a_compile(self):
        self.install()
        auto._at_exit()
        self.assertEqual(self.api.infos("compile_totals"), [])

    @unittest.skipUnless(importlib.util.find_spec("torch") and hasattr(torch, "compile"),
                         "needs torch >= 2.0")
    def test_real_compile_records(self):
        if importlib.util.find_spec("torch._dynamo.callback") is None:
            self.skipTest("this torch has no torch._dynamo.callback")
        dynamo = importlib.import_module("torch._dynamo")
        dynamo.reset()
        self.install()

        def scaled(x):
            return (x * 2).sum()

        torch.compile(scaled, backend="eager")(torch.ones(3))
        compiles = self.api.infos("compile")
        self.assertGreaterEqual(len(compiles), 1)
        self.assertIn("scaled", compiles[0]["frame"])
        self.assertLessEqual(compiles[0]["begin_ns"], compiles[0]["end_ns"])
        auto._at_exit()
        self.assertEqual(self.api.infos("compile_totals")[0]["count"], len(compiles))


if __name__ == "__main__":
    unittest.main()
