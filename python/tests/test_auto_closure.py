"""Tests for phases inside an optimizer closure (issue 26, item 5): `optimizer.step(closure)` as
torch.optim's SGD and LBFGS take it, and as Lightning's automatic optimization calls it
(`optimizer.step(closure=closure)`, the closure running training_step, then backward). The
closure's forward and backward are forward_pass and backward_pass; optimizer_step is the
optimizer's own work around them (python/stallscope/_hooks.py, step_gives_way).

Every test runs twice: with patches (global_hooks=False, as on torch 1.13) and with torch's
global hooks (emulated by torch2_hooks where this torch lacks them).
"""

import sys
import time
import types
import unittest
import unittest.mock

from test_auto import FakeApi, InProcessBase, _hooks, auto, needs_torch, nn, torch, torch2_hooks
from test_cuda import FakeGpu

from stallscope import _state  # noqa: E402  (test_auto puts the package on sys.path)


class TimedApi(FakeApi):
    """FakeApi whose phase begins and ends carry their time: ("B"|"E", name, monotonic ns)."""

    def phase(self, name):
        api = self

        class _Phase:
            def __enter__(self):
                api.events.append(("B", name, time.monotonic_ns()))
                return self

            def __exit__(self, *exc):
                api.events.append(("E", name, time.monotonic_ns()))

        return _Phase()

    def phases(self):
        """Phase begin/end names only."""
        return [n for n in self.names() if n[:2] in ("B:", "E:")]

    def totals_ns(self):
        """{phase: total ns}, asserting that phases never overlap (each ends before the next
        begins)."""
        totals, open_ = {}, None
        for e in self.events:
            if e[0] == "B":
                assert open_ is None, ("nested phases", open_, e)
                open_ = e
            elif e[0] == "E":
                assert open_ is not None and open_[1] == e[1], ("unmatched end", open_, e)
                totals[e[1]] = totals.get(e[1], 0) + e[2] - open_[2]
                open_ = None
        assert open_ is None, ("left open", open_)
        return totals


def SleepyNet(forward_s=0.0):  # noqa: N802 (a class where torch is)
    """Linear(4, 1) whose forward first sleeps forward_s."""

    class SleepyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, x):
            if forward_s:
                time.sleep(forward_s)
            return self.lin(x)

    return SleepyNet()


def sgd_closure_loop(steps, forward_s=0.0, seed=0, optimizer="sgd", before_s=0.0, after_s=0.0):
    """The closure form of a training loop: zero_grad, forward, loss, backward inside the
    closure. before_s/after_s: the optimizer's own work before and after it calls the closure.
    Returns (losses, parameters, closure calls)."""
    torch.manual_seed(seed)
    model = SleepyNet(forward_s)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    calls = []

    class SlowSGD(torch.optim.SGD):
        def step(self, closure=None):
            time.sleep(before_s)
            loss = super().step(closure)
            time.sleep(after_s)
            return loss

    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
    else:
        opt = SlowSGD(model.parameters(), lr=0.1)

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    losses = [float(opt.step(closure)) for _ in range(steps)]
    return losses, [p.detach().clone() for p in model.parameters()], len(calls)


class ClosureTests:
    """Mixed into a test case with global_hooks set."""

    def setUp(self):
        super().setUp()
        self.api = TimedApi()
        if self.global_hooks:
            torch2_hooks.emulate_missing(self)
        self.install(global_hooks=self.global_hooks)
        want = "global hook" if self.global_hooks else "patch"
        self.assertEqual(auto.mechanisms()["optimizer_step"], want)
        self.assertEqual(auto.mechanisms()["forward_pass"], want)

    def steps(self):
        """The phase names of each step, split at the step boundaries."""
        out, cur = [], []
        for n in self.api.names():
            if n == "S":
                out.append(cur)
                cur = []
            elif n[:2] in ("B:", "E:"):
                cur.append(n)
        return out, cur

    # ------------------------------------------------------------------------------------------

    def test_sgd_closure_phases(self):
        sgd_closure_loop(steps=3)
        steps, after = self.steps()
        self.assertEqual(len(steps), 3)
        for phases in steps:
            self.assertEqual(phases, [
                "B:optimizer_step", "E:optimizer_step",  # step() up to its closure call
                "B:forward_pass", "E:forward_pass",
                "B:backward_pass", "E:backward_pass",
                "B:optimizer_step", "E:optimizer_step",  # the update, after the closure
            ])
        self.assertEqual(after, [])
        self.assertIsNone(_hooks.state.tls.active)
        self.assertIsNone(_hooks.state.tls.suspended)

    def test_lbfgs_calls_its_closure_several_times_per_step(self):
        _, _, calls = sgd_closure_loop(steps=2, optimizer="lbfgs")
        steps, after = self.steps()
        self.assertEqual(len(steps), 2)
        self.assertEqual(after, [])
        names = self.api.names()
        self.assertEqual(names.count("B:forward_pass"), calls)
        self.assertEqual(names.count("B:backward_pass"), calls)
        self.assertGreater(calls, 2)
        for phases in steps:
            n = phases.count("B:forward_pass")
            self.assertEqual(phases, ["B:optimizer_step", "E:optimizer_step"] + [
                "B:forward_pass", "E:forward_pass", "B:backward_pass", "E:backward_pass",
                "B:optimizer_step", "E:optimizer_step"] * n)

    def test_times_are_split_not_double_counted(self):
        forward_s, before_s, after_s, steps = 0.1, 0.02, 0.03, 3
        wall = time.monotonic_ns()
        sgd_closure_loop(steps=steps, forward_s=forward_s, before_s=before_s, after_s=after_s)
        wall = time.monotonic_ns() - wall
        totals = self.api.totals_ns()  # asserts no phase nests in another
        self.assertGreaterEqual(totals["forward_pass"], steps * forward_s * 1e9)
        own = steps * (before_s + after_s) * 1e9
        self.assertGreaterEqual(totals["optimizer_step"], own)
        # The closure's forward is not in optimizer_step (it would add 0.3 s).
        self.assertLess(totals["optimizer_step"], own + steps * forward_s * 1e9 * 0.8)
        self.assertLessEqual(sum(totals.values()), wall)

    def test_lightning_pattern(self):
        """Lightning's automatic optimization: optimizer.step(closure=closure), the closure
        calls training_step (the module call plus the loss and its logging: host syncs of the
        loop), then backward; after the backward, Lightning's own hooks run inside step."""
        model = SleepyNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batch = (torch.randn(8, 4), torch.randn(8, 1))

        def training_step(b):
            loss = ((model(b[0]) - b[1]) ** 2).mean()
            loss.item()  # self.log("loss", loss, prog_bar=True)
            return loss

        def closure():
            loss = training_step(batch)
            opt.zero_grad()
            loss.backward()
            return loss

        for _ in range(2):
            opt.step(closure=closure)
        steps, _ = self.steps()
        self.assertEqual(len(steps), 2)
        self.assertEqual(steps[1], [
            "B:optimizer_step", "E:optimizer_step", "B:forward_pass", "E:forward_pass",
            "B:backward_pass", "E:backward_pass", "B:optimizer_step", "E:optimizer_step"])
        # the training_step's .item() is the loop's sync, counted as outside a step phase
        self.assertEqual(self.api.names().count("C:host_sync.item"), 2)

    def test_adam_internal_syncs_stay_uncounted(self):
        model = SleepyNet()
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)

        def closure():
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            return loss

        for _ in range(2):
            opt.step(closure)
        self.assertEqual(self.api.names().count("C:host_sync.item"), 0)
        self.assertEqual(self.api.names().count("S"), 2)

    def test_results_identical_with_and_without_hooks(self):
        for optimizer in ("sgd", "lbfgs"):
            with self.subTest(optimizer=optimizer):
                auto.uninstall()
                plain = sgd_closure_loop(steps=3, seed=4, optimizer=optimizer)
                self.install(TimedApi(), global_hooks=self.global_hooks)
                hooked = sgd_closure_loop(steps=3, seed=4, optimizer=optimizer)
                self.assertEqual(plain[0], hooked[0])
                self.assertEqual(plain[2], hooked[2])
                for a, b in zip(plain[1], hooked[1]):
                    self.assertTrue(torch.equal(a, b))

    def assert_clean_after(self):
        """No phase open, nothing suspended, and a plain step records as usual."""
        self.assertIsNone(_hooks.state.tls.active)
        self.api.events.clear()
        _hooks.state.primary_optimizer = None  # the new optimizer ends the step
        model = SleepyNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        self.assertEqual(self.api.phases(), [
            "B:forward_pass", "E:forward_pass", "B:backward_pass", "E:backward_pass",
            "B:optimizer_step", "E:optimizer_step"])
        self.assertEqual(self.api.names().count("S"), 1)
        self.assertIsNone(_hooks.state.tls.active)
        self.assertIsNone(_hooks.state.tls.suspended)

    def test_exception_in_the_closures_forward(self):
        class Boom(nn.Module):
            def forward(self, x):
                raise ValueError("from the job's forward")

        boom = Boom()
        opt = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)
        with self.assertRaisesRegex(ValueError, "from the job's forward"):
            opt.step(lambda: boom(torch.ones(1)))
        self.assertEqual(self.api.phases(), ["B:optimizer_step", "E:optimizer_step",
                                             "B:forward_pass", "E:forward_pass"])
        self.assertNotIn("S", self.api.names())  # a step that raised ends no step
        self.assert_clean_after()

    def test_exception_in_the_closures_backward(self):
        class Fails(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                raise RuntimeError("from the job's backward")

        param = nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([param], lr=0.1)

        def closure():
            loss = Fails.apply(param).sum()
            loss.backward()
            return loss

        with self.assertRaisesRegex(RuntimeError, "from the job's backward"):
            opt.step(closure)
        self.assertEqual(self.api.phases(), ["B:optimizer_step", "E:optimizer_step",
                                             "B:backward_pass", "E:backward_pass"])
        self.assert_clean_after()

    def test_closure_without_backward(self):
        """A closure that only evaluates: the step's end still ends one step."""
        model = SleepyNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step(lambda: model(torch.ones(1, 4)).sum())
        steps, after = self.steps()
        self.assertEqual(steps, [["B:optimizer_step", "E:optimizer_step",
                                  "B:forward_pass", "E:forward_pass"]])
        self.assert_clean_after()

    def test_step_inside_a_step_with_a_closure(self):
        """A subclass whose step calls super().step(closure): one step, one boundary."""
        class Outer(torch.optim.SGD):
            def step(self, closure=None):
                return super().step(closure)

        torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)  # SGD.step wrapped too
        model = SleepyNet()
        opt = Outer(model.parameters(), lr=0.1)
        x = torch.ones(2, 4)

        def closure():
            opt.zero_grad()
            loss = model(x).sum()
            loss.backward()
            return loss

        for _ in range(2):
            opt.step(closure)
        steps, after = self.steps()
        self.assertEqual(len(steps), 2)
        self.assertEqual(steps[1], [
            "B:optimizer_step", "E:optimizer_step", "B:forward_pass", "E:forward_pass",
            "B:backward_pass", "E:backward_pass", "B:optimizer_step", "E:optimizer_step"])
        self.assertIsNone(_hooks.state.tls.suspended)

    def test_module_called_by_the_optimizer_without_grad_is_no_phase(self):
        """A module the optimizer itself calls under no_grad stays inside optimizer_step."""
        probe = nn.Linear(2, 2)

        class Probing(torch.optim.SGD):
            @torch.no_grad()
            def step(self, closure=None):
                probe(torch.ones(1, 2))
                return super().step(closure)

        opt = Probing([nn.Parameter(torch.ones(1))], lr=0.1)
        opt.step()
        self.assertEqual(self.api.phases(), ["B:optimizer_step", "E:optimizer_step"])

    def test_closure_phases_get_gpu_times(self):
        gpu = FakeGpu(work_ms=1.0)
        gpu.initialized = True
        gpu.done_ms = float("inf")
        for target, value in ((torch.version, "cuda"), (torch.cuda, "is_initialized"),
                              (torch.cuda, "Event")):
            patcher = unittest.mock.patch.object(
                target, value, {"cuda": "12.1", "is_initialized": gpu.is_initialized,
                                "Event": gpu.Event}[value])
            patcher.start()
            self.addCleanup(patcher.stop)
        auto.uninstall()
        self.install(global_hooks=self.global_hooks)
        sgd_closure_loop(steps=2)
        auto._at_exit()
        spans = [e[1] for e in self.api.events if e[0] == "G"]
        self.assertEqual(spans.count("forward_pass"), 2)
        self.assertEqual(spans.count("backward_pass"), 2)
        self.assertEqual(spans.count("optimizer_step"), 4)  # two instances per step


@needs_torch
class PatchedClosureTest(ClosureTests, InProcessBase):
    global_hooks = False


@needs_torch
class GlobalHookClosureTest(ClosureTests, InProcessBase):
    global_hooks = True

    def test_step_raising_after_the_closure_is_closed_by_the_next_hook(self):
        """Global hooks run no post hook when step raises: the re-opened step stays open
        until the next hook sees its call is over (as without a closure)."""
        model = SleepyNet()

        class Late(torch.optim.SGD):
            def step(self, closure=None):
                closure()
                raise RuntimeError("after the closure")

        opt = Late(model.parameters(), lr=0.1)

        def closure():
            model(torch.ones(1, 4)).sum().backward()

        with self.assertRaises(RuntimeError):
            opt.step(closure)
        self.assertEqual(_hooks.state.tls.active, "optimizer_step")
        self.api.events.clear()
        model(torch.ones(1, 4))
        self.assertEqual(self.api.phases(), ["E:optimizer_step", "B:forward_pass",
                                             "E:forward_pass"])
        self.assertNotIn("S", self.api.names())
        self.assert_clean_after()


class FakeOptimizer:
    """Weakly referenceable, as optimizers are."""


class SuspendResumeTest(unittest.TestCase):
    """The bookkeeping of a suspended optimizer_step (_hooks.step_gives_way, resume_step and the
    step post hook) on a state set up by hand: no torch needed."""

    def setUp(self):
        auto.uninstall()
        self.api = FakeApi()
        state = _hooks.state
        state.tls = _state.ThreadState()
        state.api, state.api_step = self.api, self.api.step
        state.torch = types.SimpleNamespace(is_grad_enabled=lambda: self.grad)
        state.get_worker_info = lambda: None
        state.is_compiling = None
        state.primary_optimizer, state.user_marks_steps = None, False
        state.process_info_sent = True  # no info("torch") from a fake torch
        state.off = False
        self.grad = True
        self.optimizer = FakeOptimizer()
        self.addCleanup(auto.uninstall)

    def test_suspend_and_resume(self):
        _hooks._open("optimizer_step", self.optimizer, None)
        self.assertTrue(_hooks.step_gives_way(True))
        tls = _hooks.state.tls
        self.assertIsNone(tls.active)
        self.assertEqual(tls.suspended, [self.optimizer, 1, None])
        _hooks.resume_step()
        self.assertEqual((tls.active, tls.owner, tls.suspended), ("optimizer_step",
                                                                  self.optimizer, None))
        self.assertEqual(self.api.names(), ["B:optimizer_step", "E:optimizer_step",
                                            "B:optimizer_step"])

    def test_a_forward_without_grad_does_not_suspend(self):
        _hooks._open("optimizer_step", self.optimizer, None)
        self.grad = False
        self.assertFalse(_hooks.step_gives_way(True))
        self.assertTrue(_hooks.step_gives_way(False))  # a backward does

    def test_a_step_that_is_over_is_not_resumed(self):
        def step_call():  # the frame of a step call, over once it returns
            _hooks._open("optimizer_step", self.optimizer, sys._getframe())
            return _hooks.step_gives_way(False)

        self.assertTrue(step_call())
        _hooks.resume_step()
        self.assertIsNone(_hooks.state.tls.active)
        self.assertIsNone(_hooks.state.tls.suspended)
        self.assertEqual(self.api.names(), ["B:optimizer_step", "E:optimizer_step"])

    def test_post_hook_of_a_suspended_step_ends_it_once(self):
        _hooks._open("optimizer_step", self.optimizer, None)
        _hooks.state.tls.depth = 2  # a step inside a step
        _hooks.step_gives_way(True)
        _hooks.optimizer_post_hook(self.optimizer, (), {})
        self.assertEqual(self.api.names().count("S"), 0)
        _hooks.optimizer_post_hook(self.optimizer, (), {})
        self.assertEqual(self.api.names(), ["B:optimizer_step", "E:optimizer_step", "S"])
        self.assertIsNone(_hooks.state.tls.suspended)


if __name__ == "__main__":
    unittest.main()
